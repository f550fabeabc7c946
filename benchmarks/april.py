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

    python benchmarks/april.py              # prints the table, writes docs/scale-out.md
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import machine_note, write_section  # noqa: E402

from agentgym.engines.april import AprilConfig, PartialRollouts  # noqa: E402
from agentgym.env import BaseEnv  # noqa: E402
from agentgym.rollout import RolloutConfig, run_groups  # noqa: E402
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
        length = int(min(self.max_turns, max(1, round(self.median * rng.lognormal(0, self.sigma)))))
        return _Episode(self, length)


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


async def run_mode(mode: str, args: argparse.Namespace) -> dict[str, float]:
    decoder = Decoder(args.tick_ms)
    agent = LongTailAgent(decoder, args.median, args.sigma, args.max_turns)
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
                trajs = await run_groups(lambda: StopEnv(args.env_ms), agent, seeds, config)
            else:
                trajs, metrics = await pool.round(lambda: StopEnv(args.env_ms), agent,
                                                  args.groups, config)
                carried.append(metrics["april/carried_out"])
            times.append(time.perf_counter() - start)
            handed.append((trajs, decoder.version))
            decoder.version += 1  # the update between steps
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
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    load = os.getloadavg()
    rows = {mode: asyncio.run(run_mode(mode, args)) for mode in ("sync", "april")}
    speedup = rows["april"]["episodes_per_s"] / rows["sync"]["episodes_per_s"]
    lines = ["| mode | rollout s | s/step mean | s/step max | episodes/s | turns/s | "
             "turns/episode (mean, max) | calls per decode tick | handed-over turns from older "
             "weights (max age) | episodes past the default staleness bound | episodes carried "
             "per step |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for mode, r in rows.items():
        lines.append(
            f"| {mode} | {r['rollout_s']:.2f} | {r['step_s_mean']:.3f} | {r['step_s_max']:.3f} "
            f"| {r['episodes_per_s']:.1f} | {r['turns_per_s']:.1f} | {r['turns_mean']:.2f}, "
            f"{r['turns_max']:.0f} | {r['batch_mean']:.1f} | {r['stale_turn_frac']:.1%} "
            f"({r['staleness_max']:.0f}) | {r['over_bound_frac']:.1%} | "
            f"{r['carried_mean']:.1f} |")
    table = "\n".join(lines)
    print(table)
    print(f"APRIL / sync episodes per second: {speedup:.2f}x")
    body = (
        f"`python benchmarks/april.py` ({args.steps} steps per mode of B = {args.groups} groups "
        f"× G = {args.group_size}; APRIL oversample {args.oversample:g}; episode lengths "
        f"lognormal with median {args.median:g} turns and σ = {args.sigma:g}, at most "
        f"{args.max_turns}; a scripted agent behind a batched decoder of "
        f"{args.tick_ms:g} ms a tick; env steps {args.env_ms:g} ms). Both modes ran in the "
        f"same process, one after the other.\n\n{table}\n\n"
        f"APRIL delivered {speedup:.2f}× the finished episodes per second of rollout time. "
        "The sync step waits for its longest episode (s/step max); APRIL's ends when B "
        "groups are whole, keeps the decoder's batches fuller, and pays with turns sampled "
        "by older weights, which the trainer importance-corrects. Machine: "
        f"{machine_note(load)}. The figures are sleeps on one event loop (decode ticks and "
        "env latency), so they show scheduling, not model speed.")
    if not args.no_write:
        write_section("APRIL benchmark: rollout throughput on a long-tailed env", body, DOC)


if __name__ == "__main__":
    main()
