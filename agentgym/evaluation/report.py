"""Eval reports: ``results.json``, a Markdown table and PNG plots.

- ``success.png``: success rate per suite entry with 95% Wilson intervals.
- ``learning_curve.png``: success against training step, from several evaluated checkpoints
  (:func:`learning_curve_from_evals`) or a training run's ``metrics.jsonl``
  (:func:`learning_curve_from_run`, which reads the held-out and in-training suite evals).

matplotlib is imported inside the plotting functions only (``pip install 'agentgym[eval]'``).
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym.errors import ConfigError, MissingExtraError
from agentgym.evaluation.metrics import MEAN_OF_ENTRIES, entry_mean, read_metrics
from agentgym.evaluation.stats import wilson
from agentgym.files import atomic_write

COLUMNS = (("episodes", "episodes", "d"), ("success", "success_rate", "%"),
           ("mean reward", "mean_reward", ".3f"), ("pass@1", "pass@1", "%"),
           ("steps/ep", "steps_per_episode", ".1f"),
           ("tokens/ep", "completion_tokens_per_episode", ".0f"),
           ("invalid", "invalid_action_rate", "%"), ("errors", "error_rate", "%"),
           ("s/ep", "wall_s_per_episode", ".2f"))


def fmt(value: Any, spec: str) -> str:
    """A table cell: ``-`` for None, percentages with one decimal."""
    if value is None:
        return "-"
    if spec == "%":
        return f"{100 * value:.1f}%"
    return format(value, spec)


def columns(k: int) -> list[tuple[str, str, str]]:
    """Table columns, with pass@k and avg@k when k > 1."""
    cols = list(COLUMNS)
    if k > 1:
        cols[4:4] = [(f"pass@{k}", f"pass@{k}", "%"), (f"avg@{k}", f"avg@{k}", "%")]
    return cols


def markdown_table(results: Mapping[str, Any]) -> str:
    """The per-entry and overall metrics as a Markdown table."""
    cols = columns(int(results.get("k", 1)))
    lines = ["| env | " + " | ".join(c[0] for c in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for name, m in rows(results):
        label = f"**{name}**" if name in ("overall", MEAN_OF_ENTRIES) else name
        lines.append(f"| {label} | " + " | ".join(fmt(m.get(key), spec) for _, key, spec in cols)
                     + " |")
    return "\n".join(lines)


def rows(results: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """Table rows: the entries, their unweighted mean (two or more entries), then overall."""
    metrics = results["metrics"]
    out = [(k, m) for k, m in metrics.items() if k != "overall"]
    mean = entry_mean(metrics)
    if mean is not None:
        out.append((MEAN_OF_ENTRIES, {"pass@1": mean["pass@1"],
                                      "success_rate": mean["success_rate"]}))
    if "overall" in metrics:
        out.append(("overall", metrics["overall"]))
    return out


def write_report(results: Mapping[str, Any], out_dir: str | Path) -> list[Path]:
    """Write ``results.json``, ``report.md`` and ``success.png`` into ``out_dir``.

    Returns:
        The files written.
    """
    out_dir = Path(out_dir)
    atomic_write(out_dir / "results.json", json.dumps(results, indent=2))  # whole or old
    plot = plot_success(results, out_dir / "success.png")
    overall = results["metrics"]["overall"]
    text = [f"# Evaluation: {results.get('suite_tag', '?')} · {results.get('policy', '?')}", "",
            f"**{headline(results)}**", "",
            f"- episodes: {overall['episodes']} ({overall['errors']} errors), k = "
            f"{results.get('k', 1)}, temperature {results.get('temperature')}, seed "
            f"{results.get('seed')}",
            f"- wall time: {results.get('wall_s', 0):.1f} s", *mean_line(results), "",
            markdown_table(results), "",
            "![success per env](success.png)", ""]
    if (out_dir / "learning_curve.png").exists():
        text += ["![learning curve](learning_curve.png)", ""]
    atomic_write(out_dir / "report.md", "\n".join(text))
    return [out_dir / "results.json", out_dir / "report.md", plot]


def mean_line(results: Mapping[str, Any]) -> list[str]:
    """The report's line on the unweighted mean of the entries (none for one entry)."""
    mean = entry_mean(results["metrics"])
    if mean is None:
        return []
    left_out = (f"; {mean['unscored']} entries with only errored episodes left out"
                if mean["unscored"] else "")
    return [f"- unweighted mean over the {mean['entries']} entries (each counts once, "
            f"whatever its size): pass@1 {fmt(mean['pass@1'], '%')}{left_out}"]


def require_plots() -> None:
    """Check matplotlib is there before a long eval, not when its report is written.

    Raises:
        MissingExtraError: It is not installed (the message names the install command).
    """
    _pyplot()


def headline(results: Mapping[str, Any]) -> str:
    """The overall result in one line: success over all episodes and over scored ones.

    Error episodes (infrastructure faults) are not scored, so a success rate over the scored
    episodes alone can read 100% while half the episodes errored; the headline gives both.
    """
    m = results["metrics"]["overall"]
    n, errors, wins = m["episodes"], m["errors"], m["successes"]
    scored = n - errors
    rate = fmt(wins / n if n else None, "%")
    text = f"success {wins}/{n} = {rate} of all episodes"
    if errors:
        text += (f" (the {errors} errors count as failures); {wins}/{scored} = "
                 f"{fmt(m['success_rate'], '%')} of the {scored} scored")
    return text + f"; wall time {results.get('wall_s', 0.0):.1f} s"


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only; never a display
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingExtraError("matplotlib", "eval", "eval report plots") from exc
    return plt


def plot_success(results: Mapping[str, Any], path: str | Path) -> Path:
    """Bar chart of success rate per entry (and overall) with 95% Wilson intervals."""
    plt = _pyplot()
    names = list(results["metrics"])
    rates, lows, highs = [], [], []
    for name in names:
        m = results["metrics"][name]
        n = m["episodes"] - m["errors"]
        rate = m["success_rate"] or 0.0
        lo, hi = wilson(m["successes"], n)
        rates.append(rate)
        lows.append(max(rate - lo, 0.0))
        highs.append(max(hi - rate, 0.0))
    fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(names) + 1.5), 3.6))
    colors = ["#4c72b0"] * (len(names) - 1) + ["#dd8452"]
    ax.bar(range(len(names)), rates, yerr=[lows, highs], capsize=4, color=colors)
    for i, name in enumerate(names):  # the rate and its episode count, readable at 0%
        m = results["metrics"][name]
        ax.text(i + 0.06, rates[i] + 0.01, f"{rates[i]:.0%}\nn={m['episodes'] - m['errors']}",
                ha="left", va="bottom", fontsize=8)
    ax.set_xticks(range(len(names)), names, rotation=20, ha="right")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("success rate")
    ax.set_title(f"{results.get('suite_tag', '')} · {results.get('policy', '')} (95% Wilson)")
    fig.tight_layout()
    return _save_figure(plt, fig, path)


def plot_learning_curve(series: Mapping[str, Sequence[tuple[float, float]]], path: str | Path,
                        title: str = "learning curve", xlabel: str = "training step") -> Path:
    """Line plot of ``{name: [(x, success), ...]}``."""
    plt = _pyplot()
    if not any(series.values()):
        raise ConfigError("no points to plot: the run logged no evaluation metrics (set "
                          "env.eval_seeds or eval.suite in the training config)")
    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    for name, points in series.items():
        if points:
            xs, ys = zip(*sorted(points), strict=True)
            ax.plot(xs, ys, marker="o", label=name)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("success rate")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save_figure(plt, fig, path)


def curve_from_metrics(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """Success series from training metrics rows: every ``eval/...success_rate`` key."""
    series: dict[str, list[tuple[float, float]]] = {}
    for row in rows:
        for key, value in row.items():
            if key.startswith("eval/") and key.endswith("success_rate") and value is not None:
                name = key.removeprefix("eval/").removesuffix("success_rate").rstrip("/")
                series.setdefault(name or "held-out", []).append((float(row["step"]),
                                                                   float(value)))
    return series


def run_curve(run_dir: str | Path) -> dict[str, list[tuple[float, float]]]:
    """The held-out success series a training run logged (:func:`curve_from_metrics`).

    Raises:
        FileNotFoundError: The folder has no ``metrics.jsonl``.
        SchemaError: A damaged ``metrics.jsonl``.
        ConfigError: It holds no held-out evaluation.
    """
    run_dir = Path(run_dir)
    if not (run_dir / "metrics.jsonl").is_file():
        raise FileNotFoundError(f"no metrics.jsonl in {run_dir}; pass a training run_dir")
    series = curve_from_metrics(read_metrics(run_dir))
    if not any(series.values()):
        raise ConfigError(f"--train-run {str(run_dir)!r}: its metrics.jsonl holds no held-out "
                          "evaluation to plot; set env.eval_seeds or eval.suite in the training "
                          "config")
    return series


def learning_curve_from_run(run_dir: str | Path, path: str | Path) -> Path:
    """Plot the evaluations logged in a training run's ``metrics.jsonl``."""
    return plot_learning_curve(run_curve(run_dir), path,
                               title=f"learning curve: {Path(run_dir).name}")


def learning_curve_from_evals(evals: Sequence[tuple[float, Mapping[str, Any]]],
                              path: str | Path) -> Path:
    """Plot success per entry and overall from several ``results.json`` (one per checkpoint).

    Args:
        evals: ``(x, results)`` pairs, x being the checkpoint's step (or its position).
        path: The PNG to write.
    """
    series: dict[str, list[tuple[float, float]]] = {}
    for x, results in evals:
        for name, m in results["metrics"].items():
            if m.get("success_rate") is not None:
                series.setdefault(name, []).append((x, m["success_rate"]))
    return plot_learning_curve(series, path, title="success per checkpoint",
                               xlabel="checkpoint")


def _save_figure(plt: Any, fig: Any, path: str | Path) -> Path:
    """PNG bytes rendered in memory, then written atomically (no half-written plot)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return atomic_write(path, buf.getvalue())
