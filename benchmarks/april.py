"""Rollout throughput with and without APRIL partial rollouts on a long-tailed env.

Both modes collect the same number of training steps (B groups of G episodes each) from the
same episode-length distribution, one mode after the other in one run:

- ``sync``: :func:`agentgym.rollout.run_groups` per step; the step waits for its slowest
  episode.
- ``april``: :class:`agentgym.engines.april.PartialRollouts` with ``oversample`` × B groups
  in flight; a step ends once B groups finished and the rest are carried.

The env ends an episode when the agent says ``stop``; the scripted agent draws its length
from a lognormal (median ``--median`` turns, σ = ``--sigma``, capped at ``--max-turns``), so
most episodes are short and a few are long. The agent stands for a batched generator: every
policy call waits for the next decode tick (``--tick-ms``), which serves all waiting calls at
once, as a GPU does while decoding is memory-bound; env steps take ``--env-ms``. The policy
version goes up after every step (the update), so the share of handed-over turns sampled by
older weights is what APRIL's importance correction has to handle.

With ``--policy smollm2`` the agent is the real SmolLM2-135M-Instruct (the embedded GGUF,
through the in-process transformers backend, which batches concurrent calls); the env
then sets each episode's length itself, lognormal as above, seeded by the task and the
model's first reply, so generation cost is real and the lengths stay long-tailed.

    python benchmarks/april.py                   # scripted agent; writes docs/scale-out.md
    python benchmarks/april.py --policy smollm2 --steps 4 --groups 4 --group-size 4
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import machine_note, write_section  # noqa: E402

from agentgym.engines.april import AprilConfig, PartialRollouts  # noqa: E402
from agentgym.engines.versioned import VersionedAgent  # noqa: E402
from agentgym.env import BaseEnv  # noqa: E402
from agentgym.policies.base import SamplingParams  # noqa: E402
from agentgym.rollout import LMAgent, RolloutConfig, run_groups  # noqa: E402
from agentgym.types import Message, StepResult, StepTokens, Trajectory  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "scale-out.md"


class StopEnv(BaseEnv):
    """Ends when the agent says ``stop``; each step costs ``env_ms``."""

    prose_is_action = True

    def __init__(self, env_ms: float) -> None:
        super().__init__()
        self.env_ms = env_ms

    async def _reset(self, seed, options):
        return [Message("user", f"task {seed}")], {}

    async def _step(self, action):
        await asyncio.sleep(self.env_ms / 1000)
        done = action.content == "stop"
        return StepResult((Message("user", "go on"),), 1.0 if done else None, terminated=done)


class LengthEnv(BaseEnv):
    """Ends after a lognormal number of turns drawn from the task and the first reply."""

    prose_is_action = True

    def __init__(self, median: float, sigma: float, max_turns: int) -> None:
        super().__init__()
        self.median, self.sigma, self.max_turns = median, sigma, max_turns
        self.length: int | None = None

    async def _reset(self, seed, options):
        self.seed, self.length = seed or 0, None
        return [Message("user", "Count upwards, one number per reply.")], {}

    async def _step(self, action):
        if self.length is None:
            rng = np.random.default_rng([self.seed, len(action.content)])
            self.length = _length(rng, self.median, self.sigma, self.max_turns)
        done = self.turn + 1 >= self.length
        return StepResult((Message("user", "next"),), 1.0 if done else None, terminated=done)


def _length(rng: np.random.Generator, median: float, sigma: float, max_turns: int) -> int:
    return int(min(max_turns, max(1, round(median * rng.lognormal(0, sigma)))))


class Decoder:
    """A batched generator: one decode tick of fixed latency serves every waiting call."""

    def __init__(self, tick_ms: float) -> None:
        self.tick = tick_ms / 1000
        self.waiting: list[asyncio.Future[None]] = []
        self.task: asyncio.Task[None] | None = None
        self.ticks = 0
        self.busy_ticks = 0
        self.served = 0
        self.version = 0

    async def call(self) -> None:
        future = asyncio.get_running_loop().create_future()
        self.waiting.append(future)
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self._run())
        await future

    async def _run(self) -> None:
        while self.waiting:
            batch, self.waiting = self.waiting, []
            await asyncio.sleep(self.tick)
            self.ticks += 1
            self.served += len(batch)
            for f in batch:
                f.set_result(None)


@dataclass
class LongTailAgent:
    """Says ``go`` until its lognormal length is reached, then ``stop``."""

    decoder: Decoder
    median: float
    sigma: float
    max_turns: int
    started: int = 0

    def start(self, prompt, env):
        self.started += 1
        rng = np.random.default_rng(self.started)
        return _Episode(self, _length(rng, self.median, self.sigma, self.max_turns))


class _Episode:
    def __init__(self, agent: LongTailAgent, length: int) -> None:
        self.agent, self.length, self.turn = agent, length, 0

    async def act(self):
        await self.agent.decoder.call()
        self.turn += 1
        text = "stop" if self.turn >= self.length else "go"
        return Message("assistant", text), StepTokens((1,), (2,), (-0.1,),
                                                      policy_version=self.agent.decoder.version)

    def observe(self, observation):
        pass


async def run_mode(mode: str, args: argparse.Namespace, policy: Any = None
                   ) -> dict[str, float]:
    decoder = Decoder(args.tick_ms)
    agent: Any = LongTailAgent(decoder, args.median, args.sigma, args.max_turns)

    def make_env() -> BaseEnv:
        return StopEnv(args.env_ms)

    if policy is not None:  # a real model: the env draws the lengths
        decoder.version = policy.policy_version  # the model is shared by both modes
        agent = VersionedAgent(LMAgent(policy, sampling=SamplingParams(
            temperature=1.0, max_tokens=args.max_tokens, seed=0)))

        def make_env() -> BaseEnv:
            return LengthEnv(args.median, args.sigma, args.max_turns)
    config = RolloutConfig(group_size=args.group_size, concurrency=10_000,
                           max_steps=args.max_turns + 1)
    pool = PartialRollouts(AprilConfig(enabled=True, oversample=args.oversample)) \
        if mode == "april" else None
    times, handed, carried = [], [], []
    next_seed = 0
    try:
        for _ in range(args.steps):
            start = time.perf_counter()
            if pool is None:
                seeds = range(next_seed, next_seed + args.groups)
                next_seed += args.groups
                trajs = await run_groups(make_env, agent, seeds, config)
            else:
                trajs, metrics = await pool.round(make_env, agent, args.groups, config)
                carried.append(metrics["april/carried_out"])
            times.append(time.perf_counter() - start)
            handed.append((trajs, decoder.version))
            decoder.version += 1  # the update between steps
            if policy is not None:
                await policy.update_weights([], version=decoder.version)
    finally:
        if pool is not None:
            await pool.aclose()
    return _figures(times, handed, carried, decoder)


def _figures(times: list[float], handed: list[tuple[list[Trajectory], int]],
             carried: list[float], decoder: Decoder) -> dict[str, float]:
    episodes = sum(len(t) for t, _ in handed)
    turns = [len(x.steps) for t, _ in handed for x in t]
    ages = [v - s.tokens.policy_version for t, v in handed for x in t for s in x.steps
            if s.tokens is not None and s.tokens.policy_version is not None]
    # A trajectory with a turn older than APRIL's default bound is dropped by the trainer.
    bound = AprilConfig().max_staleness
    dropped = sum(1 for t, v in handed for x in t
                  if any(v - (s.tokens.policy_version or v) > bound for s in x.steps
                         if s.tokens is not None))
    total = sum(times)
    return {"rollout_s": total, "step_s_mean": float(np.mean(times)),
            "step_s_max": float(np.max(times)), "episodes_per_s": episodes / total,
            "turns_per_s": sum(turns) / total, "episodes": float(episodes),
            "turns_mean": float(np.mean(turns)), "turns_max": float(np.max(turns)),
            "batch_mean": decoder.served / max(decoder.ticks, 1),
            "stale_turn_frac": sum(a > 0 for a in ages) / max(len(ages), 1),
            "staleness_max": float(max(ages, default=0)),
            "over_bound_frac": dropped / max(episodes, 1),
            "carried_mean": float(np.mean(carried)) if carried else 0.0}


async def both_modes(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Both modes, one after the other, on one event loop (and one loaded model)."""
    policy = None
    if args.policy == "smollm2":
        from agentgym.policies.hf import TransformersPolicy

        policy = TransformersPolicy.load("smollm2", seed=0)
    try:
        return {mode: await run_mode(mode, args, policy) for mode in ("sync", "april")}
    finally:
        if policy is not None:
            await policy.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="training steps per mode")
    parser.add_argument("--groups", type=int, default=8, help="B: groups per step")
    parser.add_argument("--group-size", type=int, default=8, help="G: episodes per group")
    parser.add_argument("--oversample", type=float, default=2.0,
                        help="APRIL's groups in flight per group handed over")
    parser.add_argument("--median", type=float, default=3.0, help="median episode length (turns)")
    parser.add_argument("--sigma", type=float, default=1.0, help="lognormal σ of the lengths")
    parser.add_argument("--max-turns", type=int, default=64, help="longest episode")
    parser.add_argument("--tick-ms", type=float, default=20.0, help="decode tick latency")
    parser.add_argument("--env-ms", type=float, default=2.0, help="env step latency")
    parser.add_argument("--policy", choices=("scripted", "smollm2"), default="scripted",
                        help="scripted agent behind a simulated decoder, or the real model")
    parser.add_argument("--max-tokens", type=int, default=8, help="tokens per reply (smollm2)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    load = os.getloadavg()
    rows = asyncio.run(both_modes(args))
    speedup = rows["april"]["episodes_per_s"] / rows["sync"]["episodes_per_s"]
    lines = ["| mode | rollout s | s/step mean | s/step max | episodes/s | turns/s | "
             "turns/episode (mean, max) | calls per decode tick | handed-over turns from older "
             "weights (max age) | episodes past the default staleness bound | episodes carried "
             "per step |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    real = args.policy == "smollm2"

    def batch(r: dict[str, float]) -> str:
        return "n/a" if real else f"{r['batch_mean']:.1f}"

    for mode, r in rows.items():
        lines.append(
            f"| {mode} | {r['rollout_s']:.2f} | {r['step_s_mean']:.3f} | {r['step_s_max']:.3f} "
            f"| {r['episodes_per_s']:.1f} | {r['turns_per_s']:.1f} | {r['turns_mean']:.2f}, "
            f"{r['turns_max']:.0f} | {batch(r)} | {r['stale_turn_frac']:.1%} "
            f"({r['staleness_max']:.0f}) | {r['over_bound_frac']:.1%} | "
            f"{r['carried_mean']:.1f} |")
    table = "\n".join(lines)
    print(table)
    print(f"APRIL / sync episodes per second: {speedup:.2f}x")
    command = " ".join(["python benchmarks/april.py", *sys.argv[1:]])
    agent = (f"SmolLM2-135M-Instruct on CPU (transformers backend), {args.max_tokens} tokens "
             "a reply at temperature 1, lengths drawn by the env") if real else (
        f"a scripted agent behind a batched decoder of {args.tick_ms:g} ms a tick; env steps "
        f"{args.env_ms:g} ms")
    note = ("Generation is the real model's; the weights do not change between steps (only "
            "the version moves), so the staleness columns count what the trainer would "
            "correct.") if real else (
        "The figures are sleeps on one event loop (decode ticks and env latency), so they "
        "show scheduling, not model speed.")
    body = (
        f"`{command}` ({args.steps} steps per mode of B = {args.groups} groups "
        f"× G = {args.group_size}; APRIL oversample {args.oversample:g}; episode lengths "
        f"lognormal with median {args.median:g} turns and σ = {args.sigma:g}, at most "
        f"{args.max_turns}; {agent}). Both modes ran in the "
        f"same process, one after the other.\n\n{table}\n\n"
        f"APRIL delivered {speedup:.2f}× the finished episodes per second of rollout time. "
        "The sync step waits for its longest episode (s/step max); APRIL's ends when B "
        "groups are whole, keeps the decoder's batches fuller, and pays with turns sampled "
        "by older weights, which the trainer importance-corrects. Machine: "
        f"{machine_note(load)}. {note}")
    if not args.no_write:
        title = "APRIL benchmark: rollout throughput on a long-tailed env"
        write_section(title + (", SmolLM2-135M" if real else ""), body, DOC)


if __name__ == "__main__":
    main()
