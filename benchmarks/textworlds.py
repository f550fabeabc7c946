"""ScienceWorld and TextWorldExpress: speed, memory, random / SmolLM2 success, state revisits.

Per family:

- **steps/s** at 1 and 64 concurrent episodes: workers play episodes back to back with
  uniformly random *valid* actions (from ``info["valid_actions"]``), each episode in a fresh env
  (as a rollout does), cycling through the family's tasks, so the figure is the engine's, not a
  model's;
- **memory per episode**: resident set (RSS) of the pooled JVM with 64 episodes open minus
  that with 1, divided by 63; beside it the RSS of the package's own one-JVM-per-episode
  setup with one episode open;
- **random success**: episodes of the random valid-action policy at the registered turn limit;
- **state_key recurrence**: groups of 8 rollouts of one task; the share of steps whose
  (pre-action) ``state_key`` occurs at least twice in the group's steps, i.e. steps that
  GiGPO/HGPO can put in a step-level group of size > 1;
- **SmolLM2** (``--smollm2``, a separate run): success and recurrence of the embedded
  SmolLM2-135M-Instruct (``window`` context of 2 turns, sampling at temperature 1) in groups
  of 8, with a short turn cap because CPU generation on a loaded 2-core machine is slow.

The figures are written into ``docs/text-worlds.md`` (the two sections named below).

    python benchmarks/textworlds.py [--quick]
    python benchmarks/textworlds.py --smollm2 [--tasks 1] [--turns 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from results import machine_note, write_section

import agentgym
from agentgym import Message
from agentgym.envs.scienceworld import ScienceWorldEnv
from agentgym.envs.scienceworld import engine as sw_engine
from agentgym.envs.textworld_express import TextWorldExpressEnv
from agentgym.envs.textworld_express import engine as twx_engine
from agentgym.evaluation.metrics import succeeded
from agentgym.trainers.advantages.diagnostics import step_group_recurrence

DOC = Path(__file__).resolve().parent.parent / "docs" / "text-worlds.md"
FIGURES_SECTION = "ScienceWorld and TextWorldExpress: speed, memory, random policy"
SMOLLM2_SECTION = "ScienceWorld and TextWorldExpress: SmolLM2"
SW_TASKS = ("find-living-thing", "chemistry-mix", "boil", "identify-life-stages-1",
            "measure-melting-point-known-substance", "grow-plant", "test-conductivity",
            "inclined-plane-determine-angle")
TWX_GAMES = ("coin", "cookingworld", "twc", "mapreader", "arithmetic", "sorting", "simonsays",
             "peckingorder")
FAMILIES = {
    "ScienceWorld": (lambda i: ScienceWorldEnv(task=SW_TASKS[i % len(SW_TASKS)], split="test"),
                     "scienceworld/ScienceWorld-v0", SW_TASKS),
    "TextWorldExpress": (lambda i: TextWorldExpressEnv(TWX_GAMES[i % len(TWX_GAMES)],
                                                       split="test"),
                         "twx/<Game>-v0", TWX_GAMES),
}
MAX_TURNS = 100  # the registered turn limit of both families


async def random_episode(env, seed: int, rng: np.random.Generator,
                         max_turns: int = MAX_TURNS) -> tuple[list[str], bool, int]:
    """One episode of uniformly random valid actions: state keys seen, success, steps."""
    _, info = await env.reset(seed=seed)
    keys, valid = [info["state_key"]], list(info["valid_actions"])
    for _ in range(max_turns):
        action = valid[int(rng.integers(len(valid)))] if valid else "look around"
        result = await env.step(Message("assistant", action))
        if result.done:
            return keys, bool(result.info["success"]), len(keys)
        keys.append(result.info["state_key"])
        valid = result.info["valid_actions"] or valid
    return keys, False, len(keys)


def recurrence(groups: list[list[list[str]]]) -> tuple[float, float]:
    """Shares of steps whose state key recurs in the group: anywhere, and in another rollout.

    The first counts every step whose key occurs at least twice among the group's steps (a
    step-level group of size > 1 for GiGPO/HGPO); the second only those whose key also occurs
    in another rollout of the group (a revisit that one rollout's loops cannot explain). Both
    from :func:`agentgym.trainers.advantages.diagnostics.step_group_recurrence`.
    """
    r = step_group_recurrence(groups)
    return r.grouped[0], r.across


async def throughput(make, concurrency: int, seconds: float) -> float:
    """Env steps per second with ``concurrency`` workers.

    As in a rollout, every episode gets a fresh env (engine creation and task loading are
    counted), and worker ``i`` plays tasks ``i, i + concurrency, ...`` round the family's list.
    """
    steps = 0
    stop = time.perf_counter() + seconds

    async def worker(i: int) -> None:
        nonlocal steps
        rng = np.random.default_rng(i)
        episode = i
        while time.perf_counter() < stop:
            env = make(episode)
            _, _, n = await random_episode(env, episode, rng)
            await env.aclose()
            steps += n
            episode += concurrency

    start = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return steps / (time.perf_counter() - start)


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


async def memory(family: str, make) -> tuple[float, float]:
    """(MiB per pooled episode, MiB of the package's own JVM with one episode)."""
    pool = (sw_engine if family == "ScienceWorld" else twx_engine).pool()
    pool.shutdown()  # a fresh JVM, so the figures do not depend on earlier runs
    envs = [make(0)]
    await envs[0].reset(seed=0)
    one = rss_mib(pool.stats()[0][1])
    for i in range(1, 64):
        envs.append(make(i))
        await envs[-1].reset(seed=i)
        for action in ("look around", "inventory"):
            await envs[-1].step(Message("assistant", action))
    many = rss_mib(pool.stats()[0][1])
    for env in envs:
        await env.aclose()
    per_episode = (many - one) / 63
    module = "scienceworld" if family == "ScienceWorld" else "textworld_express"
    code = (f"import os\nfrom {module} import *\n"
            + ("e = ScienceWorldEnv(); e.load('find-living-thing', 0, ''); e.reset()\n"
               if family == "ScienceWorld" else
               "e = TextWorldExpressEnv(); e.reset(seed=0, gameName='cookingworld')\n")
            + "pid = e._gateway.java_process.pid\n"
            + "print(int(open(f'/proc/{pid}/status').read().split('VmRSS:')[1].split()[0]))\n"
            + "e.close()\n")
    out = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", code],
                                  capture_output=True, text=True, check=True, timeout=300)
    return per_episode, int(out.stdout.split()[-1]) / 1024


async def random_success(make, tasks: int, group: int
                         ) -> tuple[float, float, tuple[float, float]]:
    """(success rate, mean steps, state-key recurrence) of random groups of ``group``."""
    groups, wins, lengths = [], [], []
    for t in range(tasks):
        envs = [make(t) for _ in range(group)]
        results = await asyncio.gather(*(random_episode(env, t, np.random.default_rng(
            100 * t + g)) for g, env in enumerate(envs)))
        groups.append([keys for keys, _, _ in results])
        wins += [won for _, won, _ in results]
        lengths += [n for _, _, n in results]
        for env in envs:
            await env.aclose()
    return float(np.mean(wins)), float(np.mean(lengths)), recurrence(groups)


async def smollm2(make, tasks: int, turns: int
                  ) -> tuple[float, tuple[float, float], int, int]:
    """(success, recurrence, finished episodes, error episodes) of SmolLM2, groups of 8."""
    from agentgym.context import ContextConfig
    from agentgym.policies import SamplingParams
    from agentgym.policies.factory import make_agent
    from agentgym.rollout import RolloutConfig, run_groups

    agent = make_agent("smollm2", context=ContextConfig(mode="window", history_length=2),
                       sampling=SamplingParams(temperature=1.0, max_tokens=24, seed=0))
    counter = iter(range(10**6))
    trajectories = await run_groups(
        lambda: make(next(counter) // 8), agent, range(tasks),
        RolloutConfig(group_size=8, concurrency=8, max_steps=turns, step_timeout=900.0,
                      episode_timeout=7200.0))
    groups: dict[str, list[list[str]]] = {}
    for traj in trajectories:
        groups.setdefault(traj.group_id, []).append([s.state_key for s in traj.steps])
    done = [t for t in trajectories if t.status != "error"]
    for t in trajectories:
        if t.status == "error":
            print("error episode:", t.error)
    success = np.mean([succeeded(t) for t in done]) if done else float("nan")
    errors = len(trajectories) - len(done)
    return float(success), recurrence(list(groups.values())), len(done), errors


async def main(quick: bool) -> None:
    load = os.getloadavg()
    sections = []
    for family, (make, env_id, tasks) in FAMILIES.items():
        seconds = 20 if quick else 60
        mem, own = await memory(family, make)
        print(f"{family}: {mem:.1f} MiB/episode pooled, {own:.0f} MiB own JVM")
        one = await throughput(make, 1, seconds)
        many = await throughput(make, 64, seconds)
        print(f"{family}: {one:.1f} steps/s at 1, {many:.1f} at 64")
        n_tasks = 2 if quick else len(tasks)
        win, length, rec = await random_success(make, n_tasks, 8)
        print(f"{family}: random success {win:.1%}, {length:.1f} steps, recurrence {rec}")
        sections.append((family, {"env": env_id, "one": one, "many": many, "mem": mem,
                                  "own": own, "win": win, "length": length, "rec": rec,
                                  "episodes": 8 * n_tasks, "tasks": n_tasks}))
    _write(sections, load, quick)


async def main_smollm2(tasks: int, turns: int) -> None:
    load = os.getloadavg()
    rows = []
    for family, (make, _, names) in FAMILIES.items():
        success, rec, n, errors = await smollm2(make, tasks, turns)
        print(f"{family}: SmolLM2 success {success:.1%}, recurrence {rec}, {n} episodes, "
              f"{errors} errors")
        rows.append(f"| {family} ({', '.join(names[:tasks])}) | {success:.1%} | {rec[0]:.1%} "
                    f"| {rec[1]:.1%} | {n} | {errors} |")
    lines = [f"Measured with `python benchmarks/textworlds.py --smollm2 --tasks {tasks} "
             f"--turns {turns}` on {machine_note(load)} (CPU generation). "
             "SmolLM2-135M-Instruct, "
             f"`window` context of 2 turns, temperature 1, at most 24 new tokens a turn, "
             f"{turns} turns an episode (not the registered 100: CPU generation), groups of 8 "
             "rollouts of each task, test split.", "",
             "| family (tasks) | SmolLM2 success | state_key recurs in the group of 8 "
             "| ... in another rollout | episodes | error episodes |",
             "|---|---|---|---|---|---|", *rows]
    write_section(SMOLLM2_SECTION, "\n".join(lines), path=DOC)


def _write(sections, load, quick: bool) -> None:
    flag = " --quick" if quick else ""
    lines = [
        f"Measured with `python benchmarks/textworlds.py{flag}` on {machine_note(load)}. "
        "Steps/s are env steps with a random valid-action policy (no model), each episode in a "
        "fresh env as in a rollout (engine creation and task loading counted), cycling "
        f"through the tasks {', '.join(SW_TASKS)} (ScienceWorld, test split) and every "
        "TextWorldExpress game (engine defaults, test split), so they bound what a "
        "model-driven rollout can reach. Random success and recurrence: one test task per "
        "ScienceWorld task type / TextWorldExpress game listed, 8 rollouts each, 100 turns.",
        "",
        "| family | steps/s, 1 episode | steps/s, 64 episodes | MiB per episode (pooled JVM) "
        "| MiB, package's own JVM for 1 episode | random success | random steps/episode "
        "| state_key recurs in the group of 8 (random) | ... in another rollout |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for family, r in sections:
        lines.append(f"| {family} | {r['one']:.1f} | {r['many']:.1f} | {r['mem']:.1f} | "
                     f"{r['own']:.0f} | {r['win']:.1%} ({r['episodes']} episodes, "
                     f"{r['tasks']} tasks) | {r['length']:.1f} | {r['rec'][0]:.1%} | "
                     f"{r['rec'][1]:.1%} |")
    write_section(FIGURES_SECTION, "\n".join(lines), path=DOC)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--smollm2", action="store_true", help="only the SmolLM2 figures")
    parser.add_argument("--tasks", type=int, default=1, help="SmolLM2: tasks per family")
    parser.add_argument("--turns", type=int, default=8, help="SmolLM2: turns per episode")
    args = parser.parse_args()
    agentgym.envs  # noqa: B018  (registers the ids)
    asyncio.run(main_smollm2(args.tasks, args.turns) if args.smollm2 else main(args.quick))
