"""The README's main job (the agent job), timed: wall, peak memory of all its processes,
and what it printed, against the job's targets (10 minutes, 3 GB, RL's own gain of 20
points).

Runs the three commands of ``examples/agent_calendar.yaml``'s header (the ones
``examples/agent_calendar.sh`` runs) one after the other, with their outputs moved under
``--run-root`` so that nothing in ``runs/`` is touched. While each runs, the resident sets of
its whole process tree (the CLI and vLLM's engine core, which holds its worker on a CPU) are
summed once a second (``results.PeakMemory``); the peak is the largest sum. Then held-out
success of the base model and the warm start (the SFT's metrics) and after RL, with RL's gain
and its 95% paired interval (the RL run's metrics), are written to docs/agent-job.md,
section "The job, timed".

    python benchmarks/agent_job.py [--run-root runs/agent_job_bench] [--no-write]
        [--set KEY=VALUE ...] [--set-rl KEY=VALUE ...]

``--set`` adds a config override to both the SFT and the RL command (``--set
model.generation=transformers``: the job in one process), ``--set-rl`` to the RL command
only (``--set-rl optim.autocast=bfloat16``: bf16 updates after a float32 warm start); a run
with overrides is not the job as committed, so it prints its section instead of writing it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from results import PeakMemory, machine_line, write_section

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "examples" / "agent_calendar.yaml"
DOC = ROOT / "docs" / "agent-job.md"
TITLE = "The job, timed (`benchmarks/agent_job.py`)"


def job_commands() -> list[list[str]]:
    """The ``agentgym ...`` lines of the job config's header, in order."""
    lines = re.findall(r"^#\s+(agentgym [^#\n]+)", JOB.read_text(), re.M)
    if len(lines) != 3:
        raise SystemExit(f"expected three agentgym commands in {JOB}'s header, found {lines}")
    return [shlex.split(line) for line in lines]


def relocated(commands: list[list[str]], root: Path, overrides: tuple[str, ...] = (),
              rl_overrides: tuple[str, ...] = ()) -> list[list[str]]:
    """The job's commands with the expert's file, the SFT and the RL run under ``root``,
    ``overrides`` added to the SFT and the RL command and ``rl_overrides`` to the RL one."""
    rollout, sft, train = (list(c) for c in commands)
    demos = root / "expert.jsonl"
    rollout[rollout.index("--out") + 1] = str(demos)
    sft += [f"run_dir={root / 'sft'}", f"data.paths=[{demos}]", *overrides]
    train += [f"run_dir={root / 'rl'}", f"model.path={root / 'sft' / 'model'}", *overrides,
              *rl_overrides]
    return [rollout, sft, train]


@dataclass(frozen=True)
class Phase:
    """One command of the job: its wall time and the peak of its summed resident sets."""

    name: str
    wall_s: float
    peak_bytes: int
    at_peak: tuple[tuple[str, int], ...]  # (process, resident bytes) at the peak, largest first


def run_measured(name: str, command: list[str]) -> Phase:
    """Run one CLI command as the job does, its process tree's memory sampled meanwhile."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "agentgym.cli", *command[1:]], cwd=ROOT)
    with PeakMemory(proc.pid, interval=1.0) as memory:
        code = proc.wait()
    if code:
        raise SystemExit(f"{shlex.join(command)} failed (exit {code})")
    return Phase(name, time.perf_counter() - start, memory.peak, memory.at_peak)


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 60 else f"{seconds / 60:.1f} min"


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-root", default="runs/agent_job_bench")
    parser.add_argument("--no-write", action="store_true",
                        help="print the section instead of writing it")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="an override for the SFT and RL commands (repeatable); prints "
                             "its section instead of writing it")
    parser.add_argument("--set-rl", action="append", default=[], metavar="KEY=VALUE",
                        help="an override for the RL command only (repeatable)")
    args = parser.parse_args()
    bad = [o for o in args.set + args.set_rl if "=" not in o]
    if bad:
        parser.error(f"--set takes KEY=VALUE (a config override), got {bad}")
    root = (ROOT / args.run_root).resolve()
    if root.exists():
        shutil.rmtree(root)  # a fresh run: sft and train refuse folders with checkpoints
    root.mkdir(parents=True)
    commands = job_commands()
    load_before = os.getloadavg()
    phases = [run_measured(name, command) for name, command in
              zip(("expert rollout", "SFT", "RL"), relocated(commands, root, tuple(args.set),
                                                              tuple(args.set_rl)),
                  strict=True)]
    sft, rl = metrics(root / "sft"), metrics(root / "rl")
    base, warm, last = sft[0]["eval/success_rate"], sft[-1]["eval/success_rate"], rl[-1]
    steps = [r for r in rl if "update_s" in r]
    wall = sum(p.wall_s for p in phases)
    peak = max(phases, key=lambda p: p.peak_bytes)
    pts = {k: 100 * last[f"heldout/{k}"] for k in ("gain", "gain_low", "gain_high")}
    gb = 1024 ** 3
    summary = (f"held-out success {base:.1%} (base) → {warm:.1%} (warm start) → "
               f"{last['heldout/success_after']:.1%} (after RL); RL's gain {pts['gain']:+.1f} "
               f"points (95% interval {pts['gain_low']:+.1f} to {pts['gain_high']:+.1f}, "
               f"{int(last['heldout/tasks'])} tasks); wall {wall / 60:.1f} min; peak "
               f"{peak.peak_bytes / gb:.2f} GB ({peak.name})")
    print(summary)
    top = ", ".join(f"{name} {size / gb:.2f} GB" for name, size in peak.at_peak[:3])
    body = "\n".join([
        "The job's three commands as the config's header writes them, outputs under "
        f"`{args.run_root}`, timed by `python benchmarks/agent_job.py`:",
        "",
        *[f"    {shlex.join(c)}" for c in commands],
        "",
        *([f"with `{' '.join(args.set)}` added to the SFT and RL commands.", ""]
          if args.set else []),
        *([f"with `{' '.join(args.set_rl)}` added to the RL command.", ""]
          if args.set_rl else []),
        f"Load average {load_before[0]:.1f} / {load_before[1]:.1f} / {load_before[2]:.1f} "
        "at the start.",
        "",
        "| command | wall | peak memory (all its processes) |",
        "|---|---:|---:|",
        *[f"| {p.name} | {duration(p.wall_s)} | "
          f"{f'{p.peak_bytes / gb:.2f} GB' if p.peak_bytes else 'ended before a sample'} |"
          for p in phases],
        f"| **the job** | **{wall / 60:.1f} min** (target 10) | **{peak.peak_bytes / gb:.2f} "
        "GB** (target 3) |",
        "",
        f"At the peak ({peak.name}): {top}. RL, per step (mean of {len(steps)}): rollouts "
        f"{sum(r['rollout_s'] for r in steps) / max(len(steps), 1):.1f} s, update "
        f"{sum(r['update_s'] for r in steps) / max(len(steps), 1):.1f} s.",
        "",
        f"Held-out success (greedy, {int(last['heldout/tasks'])} test-split calendars): "
        f"**{base:.1%} (base) → {warm:.1%} (warm start) → {last['heldout/success_after']:.1%} "
        f"(after RL)**; RL's own gain **{pts['gain']:+.1f} points (95% paired interval "
        f"{pts['gain_low']:+.1f} to {pts['gain_high']:+.1f})**, target 20 with the interval "
        "above zero.",
        "",
        machine_line(start_load=load_before[0]),
    ])
    if args.set or args.set_rl or args.no_write:
        print(body)  # not the job as committed, or not to be written: a run's own section
        return
    write_section(TITLE, body, DOC)


if __name__ == "__main__":
    main()
