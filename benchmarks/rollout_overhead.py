"""Rollout engine overhead: steps/s on a trivial env with a scripted policy.

Compares agentgym's asyncio engine (many episodes as tasks in one process) with the same env
stepped through ``gymnasium.vector.AsyncVectorEnv`` (one subprocess per env) and through one
Ray actor per env (the verl-agent pattern). The env does no work, so the figures measure the
machinery around a step. Results go to docs/benchmarks.md.

    python benchmarks/rollout_overhead.py [--steps 20] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import time

from results import write_section

import agentgym
from agentgym import BaseEnv, Message, StepResult
from agentgym.rollout import RolloutConfig, run_groups
from agentgym.types import StepTokens

ACTION = Message("assistant", "noop")


class TrivialEnv(BaseEnv):
    """Ends after ``length`` steps; every step returns a constant observation."""

    def __init__(self, length: int = 20) -> None:
        super().__init__()
        self.length = length

    async def _reset(self, seed, options):
        return [Message("user", "start")], {"task_id": "trivial"}

    async def _step(self, action):
        done = self.turn + 1 >= self.length
        return StepResult((Message("user", "ok"),), 0.0, terminated=done)


class _Noop:
    def start(self, prompt, env):
        return self

    async def act(self) -> tuple[Message, StepTokens | None]:
        return ACTION, None

    def observe(self, observation) -> None:
        pass


def engine(n: int, length: int) -> float:
    """``n`` concurrent episodes; at least 64 episodes in all so loop start-up is amortised."""
    config = RolloutConfig(concurrency=n, step_timeout=None, episode_timeout=None)
    episodes = max(n, 64)
    start = time.perf_counter()
    trajs = asyncio.run(run_groups(lambda: TrivialEnv(length), _Noop(), range(episodes), config))
    elapsed = time.perf_counter() - start
    assert sum(len(t.steps) for t in trajs) == episodes * length
    return episodes * length / elapsed


def async_vector(n: int, length: int) -> float:
    import gymnasium

    from agentgym.gym_bridge import GymnasiumEnv

    envs = gymnasium.vector.AsyncVectorEnv([lambda: GymnasiumEnv(TrivialEnv(length))] * n,
                                           shared_memory=False)
    envs.reset(seed=0)
    start = time.perf_counter()
    for _ in range(length):
        envs.step(["noop"] * n)
    elapsed = time.perf_counter() - start
    envs.close()
    return n * length / elapsed


def ray_actors(n: int, length: int) -> float:
    import ray

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)

    @ray.remote
    class EnvActor:
        def __init__(self) -> None:
            self.env = TrivialEnv(length)

        async def reset(self) -> None:
            await self.env.reset(seed=0)

        async def step(self, text: str) -> bool:
            return (await self.env.step(Message("assistant", text))).done

    actors = [EnvActor.remote() for _ in range(n)]
    ray.get([a.reset.remote() for a in actors])
    start = time.perf_counter()
    for _ in range(length):
        ray.get([a.step.remote("noop") for a in actors])
    elapsed = time.perf_counter() - start
    ray.shutdown()
    return n * length / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20, help="steps per episode")
    parser.add_argument("--quick", action="store_true", help="skip the process-based baselines")
    args = parser.parse_args()
    rows = []
    for n in (1, 64, 256, 1024):
        rate = engine(n, args.steps)
        rows.append((f"agentgym engine (asyncio), {n} concurrent episodes", rate))
        print(f"engine {n:5d}: {rate:12,.0f} steps/s  ({1e6 / rate:.1f} µs/step)")
    baselines = [] if args.quick else [("AsyncVectorEnv", async_vector, (1, 16, 64)),
                                       ("Ray actor per env", ray_actors, (1, 16, 64))]
    for name, fn, sizes in baselines:
        for n in sizes:
            try:
                rate = fn(n, args.steps)
            except ImportError as exc:
                print(f"{name}: skipped ({exc})")
                break
            rows.append((f"{name}, {n} envs", rate))
            print(f"{name} {n:4d}: {rate:12,.0f} steps/s  ({1e6 / rate:.1f} µs/step)")
    table = ["| setting | steps/s | µs per step |", "|---|---:|---:|"]
    table += [f"| {name} | {rate:,.0f} | {1e6 / rate:.1f} |" for name, rate in rows]
    best_engine = max(r for n, r in rows if n.startswith("agentgym") and "64 " in n)
    ray_64 = [r for n, r in rows if n.startswith("Ray") and n.endswith(" 64 envs")]
    ratio = f"{best_engine / ray_64[0]:.0f}×" if ray_64 else "not measured"
    body = "\n".join([
        f"Trivial env ({args.steps} steps per episode, no work per step), scripted no-op policy.",
        f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"agentgym {agentgym.__version__}.",
        "Command: `python benchmarks/rollout_overhead.py`",
        "",
        *table,
        "",
        f"Engine vs one Ray actor per env at 64 episodes: {ratio}.",
        "Process-based baselines stop at 64 envs: one process per env on 2 cores.",
    ])
    write_section("Rollout engine overhead", body)


if __name__ == "__main__":
    main()
