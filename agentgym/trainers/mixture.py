"""Several envs in one training run: a weighted mix (the config's ``envs`` list).

Each step's ``tasks_per_step`` tasks are shared out by weight (largest remainder):
entry e gets ⌊n·w_e/W⌋ tasks, and the leftover ones go to the largest remainders, ties
broken in an order that rotates with the block, so that over steps no entry is favoured.
Task k of the run (the training seeds are the run's task indices) is seed
``first_seed + k`` of the env it went to, so an env never sees a seed twice and the split
depends only on k: runs and resumed runs draw the same tasks.

Every entry collects with its own env kwargs, turn limit, context, token limits and
reward settings (G-RA / D-RA rewriting as ``agentgym/trainers/rewards.py`` does it, then a scale).
A group is the rollouts of one task of one entry (``group_id`` is ``<label>:<seed>``), so
groups never mix envs, and the estimator normalises within each env's groups. Metrics
come per entry as ``env/<label>/<metric>``, held-out evaluation too
(``env/<label>/eval/success_rate``); the plain metrics are over all envs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from agentgym.errors import ConfigError
from agentgym.trainers.metrics import rollout_metrics
from agentgym.trainers.rewards import RewardComponent, preset_components, rescore_groups
from agentgym.types import Group, Trajectory

if TYPE_CHECKING:
    from agentgym.trainers.config import CollectionConfig, EnvMixEntry, TrainConfig

_SEP = ":"
"""Separates an entry's label from the seed in its group ids (as ``run_groups`` does)."""


def check_mix(config: TrainConfig, estimator_needs: Sequence[str] = ()) -> None:
    """Refuse a mix the trainer cannot run as written.

    Raises:
        ConfigError: ``env`` is set too; two entries share a label; an entry changes the
            context of an estimator that reads one history length; rewards are rewritten
            both per entry and for every env, or with unknown ``reward_options``; partial
            rollouts (``rollout.april``) or SUPO are on.
    """
    from agentgym.trainers.config import EnvConfig

    if config.env != EnvConfig():
        raise ConfigError("set either env (one env) or envs (a weighted mix), not both; move "
                          "the env section into an envs entry")
    labels = [e.label for e in config.envs]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise ConfigError(f"envs entries {twice} share a label; give each entry of the same "
                          "env id its own name (envs[i].name)")
    if "history_length" in estimator_needs:
        own = [e.label for e in config.envs if e.context is not None
               or e.history_length is not None]
        if own:
            raise ConfigError(f"envs entries {own} set their own context or history_length, "
                              f"but {config.algorithm.estimator} groups by one history length "
                              "K; set rollout.context/history_length for every env instead")
    own = [e.label for e in config.envs if e.reward_accumulation is not None]
    if own and config.algorithm.reward_accumulation != "none":
        raise ConfigError(f"envs entries {own} set their own reward_accumulation and "
                          f"algorithm.reward_accumulation={config.algorithm.reward_accumulation} "
                          "applies to every env; set it in one place")
    for entry in config.envs:
        reward_components(entry)  # unknown reward_options fail now, naming the entry
    if config.rollout.april.enabled:
        raise ConfigError("rollout.april (partial rollouts) does not run with several envs yet; "
                          "set rollout.april.enabled=false or train one env")
    if config.rollout.context == "summarize":
        raise ConfigError("rollout.context=summarize (SUPO) does not run with several envs; "
                          "use full or window contexts in an envs mix")


def split_seeds(entries: Sequence[EnvMixEntry], tasks: Sequence[int]
                ) -> list[tuple[EnvMixEntry, list[int]]]:
    """Share the run's task indices ``tasks`` out to the entries by weight.

    Returns:
        ``(entry, env seeds)`` for every entry, seeds ``first_seed + k`` of the indices k it
        got; an entry may get none in a small block.

    Example:
        >>> from agentgym.trainers.config import EnvMixEntry
        >>> a, b = EnvMixEntry(name="a", weight=3), EnvMixEntry(name="b")
        >>> [(e.label, s) for e, s in split_seeds([a, b], range(4))]
        [('a', [0, 1, 2]), ('b', [3])]
    """
    n, total = len(tasks), sum(e.weight for e in entries)
    quotas = [n * e.weight / total for e in entries]
    counts = [int(q) for q in quotas]
    turn = (tasks[0] // max(n, 1)) if n else 0  # rotates the tie order block by block
    order = sorted(range(len(entries)),
                   key=lambda i: (-(quotas[i] - counts[i]), (i - turn) % len(entries)))
    for i in order[:n - sum(counts)]:
        counts[i] += 1
    out, start = [], 0
    for entry, count in zip(entries, counts, strict=True):
        out.append((entry, [entry.first_seed + k for k in tasks[start:start + count]]))
        start += count
    return out


def entry_rollout(entry: EnvMixEntry, rollout: CollectionConfig) -> CollectionConfig:
    """The run's collection settings with the entry's own context and token limits."""
    changes = {name: getattr(entry, name) for name in
               ("context", "history_length", "max_tokens", "max_prompt_tokens")
               if getattr(entry, name) is not None}
    return replace(rollout, **changes) if changes else rollout


def reward_components(entry: EnvMixEntry) -> list[RewardComponent] | None:
    """The G-RA / D-RA components of an entry with its own ``reward_accumulation``, or None.

    Raises:
        ConfigError: An unknown ``reward_preset``, or ``reward_options`` it does not take.
    """
    if entry.reward_accumulation is None:
        return None
    return list(preset_components(entry.reward_preset, entry.reward_options,
                                  where=f"envs entry {entry.label!r}: reward_options"))


def label_trajectories(entry: EnvMixEntry, trajs: Sequence[Trajectory]) -> list[Trajectory]:
    """The entry's trajectories with ``<label>:<seed>`` group ids and its reward settings.

    Rewards are rewritten by the entry's ``reward_accumulation`` (if any), then multiplied
    by ``reward_scale``. Error trajectories keep ``outcome_reward=None``; a step without a
    reward keeps None.
    """
    components = reward_components(entry)
    if components is not None and entry.reward_accumulation is not None:
        groups = rescore_groups(Group.from_trajectories(trajs), components,
                                entry.reward_accumulation)
        trajs = [t for g in groups for t in g.trajectories]
    scale, out = entry.reward_scale, []
    for t in trajs:
        seed = t.group_id.rpartition(_SEP)[2]
        t = replace(t, group_id=f"{entry.label}{_SEP}{seed}")
        if scale != 1.0:
            steps = tuple(s if s.result.reward is None else
                          replace(s, result=replace(s.result, reward=s.result.reward * scale))
                          for s in t.steps)
            reward = None if t.outcome_reward is None else t.outcome_reward * scale
            t = replace(t, steps=steps, outcome_reward=reward)
        out.append(t)
    return out


def label_of(traj: Trajectory) -> str:
    """The entry label of a trajectory collected by the mix (its group id before the seed)."""
    return traj.group_id.rpartition(_SEP)[0]


def per_env_metrics(config: TrainConfig, trajs: Sequence[Trajectory]) -> dict[str, float]:
    """``env/<label>/<metric>`` of :func:`rollout_metrics` for every entry of the mix."""
    out: dict[str, float] = {}
    for entry in config.envs:
        mine = [t for t in trajs if label_of(t) == entry.label]
        if not mine:
            continue
        metrics = rollout_metrics(mine, Group.from_trajectories(mine))
        out.update({f"env/{entry.label}/{k}": v for k, v in metrics.items()})
        out[f"env/{entry.label}/groups"] = float(len({t.group_id for t in mine}))
    return out
