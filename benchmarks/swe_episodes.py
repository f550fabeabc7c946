"""SWE episode costs: the test run per task, and episodes/hour with 8 concurrent episodes.

For each sandbox (``local`` subprocesses, ``docker`` containers from the warm pool):

1. **Test-run time per task**: the scripted expert applies the oracle patch and submits; the
   time of the submit step is the hidden-test run (apply the test patch, run pytest, parse).
2. **Episodes/hour**: ``--episodes`` scripted episodes (apply patch, submit: two turns, one
   test run each), 8 at a time through the rollout engine, one fresh env and sandbox each.
   The Docker pool is filled with 8 warm containers first, as a trainer's would be after its
   first step.

    python benchmarks/swe_episodes.py [--sandboxes local docker] [--episodes 32]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import time

from results import write_section

import agentgym
from agentgym.envs.swe import SWEEnv, shipped_tasks
from agentgym.policies.simple import ScriptedPolicy
from agentgym.rollout import RolloutConfig, run_groups

CONCURRENCY = 8


async def test_run_times(sandbox: str) -> dict[str, float]:
    """Seconds of the submit step (the hidden tests) per task, oracle patch applied."""
    times = {}
    async with SWEEnv(split="all", sandbox=sandbox, pool_size=CONCURRENCY) as env:
        for task in env.tasks:
            await env.reset(options={"task_id": task.instance_id})
            await env.step(env.expert_action())  # git apply the oracle
            start = time.perf_counter()
            result = await env.step(env.expert_action())  # submit: the test run
            times[task.instance_id] = time.perf_counter() - start
            assert result.info["resolved"], f"{task.instance_id} not resolved in {sandbox}"
    return times


async def throughput(sandbox: str, episodes: int) -> tuple[float, float]:
    """(episodes/hour, resolve rate) of scripted episodes, CONCURRENCY at a time."""
    if sandbox == "docker":  # start with a warm pool, as after a trainer's first step
        from agentgym.envs.swe.docker import docker_config
        from agentgym.sandboxes.pool import shared_pool

        pool = shared_pool(docker_config(shipped_tasks()[0]), size=CONCURRENCY)
        await pool.start()
        await asyncio.wait_for(pool.wait_warm(), 600)
    start = time.perf_counter()
    trajs = await run_groups(
        lambda: agentgym.make("agentgym/SWE-v0", split="all", sandbox=sandbox,
                              pool_size=CONCURRENCY),
        ScriptedPolicy(), list(range(episodes)), RolloutConfig(concurrency=CONCURRENCY))
    wall = time.perf_counter() - start
    errors = [t.error for t in trajs if t.status == "error"]
    assert not errors, errors[:3]
    resolved = sum(t.steps[-1].result.info.get("resolved", False) for t in trajs)
    return episodes / wall * 3600, resolved / episodes


async def measure(sandbox: str, episodes: int) -> dict[str, object]:
    try:
        times = await test_run_times(sandbox)
        rate, resolved = await throughput(sandbox, episodes)
    finally:
        if sandbox == "docker":
            from agentgym.sandboxes.pool import close_shared_pools

            await close_shared_pools()
    return {"times": times, "rate": rate, "resolved": resolved}


def with_engine(run):
    """Run ``run()`` with a Docker engine (the private one is started if none is reachable)
    and the base image built."""
    from agentgym.sandboxes.engine import client, engine_lease
    from agentgym.sandboxes.image import DEFAULT_IMAGE, ensure_image

    with engine_lease() as url:
        old = os.environ.get("DOCKER_HOST")
        os.environ["DOCKER_HOST"] = url
        try:
            ensure_image(client(url), DEFAULT_IMAGE, log=print)
            return run()
        finally:
            if old is None:
                os.environ.pop("DOCKER_HOST", None)
            else:
                os.environ["DOCKER_HOST"] = old


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandboxes", nargs="+", default=["local", "docker"],
                        choices=["local", "docker"])
    parser.add_argument("--episodes", type=int, default=32)
    args = parser.parse_args()
    results = {}
    for sandbox in args.sandboxes:
        if sandbox == "docker":
            results[sandbox] = with_engine(lambda: asyncio.run(measure("docker", args.episodes)))
        else:
            results[sandbox] = asyncio.run(measure(sandbox, args.episodes))
        r = results[sandbox]
        t = list(r["times"].values())
        print(f"{sandbox}: test run median {statistics.median(t):.2f} s (min {min(t):.2f}, "
              f"max {max(t):.2f}); {r['rate']:.0f} episodes/hour at {CONCURRENCY} concurrent, "
              f"resolved {r['resolved']:.0%}")
    tasks = sorted(next(iter(results.values()))["times"])
    header = "| task | " + " | ".join(f"{s} test run (s)" for s in results) + " |"
    rows = [header, "|" + "---|" * (len(results) + 1)]
    for task in tasks:
        rows.append(f"| {task} | " + " | ".join(f"{r['times'][task]:.2f}"
                                                 for r in results.values()) + " |")
    rows.append("| **median** | " + " | ".join(
        f"**{statistics.median(r['times'].values()):.2f}**" for r in results.values()) + " |")
    summary = "\n".join(
        f"- **{s}**: {r['rate']:.0f} episodes/hour with {CONCURRENCY} concurrent scripted "
        f"episodes ({args.episodes} episodes, resolved {r['resolved']:.0%})"
        for s, r in results.items())
    load = os.getloadavg()[0]
    body = f"""Command: `python benchmarks/swe_episodes.py --sandboxes {' '.join(args.sandboxes)} \
--episodes {args.episodes}`

The shipped SWE tasks with the scripted expert (`git apply` the oracle patch, `submit`). A test
run is the submit step: restore and apply the hidden test patch, run pytest on FAIL_TO_PASS +
PASS_TO_PASS, parse the `-rA` summary. Docker: containers from the warm pool (vfs storage
driver, 1 CPU and 2 GiB each, no network); the pool was pre-filled with {CONCURRENCY} before
the throughput run.

{summary}

{chr(10).join(rows)}

Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores **shared with
other jobs** (1-minute load average {load:.1f} when the run ended), so absolute figures are
pessimistic and noisy; the local/docker ratio is the more stable figure.
"""
    write_section("SWE episodes: test-run time and throughput", body)


if __name__ == "__main__":
    main()
