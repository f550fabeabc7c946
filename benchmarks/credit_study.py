"""Does step-level credit beat GRPO on multi-turn tasks? SFT-warm SmolLM2, then RL.

    python benchmarks/credit_study.py                 # unfinished units for 14 minutes
    python benchmarks/credit_study.py --all           # every unit, no time limit
    python benchmarks/credit_study.py --report        # only rewrite docs/learning.md
    python benchmarks/credit_study.py --scale         # GPU: bigger groups, vLLM-free budget x4

Units, per env (Sokoban, its arm at 4x the steps, TextArena FrozenLake; then SWE for
G-RA), in order:

1. ``demos``: expert episodes on training seeds (``agentgym rollout ENV --policy expert``);
2. ``sft``: ``agentgym sft`` of SmolLM2 on them; its evaluation uses *tuning* seeds
   (500,000+), so the SFT amount is chosen without looking at the held-out seeds;
3. ``warmth`` (envs measured sampled, ``eval_temperature``): the SFT model sampled on the
   tuning seeds;
4. ``revisits``: groups of SFT-model rollouts on training seeds; the share of steps whose
   HGPO level-k group (same last k state keys within the group) has another member;
5. ``rl``: ``agentgym train`` from the SFT model with GRPO, GiGPO, HGPO and SALT, 3 seeds
   each, one budget (steps × tasks × group size), held-out success (1,000,000+; greedy, or
   sampled at ``eval_temperature``) before, every ``eval_every`` steps and after. RL runs
   wait until the SFT model's tuning-seed success, measured the same way, is within
   ``BAND`` (15-60%): below it most groups hold no reward difference to learn from.

SWE compares reward accumulation instead of estimators: GRPO with G-RA (``gated``) against
``direct``, SFT-warm from the oracle episodes, with the training rollouts' completion,
modification and resolve rates per step; it needs Docker and does not wait on the band. It
runs twice, from two warm starts: ``swe`` on the oracle's ``git apply`` calls, ``swe_editor``
on the oracle as ``editor`` calls (``expert=editor``), under one RL budget.

Every unit runs as a subprocess of the CLI, keyed by env, estimator, seed and budget. Its
files (rollouts, checkpoints, models) go under ``--cache`` (default
``~/.cache/agentgym/credit_study``, outside the clone, so a new clone on the same machine
finds them); its result, a small JSON file, goes under ``--records`` (default
``benchmarks/credit_study/``, committed), so finished units carry over to a fresh clone and
are never redone. An interrupted unit resumes from its last checkpoint (``--resume``;
checkpoints are resumable and saved every step); a finished training run keeps only its
last checkpoint's weights (about 0.5 GB, not 3 GB, per run). Where a finished unit's files
are needed by one still to run and the cache no longer holds them (a fresh clone), the unit
is run again into the cache, its record kept, and a regenerated result that differs from
the record is printed. ``--limit-minutes`` stops a unit (it then resumes on the next call),
so the study can go on across days on a shared machine; run each call under
``flock /tmp/heavy.lock``. ``docs/learning.md`` is rewritten after every call from the
records, saying which units are still missing.

The study's code is the package's ``agentgym.trainers.study``; this file is its command line.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import yaml

from agentgym.trainers.study.report import report
from agentgym.trainers.study.run import run_setup
from agentgym.trainers.study.setups import SETUPS, scaled
from agentgym.trainers.study.units import (
    CACHE,
    DEFAULT_ENVS,
    RECORDS,
    ROOT,
    SCALED_RECORDS,
    machine,
    units,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", default=DEFAULT_ENVS)
    parser.add_argument("--cache", type=Path, default=CACHE,
                        help="rollouts, checkpoints and models (large, not committed)")
    parser.add_argument("--records", type=Path, default=None,
                        help="finished units' results (small JSON, committed; default "
                             "benchmarks/credit_study/, with --scale its scaled/ folder)")
    parser.add_argument("--all", action="store_true", help="every unit, no time limit")
    parser.add_argument("--report", action="store_true", help="only rewrite docs/learning.md")
    parser.add_argument("--scale", action="store_true", help="GPU budget (see scaled())")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="change a Setup field (YAML value), e.g. --set steps=1; the "
                             "cache keys change with it")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "learning.md")
    parser.add_argument("--limit-minutes", type=float, default=14.0,
                        help="stop after this long (an unfinished unit resumes next call)")
    args = parser.parse_args()
    args.records = args.records or (SCALED_RECORDS if args.scale else RECORDS)
    setups = [SETUPS[name] for name in args.envs.split(",")]
    if args.scale:
        setups = [scaled(s) for s in setups]
    changes = {}
    for item in args.set:
        key, _, value = item.partition("=")
        parsed = yaml.safe_load(value)
        changes[key] = tuple(parsed) if isinstance(parsed, list) else parsed
    setups = [replace(s, **changes) for s in setups]
    if not args.report:
        # one env at a time: its demos, SFT and revisits before its RL runs
        end = time.time() + args.limit_minutes * 60
        for setup in setups:
            every = list(units(setup, args.cache, args.records))
            if not run_setup(setup, every, args.cache, args.records,
                             None if args.all else end):
                break
    # the page covers every env of the study, whichever this call worked on; a call's time
    # limit and env list are not part of what reproduces it; a --scale call's --set changes
    # its own setups only, and the other kind's records stay where they are
    command = " ".join(["flock /tmp/heavy.lock python benchmarks/credit_study.py",
                        *(f"--set {item}" for item in args.set if not args.scale)])
    names = DEFAULT_ENVS.split(",")
    cpu = [replace(SETUPS[n], **({} if args.scale else changes)) for n in names]
    gpu = [replace(scaled(SETUPS[n]), **(changes if args.scale else {})) for n in names]
    args.out.write_text(report(cpu, args.cache, command, args.out,
                               RECORDS if args.scale else args.records, gpu,
                               args.records if args.scale else SCALED_RECORDS))
    print(f"wrote {args.out} ({machine()})")


if __name__ == "__main__":
    main()
