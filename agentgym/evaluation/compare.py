"""Compare two eval runs: per entry, B - A with a 95% confidence interval.

- Success rate: Newcombe's hybrid score interval for a difference of two independent
  proportions (Newcombe 1998, "Interval estimation for the difference between independent
  proportions", method 10), built from the two Wilson intervals::

      lower = d - sqrt((p_b - l_b)^2 + (u_a - p_a)^2)
      upper = d + sqrt((u_b - p_b)^2 + (p_a - l_a)^2),    d = p_b - p_a

- Mean reward: percentile bootstrap (2,000 resamples of each run's episodes, seeded), from
  the runs' ``results.jsonl``; blank when a run has none.

Deviation: rollouts of one task are treated as independent episodes (the intervals are then
somewhat narrow when a suite has several rollouts per task).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym.errors import ConfigError, SchemaError
from agentgym.evaluation.metrics import entry_of
from agentgym.evaluation.results import RESULTS_FILE, load_results
from agentgym.evaluation.stats import bootstrap_diff, newcombe
from agentgym.jsonl import loads_strict


@dataclass(frozen=True)
class Difference:
    """B - A for one metric of one entry, with its 95% interval (None where unknown)."""

    a: float | None
    b: float | None
    diff: float | None
    low: float | None
    high: float | None

    @property
    def significant(self) -> bool:
        """Whether the interval excludes 0."""
        return self.low is not None and self.high is not None and (self.low > 0 or self.high < 0)


def load_run(path: str | Path) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """A run's ``results.json`` and its episodes' rewards per entry (and ``overall``)."""
    path = Path(path)
    file = path / "results.json" if path.is_dir() else path
    if not file.exists():
        raise FileNotFoundError(f"no results.json at {str(file)!r}; pass an `agentgym eval` "
                                "output folder")
    results = read_results_json(file)
    rewards: dict[str, list[float]] = {}
    for traj in load_results(file.parent / RESULTS_FILE).trajectories:
        if traj.scorable:
            value = traj.outcome_reward or 0.0
            rewards.setdefault(entry_of(traj), []).append(value)
            rewards.setdefault("overall", []).append(value)
    return results, rewards


def read_results_json(file: Path) -> dict[str, Any]:
    """An eval's ``results.json``, checked to hold what :func:`compare` reads.

    Raises:
        SchemaError: Not JSON (cut short?), or not an eval's results: naming the file, the
            entry and the field.
    """
    expected = "expected the results.json that `agentgym eval` writes"
    try:
        results = loads_strict(file.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise SchemaError(f"{file}: not UTF-8 text; {expected}") from None
    except SchemaError as exc:
        raise SchemaError(f"{file}: {exc} (cut short?); {expected}") from None
    metrics = results.get("metrics") if isinstance(results, dict) else None
    if not isinstance(metrics, dict) or not metrics:
        raise SchemaError(f"{file} holds no `metrics` mapping of entries; {expected}")
    for name, m in metrics.items():
        raw = [m.get(k) for k in ("episodes", "errors", "successes")] \
            if isinstance(m, dict) else []
        counts = [v for v in raw if type(v) is int and v >= 0]
        if len(counts) != 3 or counts[1] + counts[2] > counts[0]:
            raise SchemaError(f"{file}: entry {name!r} needs whole counts episodes >= errors + "
                              f"successes >= 0, got {raw or m!r}; {expected}")
        for key in ("success_rate", "mean_reward"):
            if m.get(key) is not None and type(m.get(key)) not in (int, float):
                raise SchemaError(f"{file}: entry {name!r}: {key} must be a number or null, "
                                  f"got {m.get(key)!r}; {expected}")
    return results


def compare(a: Mapping[str, Any], b: Mapping[str, Any], rewards_a: Mapping[str, list[float]],
            rewards_b: Mapping[str, list[float]]) -> dict[str, dict[str, Difference]]:
    """Per entry present in both runs: success and mean-reward differences.

    ``overall`` is compared only when both runs hold the same entries: over different
    entries it would set different tasks against each other.

    Raises:
        ConfigError: The runs share no entry (nothing can be compared).
    """
    out: dict[str, dict[str, Difference]] = {}
    ma, mb = a["metrics"], b["metrics"]
    ea, eb = set(ma) - {"overall"}, set(mb) - {"overall"}
    if not ea & eb:
        raise ConfigError(f"the two evals share no entry (A: {sorted(ea)}, B: {sorted(eb)}), "
                          "so nothing can be compared; compare evals of the same suite")
    names = [n for n in mb if n in ma and (n != "overall" or ea == eb)]
    for name in names:
        x, y = ma[name], mb[name]
        na, nb = x["episodes"] - x["errors"], y["episodes"] - y["errors"]
        if na and nb:
            d, lo, hi = newcombe(x["successes"], na, y["successes"], nb)
            success = Difference(x["success_rate"], y["success_rate"], d, lo, hi)
        else:
            success = Difference(x["success_rate"], y["success_rate"], None, None, None)
        ra, rb = rewards_a.get(name, []), rewards_b.get(name, [])
        if ra and rb:
            d, lo, hi = bootstrap_diff(ra, rb)
            reward = Difference(x["mean_reward"], y["mean_reward"], d, lo, hi)
        else:
            diff = (y["mean_reward"] - x["mean_reward"]) if None not in (
                x["mean_reward"], y["mean_reward"]) else None
            reward = Difference(x["mean_reward"], y["mean_reward"], diff, None, None)
        out[name] = {"success": success, "reward": reward}
    return out


def warnings_for(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Why the two runs may not be comparable (different suite versions, tasks, k)."""
    notes = []
    if a.get("suite_tag") != b.get("suite_tag"):
        notes.append(f"different suites: {a.get('suite_tag')} vs {b.get('suite_tag')}")
    ea, eb = _suite_entries(a), _suite_entries(b)
    for name in sorted(set(ea) & set(eb)):
        if ea[name] != eb[name]:
            notes.append(f"entry {name!r} differs (tasks, seeds, rollouts or kwargs)")
    only = sorted(set(a["metrics"]) ^ set(b["metrics"]))
    if only:
        notes.append(f"entries in only one run (not compared): {only}; no overall row, "
                     "as the runs' totals cover different entries")
    return notes


def _suite_entries(results: Mapping[str, Any]) -> dict[str, Any]:
    """The suite entries a ``results.json`` lists, by name (none if it lists none)."""
    suite = results.get("suite")
    entries = suite.get("entries") if isinstance(suite, dict) else None
    return {e["name"]: e for e in entries if isinstance(e, dict) and "name" in e} \
        if isinstance(entries, list) else {}
