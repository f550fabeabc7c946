"""The times-table job (the README's quick example), timed: wall, CPU seconds, peak memory
and the held-out gain. The README's main job, the agent job, has its own:
``benchmarks/agent_job.py``.

Runs the README's `agentgym train examples/quickstart.yaml` (with ``run_dir`` moved to
``--run-dir``) in a child process, measures its wall time, user + system CPU seconds and
peak resident memory (``getrusage`` of the child, as ``/usr/bin/time -v`` reports them),
then reads held-out success before/after and the gain's 95% interval from the run's
metrics and writes them to docs/benchmarks.md.

On a machine shared with other work the wall time is inflated; CPU seconds / cores
estimates the wall time of an idle machine (the section says which it was).

    python benchmarks/main_job.py [--run-dir runs/main_job] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from results import machine_line, write_section

ROOT = Path(__file__).resolve().parent.parent
TITLE = "Times-table job (README's quick example): time, memory and held-out gain"


def readme_command() -> list[str]:
    """The README's `agentgym train examples/quickstart.yaml`."""
    found = re.search(r"`(agentgym train examples/quickstart\.yaml[^`]*)`",
                      (ROOT / "README.md").read_text())
    if found is None:
        raise SystemExit("README.md names no `agentgym train examples/quickstart.yaml`")
    return shlex.split(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-dir", default="runs/main_job")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    command = readme_command()
    run_dir = (ROOT / args.run_dir).resolve()
    if run_dir.exists():
        shutil.rmtree(run_dir)  # a fresh run: train refuses a folder with checkpoints
    load_before = os.getloadavg()
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "agentgym.cli", *command[1:],
                           f"run_dir={run_dir}"], cwd=ROOT)
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"the times-table job failed (exit {proc.returncode})")
    cpu_s, peak_mb = usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = rows[-1]
    cores = os.cpu_count() or 1
    pts = {k: 100 * last[f"heldout/{k}"] for k in ("gain", "gain_low", "gain_high")}
    figures = (f"wall {wall / 60:.1f} min, CPU {cpu_s:.0f} s (user + system; / {cores} cores = "
               f"{cpu_s / cores / 60:.1f} min), peak RSS {peak_mb:.0f} MB; held-out success "
               f"{last['heldout/success_before']:.1%} → {last['heldout/success_after']:.1%} "
               f"({pts['gain']:+.1f} points, 95% interval {pts['gain_low']:+.1f} to "
               f"{pts['gain_high']:+.1f}, {int(last['heldout/tasks'])} held-out tasks)")
    print(figures)
    if args.no_write:
        return
    steps = [r for r in rows if "update_s" in r]
    body = "\n".join([
        f"Command: `{shlex.join(command)}` (as the README runs it; run by "
        "`python benchmarks/main_job.py`, which times the child process).",
        "",
        f"Load average {load_before[0]:.1f} / {load_before[1]:.1f} / {load_before[2]:.1f} "
        "at the start.",
        "",
        "| wall | CPU s (user + sys) | CPU s / cores | peak RSS | held-out success before "
        "→ after | gain (95% paired bootstrap interval) | held-out tasks |",
        "|---:|---:|---:|---:|---|---|---:|",
        f"| {wall / 60:.1f} min | {cpu_s:.0f} | {cpu_s / cores / 60:.1f} min | "
        f"{peak_mb:.0f} MB | {last['heldout/success_before']:.1%} → "
        f"{last['heldout/success_after']:.1%} | {pts['gain']:+.1f} points "
        f"({pts['gain_low']:+.1f} to {pts['gain_high']:+.1f}) | {int(last['heldout/tasks'])} |",
        "",
        f"Per step (mean of {len(steps)}): rollouts "
        f"{sum(r['rollout_s'] for r in steps) / max(len(steps), 1):.1f} s, update "
        f"{sum(r['update_s'] for r in steps) / max(len(steps), 1):.1f} s.",
        "",
        machine_line(start_load=load_before[0]),
    ])
    write_section(TITLE, body)


if __name__ == "__main__":
    main()
