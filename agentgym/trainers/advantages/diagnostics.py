"""Step-group recurrence: whether a batch's states come round again within their task group.

GiGPO and HGPO compare a step with the other steps of its task group that stand on the same
state (HGPO also on the same last k states); a step whose state no other step of the group
shares gets no step-level signal. So the share of steps that do have company bounds what a
step-level estimator can add over a trajectory-level one: near 0, GiGPO is GRPO.

For the rollouts of each task group (each a list of state keys, the state *before* each
action) :func:`step_group_recurrence` counts, over every step of every rollout:

- ``grouped[k - 1]``: steps whose level-k group has another member, i.e. whose last k state
  keys (this step's and the k - 1 before it, in the same rollout) occur as the last k keys of
  another step of the group, in any rollout, this one included. Level 1 is GiGPO's anchor
  state group; levels 1 … K + 1 are HGPO's with context K. A step with fewer than k steps
  behind it has no level-k group.
- ``across``: steps whose state key occurs in *another* rollout of the group: a meeting that
  one rollout going round in circles cannot explain.
- ``revisited``: steps whose state key the same rollout had at an earlier step (a loop).

A ``None`` key matches nothing, as in the estimators, but its step is counted in ``steps``.
Keys are compared exactly: GiGPO's ``similarity_threshold`` (similar, not equal, states) is
not modelled. A group with one scorable rollout still counts its own loops as grouped, though
the estimators give such a group no signal (``error_rate`` shows how often that happens).

:func:`recurrence_metrics` gives the same for the trainer's groups as metrics named
``credit/…``; the benchmark scripts report :class:`Recurrence` for env rollouts.

    >>> r = step_group_recurrence([[["a", "b", "a"], ["a", "c"]]], levels=2)
    >>> r.steps, r.grouped, r.across, r.revisited
    (5, (0.6, 0.0), 0.6, 0.2)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

from agentgym.types import Group

Key = Hashable | None
"""A state key (``Step.state_key``); None matches nothing."""


@dataclass(frozen=True)
class Recurrence:
    """How often state keys recur within task groups (module docstring).

    Attributes:
        steps: Steps counted (every step of every rollout, None keys included).
        states: Distinct state keys, summed over groups (None not counted).
        grouped: Per level k = 1, 2, …: the share of steps whose level-k group has another
            member.
        across: The share of steps whose state key occurs in another rollout of the group.
        revisited: The share of steps whose state key the same rollout had before.
    """

    steps: int
    states: int
    grouped: tuple[float, ...]
    across: float
    revisited: float


def step_group_recurrence(groups: Iterable[Sequence[Sequence[Key]]], levels: int = 1
                          ) -> Recurrence:
    """Recurrence of the state keys of ``groups`` (each group: its rollouts' key lists).

    Args:
        groups: Per task group, per rollout, the state key before each action.
        levels: Levels k of ``grouped`` (1 … ``levels``).

    Raises:
        ValueError: ``levels`` < 1.
    """
    if levels < 1:
        raise ValueError(f"levels must be at least 1, got {levels}")
    steps = states = across = revisited = 0
    grouped = [0] * levels
    for group in groups:
        rollouts = [list(keys) for keys in group]
        # windows of the last k keys (a tuple's length is its level), over the whole group
        windows: Counter[tuple[Key, ...]] = Counter()
        owners: dict[Key, set[int]] = {}
        for i, keys in enumerate(rollouts):
            for t, key in enumerate(keys):
                if key is not None:
                    owners.setdefault(key, set()).add(i)
                windows.update(w for w in _windows(keys, t, levels) if None not in w)
        states += len(owners)
        for keys in rollouts:
            seen: set[Key] = set()
            for t, key in enumerate(keys):
                steps += 1
                if key is not None:
                    across += len(owners[key]) > 1
                    revisited += key in seen
                    seen.add(key)
                for k, window in enumerate(_windows(keys, t, levels)):
                    grouped[k] += windows.get(window, 0) >= 2
    total = max(steps, 1)
    return Recurrence(steps=steps, states=states, grouped=tuple(g / total for g in grouped),
                      across=across / total, revisited=revisited / total)


def _windows(keys: Sequence[Key], t: int, levels: int) -> list[tuple[Key, ...]]:
    """The last k keys up to step ``t``, for k = 1 … min(levels, t + 1)."""
    return [tuple(keys[t - k + 1:t + 1]) for k in range(1, min(levels, t + 1) + 1)]


def state_keys(groups: Sequence[Group]) -> list[list[list[Key]]]:
    """The state keys of each group's scorable rollouts (those the estimators see)."""
    return [[[s.state_key for s in traj.steps] for traj in group.scorable] for group in groups]


def recurrence_metrics(groups: Sequence[Group], levels: int = 1) -> dict[str, float]:
    """A training step's recurrence as metrics, which the trainer logs for step-level estimators.

    ``credit/step_group_recurrence`` is the share of steps whose level-1 (anchor state)
    group has another member; ``credit/step_group_recurrence_k{k}`` the same at level k for
    k = 2 … ``levels`` (HGPO with context K: ``levels=K + 1``);
    ``credit/state_recurrence_across`` and ``credit/state_revisits`` split where the company
    comes from (another rollout; the same rollout, earlier).

    Example:
        >>> from agentgym.types import Group, Message, Step, StepResult, Trajectory
        >>> def rollout(tid, keys):
        ...     steps = tuple(Step(i, Message("assistant", "go"), StepResult((), 0.0),
        ...                        state_key=k) for i, k in enumerate(keys))
        ...     return Trajectory(tid, "task", "g", (), steps, outcome_reward=0.0)
        >>> m = recurrence_metrics([Group("task", (rollout("a", ["s0", "s1"]),
        ...                                        rollout("b", ["s0", "s2"])))])
        >>> m["credit/step_group_recurrence"], m["credit/state_revisits"]
        (0.5, 0.0)
    """
    r = step_group_recurrence(state_keys(groups), levels)
    return {"credit/step_group_recurrence": r.grouped[0],
            **{f"credit/step_group_recurrence_k{k}": r.grouped[k - 1]
               for k in range(2, levels + 1)},
            "credit/state_recurrence_across": r.across,
            "credit/state_revisits": r.revisited}
