"""The off-policy correction: stale steps importance-weighted, VCPO's learning-rate scale.

On when the collector is off-policy (``async_training.enabled``: rollouts collected ahead
of the update; ``rollout.april.enabled``: episodes carried across steps). Just before each
update (in the update's thread, so rollouts collected ahead go on), a step sampled s ≥ 1
versions ago gets decoupled PPO's truncated weight toward the current policy
(:mod:`.importance`; ``async_training.correction``, ``max_importance_weight``); with
``async_training.vcpo`` (:mod:`agentgym.trainers.vcpo`) the update's learning rate is scaled
by the effective sample size of those weights and, with its baseline, the advantages become
R_i − b*. Steps beyond the staleness bound never get here: the collector drops them.

Metrics: ``async/stale_samples``, ``async/is_weight_mean|std|min|max``,
``async/is_truncated_frac``, ``vcpo/*``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from agentgym.trainers.hooks import Hooks, StepContext
from agentgym.trainers.methods import MethodContext, register_method
from agentgym.types import Group

if TYPE_CHECKING:
    from agentgym.trainers.batching import Sample
    from agentgym.trainers.config import TrainConfig
    from agentgym.trainers.config_run import AsyncConfig


class OffPolicyCorrection:
    """The before-update hook: importance weights (and VCPO) on the step's stale samples."""

    def __init__(self, options: AsyncConfig, temperature: float,
                 max_tokens_per_micro_batch: int) -> None:
        self.options, self.temperature = options, temperature
        self.max_tokens = max_tokens_per_micro_batch

    def before_update(self, ctx: StepContext, samples: list[Sample], groups: Sequence[Group],
                      lr_scale: float, metrics: dict[str, float]
                      ) -> tuple[list[Sample], float]:
        """Samples with stale steps corrected toward the current policy; VCPO's LR factor."""
        from agentgym.trainers.collectors import step_staleness
        from agentgym.trainers.methods.offpolicy.importance import importance_correct
        from agentgym.trainers.vcpo import apply_vcpo

        ac, updater = self.options, ctx.updater
        assert updater is not None, "the loop passes its updater to before-update hooks"
        ages = {(t.id, s.index): age for t in ctx.trajectories
                for s, age in zip(t.steps, step_staleness(t, ctx.version), strict=True)}
        stale = [i for i, s in enumerate(samples) if ages.get((s.traj_id, s.step_index), 0) > 0]
        metrics["async/stale_samples"] = float(len(stale))
        if (not stale and not ac.vcpo.enabled) or ac.correction == "none":
            return samples, lr_scale
        old = [samples[i] for i in stale]
        proximal = updater.proximal(old) if old else []
        if ac.vcpo.enabled:
            rewards = {t.id: t.outcome_reward for g in groups for t in g.trajectories
                       if t.outcome_reward is not None}  # R_i, for VCPO's baseline
            samples, scale, stats = apply_vcpo(
                updater.learner, samples, dict(zip(stale, proximal, strict=True)), rewards,
                ac.vcpo, max_weight=ac.max_importance_weight, temperature=self.temperature,
                max_tokens=self.max_tokens)
            metrics.update(stats)
            lr_scale *= scale
            old = [samples[i] for i in stale]  # the advantages VCPO set
            proximal = [replace(p, advantage=s.advantage)
                        for p, s in zip(proximal, old, strict=True)]
        if not old:
            return samples, lr_scale
        fixed, stats = importance_correct(old, proximal, ac.max_importance_weight)
        metrics.update(stats)
        out = list(samples)
        for i, s in zip(stale, fixed, strict=True):
            out[i] = s
        return out, lr_scale


def active(config: TrainConfig) -> bool:
    """The collector is off-policy."""
    return config.async_training.enabled or config.rollout.april.enabled


def build(ctx: MethodContext) -> Hooks | None:
    """The correction, when the run's collector is off-policy."""
    cfg = ctx.config
    if not active(cfg):
        return None
    return Hooks(before_update=(OffPolicyCorrection(
        cfg.async_training, cfg.rollout.temperature, cfg.optim.max_tokens_per_micro_batch),))


register_method("offpolicy", build=build, order=90, active=active,
                summary="importance weights for stale steps, VCPO's learning-rate scale "
                        "(async_training, rollout.april)")
