"""BabyAI, TextArena and Reasoning Gym envs: random and expert success, steps/s at 1 and 64
concurrent episodes, memory per episode, and how often state keys recur in a group of 8.

No model is involved (SmolLM2 success comes from ``agentgym eval``; see docs/text-worlds.md).
The random policy plays uniformly random *well-formed* moves: one of the six BabyAI actions;
a random move in each TextArena game's own format; for Reasoning Gym, the gold answer of
another entry of the same dataset (right format, unrelated content). The expert is the env's
``expert_action`` (minigrid's BabyAI bot, the TextArena oracles, the dataset's gold answer).

- steps/s: N workers, each owning one env, play random episodes back to back (asyncio, one
  process), counting env steps per wall-clock second.
- memory per episode: in a fresh process, the resident set size with 64 envs made and reset
  minus that with one, divided by 63.
- state-key recurrence: for each task, 8 random rollouts from the same seed; the share of
  steps whose state key (before the action) occurs at least twice among the group's steps,
  and the share whose key also occurs in another rollout of the group.

    python benchmarks/text_games.py [--quick]
    python benchmarks/text_games.py --speed     # only steps/s at 1 and 64, and memory
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import time
from typing import Any

import agentgym
from agentgym import Message
from agentgym.envs.babyai import ACTIONS, LEVELS
from agentgym.envs.reasoning_gym import CURATED
from agentgym.envs.textarena import EXPERTS, GAMES
from agentgym.envs.textarena.fidelity import RANDOM_MOVES
from agentgym.trainers.advantages.diagnostics import step_group_recurrence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import machine_note  # noqa: E402

PROBES = {"babyai": "babyai/GoToLocal-v0", "textarena": "textarena/FrozenLake-v0",
          "reasoning-gym": "reasoning-gym/ChainSum-v0"}
"""The env each family's speed and memory are measured on."""

TEXTARENA_RANDOM = RANDOM_MOVES
"""A uniformly random move in each TextArena game's own format (shared with the
differential check, :mod:`agentgym.envs.textarena.fidelity`)."""


def random_move(env: Any, rng: random.Random) -> Message:
    """A uniformly random well-formed move for ``env`` (see the module docstring)."""
    inner = env.unwrapped if hasattr(env, "unwrapped") else env
    name = type(inner).__name__
    if name == "BabyAIEnv":
        return Message("assistant", rng.choice(ACTIONS))
    if name == "TextArenaEnv":
        return Message("assistant", TEXTARENA_RANDOM[inner.game](rng))
    other = inner.data[rng.randrange(len(inner.data))]  # the answer to another question
    return Message("assistant", f"<answer>{other['answer']}</answer>")


async def episode(env: Any, seed: int, policy: str, rng: random.Random
                  ) -> tuple[bool, list[str]]:
    """One episode; (success, the state key before each step)."""
    _, info = await env.reset(seed=seed)
    keys, key = [], info.get("state_key")
    while True:
        action = env.expert_action() if policy == "expert" else random_move(env, rng)
        result = await env.step(action)
        keys.append(key)
        key = result.info.get("state_key")
        if result.done:
            return bool(result.info.get("success")), keys


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def success(env_id: str, policy: str, seeds: range) -> float:
    env = agentgym.make(env_id)
    rng = random.Random(0)
    wins = [(await episode(env, s, policy, rng))[0] for s in seeds]
    await env.aclose()
    return sum(wins) / len(wins)


async def throughput(env_id: str, concurrency: int, episodes: int) -> float:
    envs = [agentgym.make(env_id) for _ in range(concurrency)]
    seeds = iter(range(episodes))
    steps = 0

    async def worker(env: Any, rng: random.Random) -> None:
        nonlocal steps
        for seed in seeds:
            steps += len((await episode(env, seed, "random", rng))[1])
            await asyncio.sleep(0)  # let the other workers in, as a rollout would

    start = time.perf_counter()
    await asyncio.gather(*(worker(e, random.Random(i)) for i, e in enumerate(envs)))
    wall = time.perf_counter() - start
    return steps / wall


_MEMORY_PROBE = """
import asyncio, gc, sys
import agentgym
sys.path.insert(0, {here!r})
from text_games import rss_mib

async def main():
    envs = [agentgym.make({env_id!r})]
    await envs[0].reset(seed=0)
    gc.collect()
    one = rss_mib()
    envs += [agentgym.make({env_id!r}) for _ in range({n} - 1)]
    for i, env in enumerate(envs[1:], start=1):
        await env.reset(seed=i)
    gc.collect()
    print((rss_mib() - one) / ({n} - 1))

asyncio.run(main())
"""


def memory_per_episode(env_id: str, n: int = 64) -> float:
    """MiB per extra episode: RSS of a fresh process with ``n`` envs open minus with one."""
    code = _MEMORY_PROBE.format(here=os.path.dirname(os.path.abspath(__file__)),
                                env_id=env_id, n=n)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    return float(out.strip().splitlines()[-1])


async def recurrence(env_id: str, tasks: range, group: int = 8) -> tuple[float, float]:
    """Shares of steps whose key recurs in the group at all, and in another rollout of it."""
    env = agentgym.make(env_id)
    rng = random.Random(0)
    groups = [[(await episode(env, seed, "random", rng))[1] for _ in range(group)]
              for seed in tasks]
    r = step_group_recurrence(groups)  # the trainer's diagnostic, on random play
    return r.grouped[0], r.across


async def main(quick: bool) -> None:
    n = 3 if quick else 10
    families = {
        "babyai": [f"babyai/{lv}-v0" for lv in LEVELS],
        "textarena": [f"textarena/{g}-v0" for g in GAMES],
        "reasoning-gym": [f"reasoning-gym/{d}-v0" for d in CURATED],
    }
    experts = {"babyai": set(families["babyai"]), "reasoning-gym": set(families["reasoning-gym"]),
               "textarena": {f"textarena/{g}-v0" for g in EXPERTS}}
    probe = PROBES
    print(f"load average at start: {os.getloadavg()}")
    for family, ids in families.items():
        print(f"\n## {family}\n\n| env | random success | expert success | "
              "state_key recurs in the group of 8 (random) | ... in another rollout |\n"
              "|---|---|---|---|---|")
        for env_id in ids:
            seeds = range(1_000_000, 1_000_000 + n)
            rand = await success(env_id, "random", seeds)
            expert = (f"{await success(env_id, 'expert', seeds):.0%}"
                      if env_id in experts[family] else "n/a")
            rec, other = await recurrence(env_id, range(1_000_000,
                                                         1_000_000 + (2 if quick else 4)))
            print(f"| {env_id} | {rand:.0%} | {expert} | {rec:.0%} | {other:.0%} |", flush=True)
        one = await throughput(probe[family], 1, 4 if quick else 16)
        many = await throughput(probe[family], 64, 64 if quick else 256)
        mem = memory_per_episode(probe[family])
        print(f"\n{probe[family]}: {one:,.0f} steps/s with 1 episode, {many:,.0f} steps/s with "
              f"64 concurrent; {mem:.2f} MiB per episode (64 open)", flush=True)
    print(f"\nload average at end: {os.getloadavg()}")


async def speed() -> None:
    """Steps/s at 1 and 64 concurrent episodes and memory per episode, one table."""
    note = machine_note()
    rows = []
    for family, env_id in PROBES.items():
        one = await throughput(env_id, 1, 16)
        many = await throughput(env_id, 64, 256)
        mem = memory_per_episode(env_id)
        rows.append(f"| {family} | `{env_id}` | {one:,.0f} | {many:,.0f} | {mem:.3f} |")
        print(rows[-1], flush=True)
    print(f"\nMeasured with `python benchmarks/text_games.py --speed` on {note}; load average "
          f"at the end {' / '.join(f'{x:.1f}' for x in os.getloadavg())}.\n\n"
          "| family | env | steps/s, 1 episode | steps/s, 64 concurrent | MiB per episode "
          "(64 open) |\n|---|---|---|---|---|\n" + "\n".join(rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer seeds (a smoke run)")
    parser.add_argument("--memory-only", action="store_true", help="only memory per episode")
    parser.add_argument("--speed", action="store_true",
                        help="only steps/s at 1 and 64 concurrent episodes, and memory")
    args = parser.parse_args()
    if args.speed:
        asyncio.run(speed())
    elif args.memory_only:
        for env_id in ("babyai/GoToLocal-v0", "textarena/FrozenLake-v0",
                       "reasoning-gym/ChainSum-v0"):
            print(f"{env_id}: {memory_per_episode(env_id):.3f} MiB per episode (64 open)")
    else:
        asyncio.run(main(args.quick))
