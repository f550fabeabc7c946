"""Hostile replies per second through ``step()`` of every env the fuzz test covers.

For each registered env whose registration needs no Docker, browser or GPU, sends N replies
from :func:`agentgym.fuzz.hostile_replies` (resets included, as in the test) and prints the
replies per second and the exceptions seen (there should be none). The table goes into the
"Fuzz throughput" section of docs/reliability.md; it shows where the fuzz test's time goes
and why it spreads its 10,000 replies by cost.

    python benchmarks/fuzz_throughput.py [--replies 50] [--match PATTERN]
"""

from __future__ import annotations

import argparse
import asyncio
import fnmatch
import os
import platform
from pathlib import Path

from results import write_section

import agentgym
from agentgym.fuzz import fuzz_env

DOC = Path(__file__).resolve().parent.parent / "docs" / "reliability.md"
SKIPPED_NEEDS = {"docker", "browser", "gpu"}


async def measure(env_ids: list[str], replies: int) -> list[tuple[str, int, float, int]]:
    rows = []
    for env_id in env_ids:
        report = await fuzz_env(agentgym.make(env_id), replies=replies, seed=0)
        rows.append((env_id, report.steps, report.seconds, len(report.failures)))
        print(f"{env_id:40s} {report.steps / report.seconds:8.1f} replies/s "
              f"({report.episodes} episodes, {len(report.failures)} failures)", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replies", type=int, default=50, help="Replies per env.")
    parser.add_argument("--match", default="*", help="Only env ids matching this glob.")
    args = parser.parse_args()
    ids = [i for i, spec in agentgym.registry.items()
           if not SKIPPED_NEEDS & set(spec.system_requirements) and fnmatch.fnmatch(i, args.match)]
    load_before = os.getloadavg()
    rows = asyncio.run(measure(ids, args.replies))
    load_after = os.getloadavg()
    total_s = sum(r[2] for r in rows)
    lines = [
        f"Command: `python benchmarks/fuzz_throughput.py --replies {args.replies}`"
        + (f" `--match '{args.match}'`" if args.match != "*" else "") + f"; {platform.machine()}"
        f", {os.cpu_count()} CPUs, load average {load_before[0]:.1f} before and "
        f"{load_after[0]:.1f} after (1-minute), measured under load on a shared machine: "
        "absolute rates are low and noisy, the ratios between envs are what matters.",
        "",
        f"{len(rows)} envs, {sum(r[1] for r in rows):,} replies in {total_s:.0f} s, "
        f"{sum(r[3] for r in rows)} failures.",
        "",
        "| env | replies/s | failures |",
        "|---|---:|---:|",
        *(f"| `{env_id}` | {n / s:.1f} | {f} |" for env_id, n, s, f in
          sorted(rows, key=lambda r: r[1] / r[2])),
    ]
    write_section("Fuzz throughput (measured)", "\n".join(lines), DOC)


if __name__ == "__main__":
    main()
