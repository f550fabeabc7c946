"""How much of the agent job's RL gains the recipe explains, against the seed and the rest.

Reads the top table of docs/agent-job.md (every recipe with a gain on all five seeds) and
splits the gains two ways, as an additive recipe + seed model:

    gain[r, s] = mean + recipe[r] + seed[s] + residual[r, s]

It prints each part's share of the sum of squares, the residual's standard deviation, and
a permutation test of "the recipes do not differ": the gains are shuffled across recipes
within each seed (so seed effects stay), and the recipe sum of squares is compared with
its shuffled values.

    python benchmarks/calendar_recipes.py [--doc docs/agent-job.md] [--permutations 20000]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np

_GAIN = re.compile(r"[+\u2212-]\d+\.\d")


def five_seed_rows(doc: str) -> dict[str, list[float]]:
    """Recipe -> its five gains, from the table whose header starts `| recipe (run) |`."""
    rows: dict[str, list[float]] = {}
    in_table = False
    for line in doc.splitlines():
        if line.startswith("| recipe (run) |"):
            in_table = True
            continue
        if in_table and not line.startswith("|"):
            break
        if in_table and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            gains = [float(g.replace("\u2212", "-")) for g in _GAIN.findall(cells[1])]
            if len(gains) == 5:
                rows[cells[0].replace("*", "")] = gains
    if not rows:
        raise SystemExit("no five-seed rows found: expected a table headed '| recipe (run) |'")
    return rows


def recipe_sum_of_squares(gains: np.ndarray) -> float:
    return float(gains.shape[1] * ((gains.mean(axis=1) - gains.mean()) ** 2).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--doc", default="docs/agent-job.md")
    parser.add_argument("--permutations", type=int, default=20000)
    args = parser.parse_args()
    rows = five_seed_rows(Path(args.doc).read_text())
    gains = np.array(list(rows.values()))
    n_recipes, n_seeds = gains.shape
    grand = gains.mean()
    recipe = gains.mean(axis=1) - grand
    seed = gains.mean(axis=0) - grand
    residual = gains - grand - recipe[:, None] - seed[None, :]
    total = float(((gains - grand) ** 2).sum())
    ss_recipe = recipe_sum_of_squares(gains)
    ss_seed = float(n_recipes * (seed**2).sum())
    ss_residual = float((residual**2).sum())
    residual_sd = (ss_residual / ((n_recipes - 1) * (n_seeds - 1))) ** 0.5

    rng = np.random.default_rng(0)
    shuffled = gains.copy()
    at_least = 0
    for _ in range(args.permutations):
        for s in range(n_seeds):
            shuffled[:, s] = rng.permutation(gains[:, s])
        at_least += recipe_sum_of_squares(shuffled) >= ss_recipe - 1e-9
    p = (at_least + 1) / (args.permutations + 1)

    print(f"{n_recipes} recipes x {n_seeds} seeds, mean gain {grand:+.1f}")
    print("seed means: " + ", ".join(f"{v:+.1f}" for v in gains.mean(axis=0)))
    print(f"share of the sum of squares: recipe {ss_recipe / total:.0%}, seed "
          f"{ss_seed / total:.0%}, residual {ss_residual / total:.0%}")
    print(f"residual standard deviation {residual_sd:.1f} points")
    print(f"recipes differ? permutation p = {p:.3f} ({args.permutations} shuffles within seeds)")


if __name__ == "__main__":
    main()
