"""Plain-Python reference implementations of HGPO and SALT: per-step loops, dicts, no numpy.

Written straight from the credit-assignment spec (§3, §4) to check the vectorized estimators
of this package: ``tests/trainers/test_hgpo.py`` and ``test_salt.py`` compare them on random
groups, and ``benchmarks/estimators_step_level.py`` times both and asserts they agree. They
live in the package, not beside the tests, so that tests and benchmarks import them by name;
an estimator plug-in that varies HGPO or SALT can check itself against them the same way.
Nothing registers them and the trainer never calls them. One numeric detail is copied on
purpose: HGPO drops pairs whose advantage is *exactly* 0, so a level's statistics are
computed the way the estimator does (members sorted, shifted by the smallest, summed left to
right); otherwise a rounding residue of 1e-17 would keep a pair the estimator drops and
change the weighted mean.

    >>> from agentgym.trainers.advantages.reference import hgpo_reference, salt_reference
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from agentgym.parsing import parse_tool_calls
from agentgym.types import Group, Step, Trajectory

EPS = 1e-6


def _returns(traj: Trajectory, gamma: float, lam: float) -> list[float]:
    out, acc = [0.0] * len(traj.steps), 0.0
    for t in range(len(traj.steps) - 1, -1, -1):
        acc = float(traj.steps[t].result.reward or 0.0) + gamma * acc
        out[t] = acc
    return [g - (0.0 if s.valid else lam) for g, s in zip(out, traj.steps, strict=True)]


def _normalized(members: list[float], value: float, mode: str, ddof: int) -> float:
    """(value − mean) [/ (std + ε)] over ``members``, computed as the estimator does."""
    if len(members) < 2:
        return 0.0
    xs = sorted(members)
    shift, total = xs[0], 0.0
    for x in xs:
        total += x - shift
    mean = total / len(xs)
    dev = (value - shift) - mean
    if mode == "mean_norm":
        return dev
    squares = 0.0
    for x in xs:
        squares += ((x - shift) - mean) * ((x - shift) - mean)
    return dev / (math.sqrt(squares / max(len(xs) - ddof, 1)) + EPS)


def _outcome(traj: Trajectory) -> float:
    return float(traj.with_outcome().outcome_reward)  # type: ignore[arg-type]


def hgpo_reference(groups: Sequence[Group], history_length: int, *, gamma: float = 0.95,
                   invalid_penalty: float = 0.1, mode: str = "mean_std_norm",
                   alpha: float = 1.0, weight_offset: float = 1.0,
                   base_group: bool = False) -> dict[str, list[float]]:
    """HGPO advantages (spec §3), one step at a time."""
    out: dict[str, list[float]] = {}
    for group in groups:
        trajs = group.scorable
        if len(trajs) < 2:
            out.update({t.id: [0.0] * len(t.steps) for t in trajs})
            continue
        returns = [_returns(t, gamma, invalid_penalty) for t in trajs]
        members: dict[tuple[object, ...], list[float]] = {}  # (k, suffix) -> returns
        for traj, rets in zip(trajs, returns, strict=True):
            keys = [s.state_key for s in traj.steps]
            for t in range(len(keys)):
                for k in range(1, min(history_length + 1, t + 1) + 1):
                    suffix = tuple(keys[t - k + 1:t + 1])
                    if None not in suffix:
                        members.setdefault((k, *suffix), []).append(rets[t])
        entries = [_outcome(t) for t in trajs for _ in t.steps]  # per-step episode stats
        for traj, rets in zip(trajs, returns, strict=True):
            keys, values = [s.state_key for s in traj.steps], []
            for t, step in enumerate(traj.steps):
                num = den = 0.0
                for k in range(1, min(history_length + 1, t + 1) + 1):
                    suffix = tuple(keys[t - k + 1:t + 1])
                    a = 0.0 if None in suffix else _normalized(
                        members[(k, *suffix)], rets[t], mode, 0)
                    if a != 0.0:
                        num += (k + weight_offset) ** alpha * a
                        den += (k + weight_offset) ** alpha
                if base_group:
                    a = _normalized(entries, _outcome(traj), mode, 1)
                    a -= 0.0 if step.valid else invalid_penalty
                    if a != 0.0:
                        num, den = num + a, den + 1.0
                values.append(num / (den + EPS))
            out[traj.id] = values
    return out


def _action(step: Step) -> object:
    """Canonical action (spec §4), or None when the step cannot be merged."""
    calls = step.action.tool_calls
    parsed = None if calls else parse_tool_calls(step.action.content)
    calls = calls or (parsed.calls if parsed else ())
    if calls:
        return json.dumps([[c.name, c.arguments] for c in calls], sort_keys=True,
                          separators=(",", ":"), ensure_ascii=False, default=repr)
    text = " ".join(step.action.content.split())
    if step.valid and parsed is not None and parsed.format is None and text:
        return ("text", text)
    return None


def _base(trajs: Sequence[Trajectory], base: str, mode: str, episode_stats: str) -> list[float]:
    scores = [_outcome(t) for t in trajs]
    n = len(scores)
    if base == "rloo":
        loo = [s - (sum(scores) - s) / (n - 1) for s in scores]
        if mode == "mean_norm":
            return loo
        std = math.sqrt(sum((s - sum(scores) / n) ** 2 for s in scores) / (n - 1))
        return [x / (std + EPS) for x in loo]
    if base == "gigpo" and episode_stats == "step":
        entries = [s for s, t in zip(scores, trajs, strict=True) for _ in t.steps]
        return [_normalized(entries, s, mode, 1) if t.steps else 0.0
                for s, t in zip(scores, trajs, strict=True)]
    return [_normalized(scores, s, mode, 1) for s in scores]


def salt_reference(groups: Sequence[Group], *, base: str = "grpo", history: int | str = 0,
                   invalid_penalty: float = 0.1, mode: str | None = None,
                   episode_stats: str = "trajectory") -> dict[str, list[float]]:
    """SALT advantages (spec §4), one step at a time."""
    out: dict[str, list[float]] = {}
    mode = mode or ("mean_norm" if base == "rloo" else "mean_std_norm")
    for group in groups:
        trajs = group.scorable
        if len(trajs) < 2:
            out.update({t.id: [0.0] * len(t.steps) for t in trajs})
            continue
        advantages = _base(trajs, base, mode, episode_stats)
        edges: list[list[object]] = []
        holders: dict[object, set[int]] = {}  # edge -> trajectories holding it
        for i, traj in enumerate(trajs):
            keys, actions = [s.state_key for s in traj.steps], [_action(s) for s in traj.steps]
            row: list[object] = []
            for t in range(len(keys)):
                first = 0 if history == "all" else max(0, t - int(history))
                context = [x for u in range(first, t) for x in (keys[u], actions[u])]
                nxt = keys[t + 1] if t + 1 < len(keys) else ("END", _outcome(traj))
                edge = (*context, keys[t], actions[t], nxt)
                if None in edge:  # a None key or an unparsed action: matches nothing
                    edge = ("unique", i, t)
                row.append(edge)
                holders.setdefault(edge, set()).add(i)
            edges.append(row)
        for i, traj in enumerate(trajs):
            values = []
            for t, step in enumerate(traj.steps):
                js = holders[edges[i][t]]
                mean = sum(advantages[j] for j in sorted(js)) / len(js)
                values.append(mean - (0.0 if step.valid else invalid_penalty))
            out[traj.id] = values
    return out
