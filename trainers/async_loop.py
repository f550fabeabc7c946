"""Scale-out driver of the training loop: Ray rollouts, async overlap, multi-GPU updates.

:func:`make_driver` returns None for the embedded loop (``engine: local``, no overlap, one
process); otherwise :mod:`agentgym.trainers.loop` hands three things to the driver:
collecting a step's rollouts, the policy update (:func:`agentgym.trainers.update.ppo_update`,
here or on every FSDP rank) and the weight sync (the backend's ``update_weights``).

**Async training** (``async_training.enabled``; one-step-off when ``max_staleness`` N = 1).
Generation runs on its own copy of the weights (a second in-process model, the Ray
generation workers, or vLLM), so it can go on while the trainer updates in a worker thread.
The rollouts of steps k+1 … k+N are collected while step k trains; each step records the
policy version that sampled it (``StepTokens.policy_version``), and an episode that runs
across a weight sync simply resumes with the new weights (a partial rollout). At update
time, with current version v, a step sampled by version u has staleness s = v − u:

- a trajectory with a step of s > N is dropped (it cannot happen with the default schedule
  unless a step waited on a slow episode; counted as ``async/dropped_stale``);
- a step with 1 ≤ s ≤ N is importance-corrected toward the current ("proximal") policy,
  decoupled PPO (Fu et al. 2025, AReaL, arXiv:2505.24298; Hilton et al. 2021):

      L = −E[ w · min(r·A, clip(r, 1−ε_low, 1+ε_high)·A) ],
      r = π_θ / π_prox,   w = min(π_prox / μ, w_max)

  where μ is the behaviour policy that sampled the step. Deviation: w is one weight per
  step, the geometric mean of the token ratios, exp(mean_t(log π_prox − log μ)), truncated
  at ``max_importance_weight`` (the token batches carry one advantage per step, so w is
  folded into the step's advantage). Fresh steps (s = 0) have π_prox = μ and w = 1.

Metrics: ``async/staleness_mean``, ``async/staleness_max``, ``async/dropped_stale``,
``async/stale_samples``, ``async/is_weight_mean|std|min|max``, ``async/is_truncated_frac``.

**Partial rollouts** (``rollout.april``, :mod:`agentgym.engines.april`): a step's rollouts
come from a pool that ends its round once ``tasks_per_step`` groups finished and carries the
unfinished episodes into the next round. Their older turns are stale exactly like overlapped
ones: the same bound (``rollout.april.max_staleness``) and correction apply, with or without
overlap. **VCPO** (``async_training.vcpo``, :mod:`agentgym.trainers.vcpo`) then scales the
update's learning rate by the effective sample size of the importance weights and, with
its baseline, sets the advantages to R_i − b*.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from agentgym.engines.april import PartialRollouts
from agentgym.engines.versioned import VersionedAgent
from agentgym.errors import ConfigError
from agentgym.policies.backends import BackendOptions, build_backend
from agentgym.policies.hf import TransformersPolicy
from agentgym.rollout import RolloutConfig, run_groups
from agentgym.trainers.batching import Sample
from agentgym.trainers.checkpoint import TrainState, trainable_state
from agentgym.trainers.collect import collect
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.update import ONE_PROCESS, Learner, UpdateConfig, ppo_update
from agentgym.trainers.vcpo import apply_vcpo
from agentgym.types import Group, Trajectory

if TYPE_CHECKING:
    from agentgym.engines.ray_engine import RayEngine
    from agentgym.trainers.distributed import FSDPUpdater


def step_staleness(traj: Trajectory, version: int) -> list[int]:
    """Staleness ``version - policy_version`` of each step (0 where the version is unknown)."""
    return [version - s.tokens.policy_version
            if s.tokens is not None and s.tokens.policy_version is not None else 0
            for s in traj.steps]


def drop_stale(trajs: Sequence[Trajectory], version: int, max_staleness: int
               ) -> tuple[list[Trajectory], dict[tuple[str, int], int], dict[str, float]]:
    """Drop trajectories with a step older than ``max_staleness`` versions.

    Returns:
        The kept trajectories (error ones untouched), the staleness of every kept step keyed
        by ``(trajectory id, step index)``, and the staleness metrics.
    """
    kept, by_step, seen, dropped = [], {}, [], 0
    for traj in trajs:
        ages = step_staleness(traj, version)
        if traj.scorable and ages and max(ages) > max_staleness:
            dropped += 1
            continue
        kept.append(traj)
        for step, age in zip(traj.steps, ages, strict=True):
            by_step[(traj.id, step.index)] = age
        seen += ages
    return kept, by_step, {"async/staleness_mean": float(np.mean(seen)) if seen else 0.0,
                           "async/staleness_max": float(max(seen, default=0)),
                           "async/dropped_stale": float(dropped)}


def importance_correct(samples: Sequence[Sample], proximal: Sequence[Sample],
                       max_weight: float) -> tuple[list[Sample], dict[str, float]]:
    """Decoupled-PPO step weights (module docstring) for stale samples.

    Args:
        samples: The stale samples, with behaviour log-probs μ.
        proximal: The same samples with log-probs of the current weights (π_prox).
        max_weight: Truncation cap of w.

    Returns:
        Samples whose old log-probs are π_prox and whose advantage is scaled by w, and the
        weight statistics.
    """
    out, weights, truncated = [], [], 0
    for s, p in zip(samples, proximal, strict=True):
        log_w = float(np.mean(np.subtract(p.completion_logprobs, s.completion_logprobs)))
        w = math.exp(min(log_w, 50.0))  # (1,) one weight per step; huge ratios only truncate
        truncated += w > max_weight
        w = min(w, max_weight)
        weights.append(w)
        out.append(replace(p, advantage=s.advantage * w))
    w_arr = np.asarray(weights or [1.0])
    return out, {"async/is_weight_mean": float(w_arr.mean()),
                 "async/is_weight_std": float(w_arr.std()),
                 "async/is_weight_min": float(w_arr.min()),
                 "async/is_weight_max": float(w_arr.max()),
                 "async/is_truncated_frac": truncated / max(len(weights), 1)}


@dataclass
class RolloutDriver:
    """Where rollouts come from and where the update runs when the loop scales out.

    The training loop (:mod:`agentgym.trainers.loop`) hands it three things per step:
    collecting the step's rollouts, the update, and the weight sync.
    """

    config: TrainConfig
    """The run's config."""
    policy: TransformersPolicy
    """The in-process generation backend (a copy of the weights, or the trained model
    itself when only the Ray workers generate)."""
    learner: Learner
    """The trained model and optimizer (FSDP-sharded when ``distributed`` is set)."""
    engine: RayEngine | None = None
    """The Ray engine, or None for in-process rollouts."""
    distributed: FSDPUpdater | None = None
    """The multi-GPU updater when world size > 1."""
    version: int = 0
    """Policy version of the generation weights (weight syncs so far)."""
    april: PartialRollouts | None = None
    """The partial-rollout pool (``rollout.april``), or None."""
    merge_adapters: bool = False
    """Sync LoRA runs' weights with the adapters merged in (``model.vllm_lora_sync``)."""
    _pending: dict[int, asyncio.Task[list[Trajectory]]] = field(default_factory=dict)
    _ages: dict[tuple[str, int], int] = field(default_factory=dict)
    _metrics: dict[str, float] = field(default_factory=dict)
    _synced: bool = False
    _round_metrics: list[dict[str, float]] = field(default_factory=list)

    @property
    def overlap(self) -> bool:
        """Whether generation runs ahead of the update."""
        return self.config.async_training.enabled

    @property
    def off_policy(self) -> bool:
        """Whether trained turns may be older than the weights (overlap or carried episodes)."""
        return self.overlap or self.april is not None

    @property
    def max_staleness(self) -> int:
        """The staleness bound: APRIL's when partial rollouts are on (it covers overlap)."""
        cfg = self.config
        return cfg.rollout.april.max_staleness if self.april is not None \
            else cfg.async_training.max_staleness

    async def _april_round(self, make_env: Callable[[], Any], agent: Any,
                           seeds: Sequence[int], config: RolloutConfig, *,
                           env_id: str | None = None) -> list[Trajectory]:
        """A :data:`~agentgym.trainers.collect.Runner` on the pool: ``len(seeds)`` groups."""
        assert self.april is not None
        trajs, metrics = await self.april.round(make_env, VersionedAgent(agent), len(seeds),
                                                config, env_id=env_id)
        self._round_metrics.append(metrics)
        return trajs

    async def run_groups(self, make_env: Callable[[], Any], agent: Any, seeds: Sequence[int],
                         config: RolloutConfig | None = None, *, env_id: str | None = None,
                         on_done: Callable[[Trajectory], None] | None = None
                         ) -> list[Trajectory]:
        """:func:`agentgym.rollout.run_groups` on the configured engine, versions recorded."""
        agent, config = VersionedAgent(agent), config or RolloutConfig()
        if self.engine is None:
            return await run_groups(make_env, agent, seeds, config, env_id=env_id,
                                    on_done=on_done)
        return await self.engine.run_groups(make_env, agent, seeds, config, env_id=env_id,
                                            on_done=on_done)

    async def collect(self, step: int, next_seed: int) -> list[Trajectory]:
        """The rollouts of step ``step``, launching the next N steps' in the background.

        Args:
            step: The training step (0-based).
            next_seed: The first training seed of that step.
        """
        cfg = self.config
        if (self.engine is not None or self.policy.model is None) and not self._synced:
            # Ray workers, or a vLLM engine (its weights live in another process), start
            # from the trainer's weights
            await self.sync(bump=False)

        def launch(k: int) -> asyncio.Task[list[Trajectory]]:
            first = next_seed + (k - step) * cfg.rollout.tasks_per_step
            seeds = range(first, first + cfg.rollout.tasks_per_step)
            # Same sampling seed as the embedded loop gives step k.
            runner = self.run_groups if self.april is None else self._april_round
            return asyncio.ensure_future(collect(
                cfg, self.policy, seeds, cfg.rollout.group_size, cfg.rollout.temperature,
                seed=cfg.seed * 100_003 + k, runner=runner,
                max_turns=cfg.rollout.horizon_schedule.at(k)))

        ahead = cfg.async_training.max_staleness if self.overlap else 0
        for k in range(step, min(step + ahead, cfg.steps - 1) + 1):
            if k not in self._pending:
                self._pending[k] = launch(k)
        trajs = await self._pending.pop(step)
        if not self.off_policy:
            return trajs
        trajs, self._ages, self._metrics = drop_stale(trajs, self.version, self.max_staleness)
        if self._round_metrics:  # rounds finish in step order
            self._metrics.update(self._round_metrics.pop(0))
        return trajs

    async def update(self, samples: list[Sample], step: int,
                     groups: Sequence[Group] = ()) -> dict[str, float]:
        """The policy update (in a worker thread when overlapping, so generation goes on).

        Args:
            samples: The step's samples.
            step: The training step.
            groups: The trained groups (their returns R_i feed VCPO's baseline).
        """
        rewards = {t.id: t.outcome_reward for g in groups for t in g.trajectories
                   if t.outcome_reward is not None}
        work = functools.partial(self._update, samples, step, rewards)
        if not self.overlap:
            return {**self._metrics, **work()}
        if self.engine is None and self.learner.device.type == "cpu":
            _split_cpu_threads()
        return {**self._metrics, **await asyncio.to_thread(work)}

    def _update(self, samples: list[Sample], step: int,
                rewards: dict[str, float]) -> dict[str, float]:
        extra: dict[str, float] = {}
        scale = 1.0
        if self.off_policy:
            samples, scale, extra = self._correct(samples, rewards)
        if self.distributed is not None:
            return {**extra, **self.distributed.update(samples, step)}
        groups = self.learner.optimizer.param_groups
        base = [g["lr"] for g in groups]
        for g in groups:  # VCPO: this update only takes η · scale
            g["lr"] *= scale
        try:
            return {**extra, **ppo_update(self.learner, samples, UpdateConfig.of(self.config),
                                          step=step)}
        finally:
            for g, lr in zip(groups, base, strict=True):
                g["lr"] = lr

    def _correct(self, samples: list[Sample], rewards: dict[str, float]
                 ) -> tuple[list[Sample], float, dict[str, float]]:
        """Importance-corrected samples, VCPO's learning-rate scale and their metrics."""
        ac = self.config.async_training
        stale = [i for i, s in enumerate(samples)
                 if self._ages.get((s.traj_id, s.step_index), 0) > 0]
        metrics = {"async/stale_samples": float(len(stale))}
        if (not stale and not ac.vcpo.enabled) or ac.correction == "none":
            return samples, 1.0, metrics
        old = [samples[i] for i in stale]
        if not old:
            proximal: list[Sample] = []
        elif self.distributed is not None:
            proximal = self.distributed.recompute_all(old)
        else:
            proximal = ONE_PROCESS.recompute(self.learner, old, UpdateConfig.of(self.config))
        scale = 1.0
        if ac.vcpo.enabled:
            samples, scale, stats = apply_vcpo(
                self.learner, samples, dict(zip(stale, proximal, strict=True)), rewards,
                ac.vcpo, max_weight=ac.max_importance_weight,
                temperature=self.config.rollout.temperature,
                max_tokens=self.config.optim.max_tokens_per_micro_batch)
            metrics.update(stats)
            old = [samples[i] for i in stale]  # the advantages VCPO set
            proximal = [replace(p, advantage=s.advantage)
                        for p, s in zip(proximal, old, strict=True)]
        if not old:
            return samples, scale, metrics
        fixed, stats = importance_correct(old, proximal, ac.max_importance_weight)
        out = list(samples)
        for i, s in zip(stale, fixed, strict=True):
            out[i] = s
        return out, scale, {**metrics, **stats}

    async def sync(self, bump: bool = True) -> dict[str, float]:
        """Push the trained weights to the generation copy (a new policy version).

        Returns:
            ``sync_s``: its wall time.
        """
        start = time.perf_counter()
        if bump:
            self.version += 1
        state = self.distributed.full_state() if self.distributed is not None \
            else trainable_state(self.learner.model)
        if self.merge_adapters:  # a generator that runs adapters slowly: merged weights
            from agentgym.trainers.lora import merged_state

            state = merged_state(self.learner.model)
        if self.engine is not None:
            await self.engine.sync_weights(state, self.version)
        # The in-process policy: a generation copy to fill, or (Ray, one process) the
        # trained model itself, whose version is the one logged.
        copy_weights = (self.engine is None or self.distributed is not None) \
            and self.policy.model is not self.learner.model  # APRIL alone shares them
        await self.policy.update_weights(state if copy_weights else [], version=self.version)
        self._synced = True
        return {"sync_s": time.perf_counter() - start}

    async def aclose(self) -> None:
        """Stop background collection and the workers."""
        for task in self._pending.values():
            task.cancel()
        await asyncio.gather(*self._pending.values(), return_exceptions=True)
        self._pending.clear()
        if self.april is not None:
            await self.april.aclose()
        if self.distributed is not None:
            self.distributed.stop()
        if self.engine is not None:
            await self.engine.aclose()


def _split_cpu_threads() -> None:
    """Half the cores each for in-process generation and the update.

    Both run torch ops at once, from two threads; with the default pools (one thread per
    core each) the OpenMP workers oversubscribe the cores and spin against each other,
    which made an overlapped CPU update many times slower than a serial one.
    """
    import torch

    cores = os.cpu_count() or 1
    if torch.get_num_threads() > max(1, cores // 2):
        torch.set_num_threads(max(1, cores // 2))


def make_driver(config: TrainConfig, state: TrainState, learner: Learner,
                policy: TransformersPolicy) -> RolloutDriver | None:
    """The driver a config asks for, or None for the embedded loop.

    Sets up a separate generation copy of the weights when rollouts must not read the
    weights being trained (async overlap or sharded training), the Ray engine, and the
    FSDP-sharded learner.

    Args:
        config: The run's config.
        state: Where the run starts (its step is the first policy version).
        learner: The freshly built (unsharded) learner.
        policy: The generation backend sharing the learner's weights.
    """
    from agentgym.trainers import distributed, lora

    cfg = config
    multi = distributed.world_size() > 1
    if cfg.engine == "local" and not cfg.async_training.enabled and not multi \
            and not cfg.rollout.april.enabled and cfg.model.generation == "transformers":
        return None
    if cfg.rollout.context == "summarize" and (  # summaries: in this process, on-policy
            cfg.engine != "local" or cfg.async_training.enabled or cfg.rollout.april.enabled
            or multi):
        raise ConfigError(
            "rollout.context=summarize (SUPO) collects in this process, on-policy: with "
            "engine=ray, async_training, rollout.april or torchrun its summary turns would "
            "not be taken; turn those off, or use context=window")
    if multi and (cfg.rollout.april.enabled or cfg.async_training.vcpo.enabled):
        raise ConfigError("rollout.april and async_training.vcpo run in one process; "
                          "launch without torchrun or turn them off")
    lora.check_supported(cfg)  # LoRA elsewhere: adapters only are synced (trainers/lora.py)
    if multi and state.step > 0:
        raise ConfigError("--resume is not supported for FSDP runs (the optimizer state is "
                          "sharded); start a new run from the last checkpoint's weights "
                          "with model.path=<checkpoint folder>")
    leader = distributed.rank() == 0
    engine = None
    if cfg.engine == "ray" and leader:
        from agentgym.engines.ray_engine import RayEngine

        device = "cuda" if cfg.ray.generation_gpus > 0 else cfg.model.device
        backend = {"transformers": "hf", "vllm": "vllm"}[cfg.ray.generation_backend]
        options = BackendOptions(device=device, dtype=cfg.model.dtype, seed=cfg.seed,
                                 max_batch_size=cfg.model.max_batch_size)
        factory: Callable[[], Any] = functools.partial(
            build_backend, f"{backend}:{cfg.model.path}", options=options)
        if cfg.model.lora.enabled:  # workers carry adapters named as the trainer's
            factory = functools.partial(lora.lora_policy, cfg.model.path, cfg.model.lora,
                                        options)
        engine = RayEngine(cfg.ray, generation=factory)
    if leader and cfg.engine == "local" and cfg.model.generation == "vllm":
        from agentgym.trainers.vllm_generation import vllm_policy

        policy = vllm_policy(cfg)  # rollouts on the engine; weights synced after updates
    elif leader and (multi or (cfg.async_training.enabled and cfg.engine == "local")):
        # Rollouts (and, sharded, checkpoints) read their own copy of the weights: the
        # trained ones change under them in a background update, or are sharded.
        policy = TransformersPolicy(copy.deepcopy(learner.model), policy.tokenizer,
                                    max_batch_size=cfg.model.max_batch_size, seed=cfg.seed)
    policy.policy_version = state.step
    updater = None
    if multi:
        updater = distributed.FSDPUpdater.shard(learner.model, learner.reference,
                                                learner.pad_token_id, cfg)
        learner = updater.learner
    april = PartialRollouts(cfg.rollout.april, first_seed=state.next_seed) \
        if cfg.rollout.april.enabled else None
    merge = False
    if cfg.model.generation == "vllm" and cfg.model.lora.enabled:
        from agentgym.trainers.vllm_generation import syncs_merged

        merge = syncs_merged(cfg)
    return RolloutDriver(cfg, policy, learner, engine=engine, distributed=updater,
                         version=state.step, april=april, merge_adapters=merge)
