"""MiniWoB++: success per task for a policy, and steps/s and memory at 1, 8, 32 episodes.

    python benchmarks/miniwob_envs.py success --policy expert --seeds 20
    python benchmarks/miniwob_envs.py success --policy random --seeds 5 --tasks suite
    python benchmarks/miniwob_envs.py success --policy smollm2 --seeds 2 --max-steps 4
    python benchmarks/miniwob_envs.py speed
    python benchmarks/miniwob_envs.py states
    python benchmarks/miniwob_envs.py table

``success`` plays ``--seeds`` seeds (from 1,000,000, the suites' first seed) of each task
through the rollout engine and writes a per-task table into ``docs/miniwob.md``; ``--tasks``
is ``solvers`` (the tasks with a scripted solver, the default), ``suite`` (the ``miniwob``
suite's tasks) or a comma-separated list. ``speed`` runs the scripted solvers on those tasks
with 1, 8 and 32 concurrent episodes (one Chromium shared by all, a browser context each)
and measures the memory (PSS of every browser process) with N episodes open, less the idle
browser's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import time
from pathlib import Path

from results import machine_note, write_section

from agentgym.envs.miniwob import MiniWoBEnv, package_version
from agentgym.envs.miniwob.experts import SOLVERS
from agentgym.envs.web.shared import browser_processes, shared
from agentgym.evaluation.metrics import succeeded
from agentgym.evaluation.suites import get_suite
from agentgym.policies.base import SamplingParams
from agentgym.policies.factory import make_agent
from agentgym.rollout import RolloutConfig, run_groups
from agentgym.trainers.advantages.diagnostics import step_group_recurrence

DOC = Path(__file__).resolve().parent.parent / "docs" / "miniwob.md"
RUNS = Path(__file__).resolve().parent.parent / "runs" / "miniwob"
FIRST_SEED = 1_000_000
CONCURRENCY = (1, 8, 32)


def _tasks(spec: str) -> list[str]:
    if spec == "solvers":
        return sorted(SOLVERS)
    if spec == "suite":
        return [e.kwargs["task"] for e in get_suite("miniwob").entries]
    return [t.strip() for t in spec.split(",") if t.strip()]


def _machine(load: tuple[float, float, float]) -> str:
    return f"Headless Chromium, miniwob {package_version()}; {machine_note(load)}"


def _rows_file(policy: str, seeds: int, max_steps: int, max_tokens: int) -> Path:
    """Where ``success`` keeps finished tasks, so a stopped run resumes (runs/ is not tracked)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", policy)
    return RUNS / f"success-{name}-seeds{seeds}-steps{max_steps}-tokens{max_tokens}.json"


async def success(policy: str, spec: str, seeds: int, max_steps: int,
                  concurrency: int, max_tokens: int, parallel_tasks: int = 1) -> None:
    """Per-task success of ``policy``; writes a section of docs/miniwob.md after each task.

    ``spec`` is ``--tasks`` (the expert plays only the tasks that have a scripted solver).
    Finished tasks are kept in :func:`_rows_file`; the same command skips them (resumes).
    ``parallel_tasks`` tasks run at once, so a model batches their episodes together.
    """
    tasks = [t for t in _tasks(spec) if policy != "expert" or t in SOLVERS]
    load = os.getloadavg()
    path = _rows_file(policy, seeds, max_steps, max_tokens)
    done: dict[str, list] = json.loads(path.read_text()) if path.exists() else {}
    sampling = SamplingParams(temperature=0.0, max_tokens=max_tokens, seed=0)
    agent = make_agent(policy, seed=0, sampling=sampling)
    config = RolloutConfig(concurrency=concurrency, max_steps=max_steps, step_timeout=900)
    start, gate = time.perf_counter(), asyncio.Semaphore(parallel_tasks)

    async def one(task: str) -> None:
        async with gate:
            t0 = time.perf_counter()
            trajs = await run_groups(lambda t=task: MiniWoBEnv(t), agent,
                                     range(FIRST_SEED, FIRST_SEED + seeds), config,
                                     env_id=f"miniwob/{task}")
        scored = [t for t in trajs if t.status != "error"]
        wins = sum(map(succeeded, scored))
        steps = statistics.mean(len(t.steps) for t in scored) if scored else 0.0
        done[task] = [task, wins, len(scored), len(trajs) - len(scored), steps]
        print(f"{task}: {wins}/{len(scored)} won, {done[task][3]} errors, {steps:.1f} steps, "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(done, indent=1))
        _write_success(policy, spec, tasks, seeds, max_steps, f"{concurrency} --max-tokens "
                       f"{max_tokens}" + (f" --parallel-tasks {parallel_tasks}"
                                          if parallel_tasks > 1 else ""),
                       [tuple(done[t]) for t in tasks if t in done], load,
                       time.perf_counter() - start)

    todo = [t for t in tasks if t not in done]
    if len(todo) < len(tasks):
        print(f"resuming: {len(tasks) - len(todo)} tasks already in {path}", flush=True)
    await asyncio.gather(*(one(t) for t in todo))


def _write_success(policy: str, spec: str, tasks: list[str], seeds: int, max_steps: int,
                   options: str,
                   rows: list[tuple[str, int, int, int, float]],
                   load: tuple[float, float, float], wall: float) -> None:
    won = sum(r[1] for r in rows)
    played = sum(r[2] for r in rows)
    tasks_arg = "" if spec == "solvers" else f" --tasks {spec}"
    lines = [
        f"Command: `python benchmarks/miniwob_envs.py success --policy {policy} --seeds {seeds} "
        f"--max-steps {max_steps} --concurrency {options}{tasks_arg}` (it resumes: tasks "
        "already played are kept under `runs/miniwob/`)",
        "",
        f"{_machine(load)}. Seeds {FIRST_SEED}..{FIRST_SEED + seeds - 1} per task; an episode "
        f"ends when MiniWoB ends it (success, failure or its time limit at 0.5 s of page time "
        f"per turn) or after {max_steps} turns (counted as not won). Model policies decode "
        f"greedily. Success = MiniWoB's raw reward of 1. Overall {won}/{played} "
        f"({won / max(played, 1):.0%}); wall time of the last run {wall / 60:.1f} min.",
        "",
        "| task | success | won / played | infrastructure errors | mean turns |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [f"| {task} | {wins / max(n, 1):.0%} | {wins}/{n} | {errors} | {steps:.1f} |"
              for task, wins, n, errors, steps in rows]
    if len(rows) < len(tasks):
        lines.append(f"\n(Partial: {len(rows)} of {len(tasks)} tasks measured so far.)")
    title = f"Success: {policy}" + ("" if spec == "solvers" else f", {spec} tasks")
    write_section(title, "\n".join(lines), DOC)


async def _solve(env: MiniWoBEnv, seed: int) -> int:
    await env.reset(seed=seed)
    for steps in range(1, 40):
        if (await env.step(await env.expert_action())).done:
            return steps
    return 40


async def throughput(tasks: list[str], concurrency: int, episodes: int) -> dict[str, float]:
    """Steps/s with ``concurrency`` workers, each its own env, over ``episodes`` episodes."""
    envs = [MiniWoBEnv(tasks[i % len(tasks)], action_timeout=30.0) for i in range(concurrency)]
    seeds = iter(range(FIRST_SEED, FIRST_SEED + episodes))
    steps: list[int] = []

    async def worker(env: MiniWoBEnv) -> None:
        for seed in seeds:  # shared iterator: a worker takes the next seed when it is free
            steps.append(await _solve(env, seed))

    try:
        await asyncio.gather(*(env.reset(seed=0) for env in envs))  # contexts warm
        start = time.perf_counter()
        await asyncio.gather(*(worker(env) for env in envs))
        wall = time.perf_counter() - start
    finally:
        await asyncio.gather(*(env.aclose() for env in envs))
    return {"steps_per_s": sum(steps) / wall, "episodes": len(steps), "wall_s": wall,
            "s_per_episode": wall * concurrency / len(steps)}


def _pss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
        except (OSError, StopIteration):
            continue
    return total / 1024


async def memory(tasks: list[str]) -> list[tuple[int, float, float]]:
    """(N, browser PSS MiB, idle PSS MiB) with N episodes open, N in CONCURRENCY."""
    await asyncio.sleep(2.0)
    base = _pss_mib(browser_processes())
    envs: list[MiniWoBEnv] = []
    rows = []
    try:
        for n in CONCURRENCY:
            while len(envs) < n:
                env = MiniWoBEnv(tasks[len(envs) % len(tasks)], action_timeout=30.0)
                envs.append(env)
                await env.reset(seed=len(envs))
            await asyncio.sleep(2.0)
            rows.append((n, _pss_mib(browser_processes()), base))
            print(f"memory with {n} episodes open: {rows[-1][1]:.0f} MiB", flush=True)
    finally:
        await asyncio.gather(*(env.aclose() for env in envs))
    return rows


async def speed(tasks: list[str], episodes: int) -> None:
    """Steps/s and memory per episode; writes a section of docs/miniwob.md."""
    load = os.getloadavg()
    pools = shared()
    browser = await pools.browsers.acquire("chromium")
    try:
        mem = await memory(tasks)
        rows = []
        for c in CONCURRENCY:
            rows.append((c, await throughput(tasks, c, max(c, episodes))))
            print(f"concurrency {c}: {rows[-1][1]}", flush=True)
    finally:
        await pools.browsers.release("chromium", browser)
    lines = [
        f"Command: `python benchmarks/miniwob_envs.py speed --episodes {episodes}`",
        "",
        f"{_machine(load)}. Scripted solvers (no model) on the {len(tasks)} tasks that have "
        "one, round-robin; each worker owns an env and plays episodes back to back; one "
        "Chromium shared by all, a browser context per episode. A step is one agent turn (a "
        "solver may put several tool calls in a turn).",
        "",
        "| concurrent episodes | steps/s | s per episode (per worker) | episodes |",
        "|---:|---:|---:|---:|",
    ]
    lines += [f"| {c} | {r['steps_per_s']:.1f} | {r['s_per_episode']:.2f} | {r['episodes']} |"
              for c, r in rows]
    lines += [
        "",
        "Memory of the browser processes (PSS, shared pages split between processes) with N "
        "episodes open (reset, task page loaded), less the idle browser:",
        "",
        "| episodes open | browser PSS, MiB | idle browser, MiB | per episode, MiB |",
        "|---:|---:|---:|---:|",
    ]
    lines += [f"| {n} | {used:.0f} | {base:.0f} | {(used - base) / n:.1f} |"
              for n, used, base in mem]
    write_section("Speed and memory", "\n".join(lines), DOC)


async def recurrence(tasks: list[str], group: int, max_steps: int) -> None:
    """How often a state key recurs within a group of random rollouts of one task instance."""
    load = os.getloadavg()
    config = RolloutConfig(group_size=group, concurrency=group, max_steps=max_steps)
    lines = [
        f"Command: `python benchmarks/miniwob_envs.py states --tasks {','.join(tasks)} "
        f"--group {group} --max-steps {max_steps}`",
        "",
        f"{_machine(load)}. Random policy, one group of {group} rollouts per task from seed "
        f"{FIRST_SEED}, at most {max_steps} turns. A step's state recurs when its state key "
        "(the page before the action) is also seen in another rollout of the group; GiGPO, "
        "HGPO and SALT group on these keys.",
        "",
        "| task | steps | distinct states | steps whose state recurs in the group |",
        "|---|---:|---:|---:|",
    ]
    for task in tasks:
        trajs = await run_groups(lambda t=task: MiniWoBEnv(t), make_agent("random", seed=0),
                                 [FIRST_SEED], config, env_id=f"miniwob/{task}")
        r = step_group_recurrence([[[s.state_key for s in t.steps] for t in trajs]])
        lines.append(f"| {task} | {r.steps} | {r.states} | {r.across:.0%} |")
        print(lines[-1], flush=True)
    write_section("State recurrence", "\n".join(lines), DOC)


def table() -> None:
    """One per-task table of the ``miniwob`` suite: random, scripted and SmolLM2 side by side.

    Reads what ``success`` kept under ``runs/miniwob/`` (the newest file of each policy).
    """
    columns = {"random": "random", "expert": "scripted", "smollm2": "SmolLM2-135M"}
    found: dict[str, tuple[Path, dict[str, list]]] = {}
    for policy in columns:
        files = sorted(RUNS.glob(f"success-{policy}-*.json"), key=lambda f: f.stat().st_mtime)
        if files:
            found[policy] = (files[-1], json.loads(files[-1].read_text()))
    tasks = _tasks("suite")

    def cell(policy: str, task: str) -> str:
        if policy == "expert" and task not in SOLVERS:
            return "no solver"
        row = found.get(policy, (None, {}))[1].get(task)
        return "not run" if row is None else f"{row[1]}/{row[2]}"

    sources = "; ".join(f"{columns[p]}: `{f.relative_to(RUNS.parent.parent)}`"
                        for p, (f, _) in found.items())
    lines = [
        "Episodes won / played per task of the `miniwob` suite (seeds from 1000000), from the "
        "`success` runs of each policy (commands and conditions in their own sections). "
        f"Made by `python benchmarks/miniwob_envs.py table` from {sources}.", "",
        "| task | " + " | ".join(columns.values()) + " |", "|---|" + "---:|" * len(columns),
        *(f"| {t} | " + " | ".join(cell(p, t) for p in columns) + " |" for t in tasks)]
    totals = []
    for p in columns:
        rows = [r for t, r in found.get(p, (None, {}))[1].items() if t in tasks]
        totals.append(f"{sum(r[1] for r in rows)}/{sum(r[2] for r in rows)}")
    lines.append("| **all** | " + " | ".join(totals) + " |")
    write_section("Success per task", "\n".join(lines), DOC)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    one = sub.add_parser("success", help="per-task success of a policy")
    one.add_argument("--policy", default="expert", help="random, expert, smollm2, hf:PATH, ...")
    one.add_argument("--tasks", default="solvers", help="solvers, suite, or a,b,c")
    one.add_argument("--seeds", type=int, default=20)
    one.add_argument("--max-steps", type=int, default=40)
    one.add_argument("--concurrency", type=int, default=4)
    one.add_argument("--max-tokens", type=int, default=256, help="per policy call (models)")
    one.add_argument("--parallel-tasks", type=int, default=1,
                     help="tasks played at once (a model batches their episodes)")
    two = sub.add_parser("speed", help="steps/s and memory at 1, 8 and 32 episodes")
    two.add_argument("--episodes", type=int, default=48)
    three = sub.add_parser("states", help="state-key recurrence within groups")
    three.add_argument("--tasks", default="click-button,click-checkboxes,login-user,"
                       "navigate-tree,email-inbox")
    three.add_argument("--group", type=int, default=4)
    three.add_argument("--max-steps", type=int, default=10)
    sub.add_parser("table", help="random, scripted and SmolLM2 per task in one table")
    args = parser.parse_args()
    if args.what == "table":
        table()
        return
    if args.what == "states":
        asyncio.run(recurrence(_tasks(args.tasks), args.group, args.max_steps))
        return
    if args.what == "success":
        asyncio.run(success(args.policy, args.tasks, args.seeds, args.max_steps,
                            args.concurrency, args.max_tokens, args.parallel_tasks))
    else:
        asyncio.run(speed(sorted(SOLVERS), args.episodes))


if __name__ == "__main__":
    main()
