"""Mined real-code SWE tasks: mining yield and time, and oracle / empty-patch resolve rates.

    python benchmarks/swe_real.py                 # yield and mining time from the reports
    python benchmarks/swe_real.py --validate      # + oracle and empty-patch rates, in Docker
    python benchmarks/swe_real.py --validate --split test --write

Yield and time come from ``agentgym/envs/swe/real/reports/<package>.json``, which
``agentgym swe mine`` writes. ``--validate`` plays every task of ``--split`` in Docker: the
judging run on the unchanged base (what an empty patch would get) and the oracle patch
through the env.
``--write`` puts the tables into docs/swe.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections import Counter
from pathlib import Path

from results import write_section

from agentgym.envs.swe.mining.mutate import STRATEGIES
from agentgym.envs.swe.mining.recipe import REAL_DIR, load_recipes
from agentgym.envs.swe.task import real_tasks

DOC = Path(__file__).resolve().parent.parent / "docs" / "swe.md"


MINING_NOTES = """\
The reports are those `agentgym swe mine NAME` writes. "Kept" counts what mining kept, before
the one cachetools task and five six tasks that the recipes drop (see Validation). Each
package was mined alone, one after another, on an otherwise idle machine, and the load
average at its start is in the table. "Suite s" is one run of the package's stable tests by
id. A mutant whose test run passes its time limit counts as "timed out". Under load, a
mutant that breaks half the suite can hit that limit first, so those two columns can trade
counts between runs while "kept" stays the same. Left out: pyparsing, whose suite did not
finish one baseline run in 15 minutes on a loaded machine; it has not been tried idle.
"""


def _load(report: dict) -> str:
    load = report.get("load_average")
    return " / ".join(f"{x:.1f}" for x in load) if load else "not recorded"


def mining_tables() -> str:
    """Markdown: per package and per strategy, candidates tried -> kept, and time."""
    reports = [json.loads(p.read_text()) for p in sorted((REAL_DIR / "reports").glob("*.json"))]
    recipes = load_recipes()
    tasks = real_tasks()
    shipped = Counter(t.instance_id.split("__")[0] for t in tasks)
    rows = ["| package | licence | split | stable tests (flaky) | suite s | candidates | "
            "tried | kept | yield | mining s | load average at the start |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in reports:
        recipe = recipes.get(r["package"])
        tried = sum(s["tried"] for s in r["strategies"].values())
        kept = sum(s["kept"] for s in r["strategies"].values())
        rows.append(f"| {recipe.spec} | {recipe.license} | {recipe.split} | "
                    f"{r['stable_tests']} ({r['flaky_tests']}) | {r['suite_seconds']:.1f} | "
                    f"{r['candidates']} | {tried} | {kept} | {kept / max(tried, 1):.0%} | "
                    f"{r['seconds']:.0f} | {_load(r)} |")
    total = {s: Counter() for s in STRATEGIES}
    for r in reports:
        for s, y in r["strategies"].items():
            total[s].update(y)
    srows = ["| strategy | tried | kept | yield | no test failed | half the suite failed | "
             "timed out |", "|---|---|---|---|---|---|---|"]
    for s, y in total.items():
        srows.append(f"| {s} | {y['tried']} | {y['kept']} | {y['kept'] / max(y['tried'], 1):.0%}"
                     f" | {y['survived']} | {y['too_broad']} | {y['timed_out']} |")
    mrows = ["| package | " + " | ".join(STRATEGIES) + " |",
             "|---|" + "---|" * len(STRATEGIES)]
    for r in reports:  # kept/tried per package and strategy
        y = r["strategies"]
        mrows.append(f"| {r['package']} | " + " | ".join(
            f"{y[s]['kept']}/{y[s]['tried']}" for s in STRATEGIES) + " |")
    srows += ["", "Kept/tried per package and strategy:", "", *mrows]
    splits = Counter(t.split for t in tasks)
    return ("\n".join(rows) + "\n\n" + "\n".join(srows) + "\n\n"
            f"Shipped: {len(tasks)} tasks from {len(shipped)} packages "
            f"({splits['train']} train, {splits['test']} test).\n")


async def validate(split: str) -> str:
    """Markdown: oracle and empty-patch (unchanged base) resolve rates over ``split``."""
    from agentgym.envs.swe import SWEEnv
    from agentgym.envs.swe.evaluation import evaluate
    from agentgym.sandboxes.pool import close_shared_pools

    tasks = [t for t in real_tasks() if split == "all" or t.split == split]
    oracle = empty = errors = 0
    start = time.monotonic()
    try:
        for task in tasks:
            try:
                async with SWEEnv(tasks=[task], split="all", sandbox="docker",
                                  pool_size=1) as env:
                    await env.reset(options={"task_id": task.instance_id})
                    base = await evaluate(env.sandbox, task, patch="(unchanged base)")
                    empty += base.resolved
                    await env.step(env.expert_action())
                    result = await env.step(env.expert_action())
                    oracle += result.reward == 1.0
            except Exception as exc:  # counted and reported, never scored
                errors += 1
                print(f"error {task.instance_id}: {exc!r}")
    finally:
        await close_shared_pools()
    n = len(tasks)
    return (f"| tasks ({split}) | oracle resolved | empty patch (unchanged base) resolved | "
            f"errors | seconds |\n|---|---|---|---|---|\n| {n} | {oracle}/{n} | {empty}/{n} | "
            f"{errors} | {time.monotonic() - start:.0f} |\n")


def main() -> None:
    """Print the tables (and write them into docs/swe.md with --write)."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--validate", action="store_true", help="run the Docker resolve rates")
    ap.add_argument("--split", default="test", choices=("train", "test", "all"))
    ap.add_argument("--write", action="store_true", help="write the sections into docs/swe.md")
    args = ap.parse_args()
    load = "load average {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())
    body = mining_tables()
    print(body)
    if args.write:
        write_section("Mining yield", body + "\n`python benchmarks/swe_real.py --write` "
                      "(tables from the mining reports).\n\n" + MINING_NOTES, DOC)
    if args.validate:
        rates = asyncio.run(validate(args.split))
        load = "load average {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())
        print(rates, load)
        if args.write:
            write_section(f"Resolve rates ({args.split})", rates + "\n`python benchmarks/"
                          f"swe_real.py --validate --split {args.split} --write`, measured "
                          f"under load on a shared 2-core machine ({load}).\n", DOC)


if __name__ == "__main__":
    main()
