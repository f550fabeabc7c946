"""Scale-out driver of the training loop: Ray rollouts, async overlap, multi-GPU updates.

:func:`make_driver` returns None for the embedded loop (``engine: local``, no overlap, one
process); otherwise :mod:`agentgym.trainers.loop` hands four things to the driver:
collecting a step's rollouts, the policy update, the weight sync, and ``run_groups`` itself.

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
"""

from __future__ import annotations

import asyncio
import copy
import functools
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from agentgym.engines.versioned import VersionedAgent
from agentgym.errors import ConfigError
from agentgym.rollout import RolloutConfig, run_groups
from agentgym.trainers.batching import Sample
from agentgym.types import Trajectory


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


def proximal_logprobs(t: Any, samples: Sequence[Sample]) -> list[Sample]:
    """The samples with completion log-probs of the current weights (π_prox).

    Batched by token budget and scored on completion positions only (the model is asked for
    no logits over the prompt).
    """
    import torch

    from agentgym.trainers.batching import micro_batches
    from agentgym.trainers.loss import token_logprobs

    out = list(samples)
    pad, budget = t.policy.tokenizer.pad_token_id, t.config.optim.max_tokens_per_micro_batch
    with torch.no_grad():
        for mb in micro_batches(list(samples), budget, pad):
            mb = mb.to(t.policy.device)
            logp, _ = token_logprobs(t.model, mb.input_ids, mb.attention_mask,
                                     t.config.rollout.temperature, mask=mb.loss_mask)
            for row, i in enumerate(mb.sample_indices):
                s = samples[i]  # completion token k is the target of column P + k - 1
                out[i] = replace(s, completion_logprobs=tuple(
                    logp[row, s.prompt_len - 1:s.length - 1].float().tolist()))
    return out


@dataclass
class RolloutDriver:
    """What the training loop delegates when it scales out (see the module docstring)."""

    config: Any
    engine: Any = None
    """The :class:`~agentgym.engines.ray_engine.RayEngine`, or None for in-process rollouts."""
    version: int = 0
    """Policy version of the generation weights (weight syncs so far)."""
    distributed: Any = None
    """The :class:`~agentgym.trainers.distributed.FSDPUpdater` when world size > 1."""
    _pending: dict[int, asyncio.Task[list[Trajectory]]] = field(default_factory=dict)
    _ages: dict[tuple[str, int], int] = field(default_factory=dict)
    _metrics: dict[str, float] = field(default_factory=dict)
    _synced: bool = False

    @property
    def overlap(self) -> bool:
        """Whether generation runs ahead of the update."""
        return self.config.async_training.enabled

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

    async def collect(self, t: Any) -> list[Trajectory]:
        """The rollouts of step ``t.state.step``, launching the next N steps' in the background."""
        from agentgym.trainers import loop

        cfg, step = t.config, t.state.step
        if self.engine is not None and not self._synced:
            await self.sync(t, bump=False)  # the workers start from the trainer's weights

        def launch(k: int) -> asyncio.Task[list[Trajectory]]:
            first = t.state.next_seed + (k - step) * cfg.rollout.tasks_per_step
            seeds = range(first, first + cfg.rollout.tasks_per_step)
            # Same sampling seed as the embedded loop gives step k.
            return asyncio.ensure_future(loop._collect(
                t, seeds, cfg.rollout.group_size, cfg.rollout.temperature,
                seed=cfg.seed * 100_003 + k))

        ahead = cfg.async_training.max_staleness if self.overlap else 0
        for k in range(step, min(step + ahead, cfg.steps - 1) + 1):
            if k not in self._pending:
                self._pending[k] = launch(k)
        trajs = await self._pending.pop(step)
        if not self.overlap:
            return trajs
        trajs, self._ages, self._metrics = drop_stale(trajs, self.version,
                                                      cfg.async_training.max_staleness)
        return trajs

    async def update(self, t: Any, samples: list[Sample]) -> dict[str, float]:
        """The policy update (in a worker thread when overlapping, so generation goes on)."""
        work = functools.partial(self._update, t, samples)
        if not self.overlap:
            return {**self._metrics, **work()}
        if self.engine is None and t.policy.device.type == "cpu":
            _split_cpu_threads()
        return {**self._metrics, **await asyncio.to_thread(work)}

    def _update(self, t: Any, samples: list[Sample]) -> dict[str, float]:
        from agentgym.trainers import loop

        extra: dict[str, float] = {}
        if self.overlap:
            samples, extra = self._correct(t, samples)
        if self.distributed is not None:
            return {**extra, **self.distributed.update(t, samples)}
        return {**extra, **loop._update(t, samples)}

    def _correct(self, t: Any, samples: list[Sample]) -> tuple[list[Sample], dict[str, float]]:

        ac = self.config.async_training
        stale = [i for i, s in enumerate(samples)
                 if self._ages.get((s.traj_id, s.step_index), 0) > 0]
        metrics = {"async/stale_samples": float(len(stale))}
        if not stale or ac.correction == "none":
            return samples, metrics
        old = [samples[i] for i in stale]
        proximal = self.distributed.recompute(t, old) if self.distributed is not None \
            else proximal_logprobs(t, old)
        fixed, stats = importance_correct(old, proximal, ac.max_importance_weight)
        out = list(samples)
        for i, s in zip(stale, fixed, strict=True):
            out[i] = s
        return out, {**metrics, **stats}

    async def sync(self, t: Any, bump: bool = True) -> None:
        """Push the trained weights to the generation copy (a new policy version)."""
        from agentgym.trainers.checkpoint import trainable_state

        if bump:
            self.version += 1
        state = self.distributed.full_state() if self.distributed is not None \
            else trainable_state(t.model)
        if self.engine is not None:
            await self.engine.sync_weights(state, self.version)
        # The in-process policy: a generation copy to fill, or (Ray, one process) the
        # trained model itself, whose version is the one logged.
        copy_weights = self.engine is None or self.distributed is not None
        t.policy.update_weights(state if copy_weights else [], version=self.version)
        self._synced = True

    async def aclose(self) -> None:
        """Stop background collection and the workers."""
        for task in self._pending.values():
            task.cancel()
        await asyncio.gather(*self._pending.values(), return_exceptions=True)
        self._pending.clear()
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


def make_driver(t: Any) -> RolloutDriver | None:
    """The driver a config asks for, or None for the embedded loop.

    Sets up a separate generation copy of the weights when rollouts must not read the
    weights being trained (async overlap or sharded training), and the Ray engine.
    """
    from agentgym.trainers import distributed

    cfg = t.config
    multi = distributed.world_size() > 1
    if cfg.engine == "local" and not cfg.async_training.enabled and not multi:
        return None
    if cfg.model.lora.enabled and (cfg.engine == "ray" or cfg.async_training.enabled or multi):
        raise ConfigError("model.lora.enabled is not supported with engine=ray, async training "
                          "or multi-GPU updates yet; train every weight (model.lora.enabled="
                          "false) or use the embedded loop")
    driver = RolloutDriver(cfg, version=t.state.step)
    leader = distributed.rank() == 0
    if cfg.engine == "ray" and leader:
        from agentgym.engines.ray_engine import RayEngine

        device = "cuda" if cfg.ray.generation_gpus > 0 else cfg.model.device
        factory = functools.partial(_generation_policy, cfg.ray.generation_backend,
                                    cfg.model.path, device, cfg.model.dtype,
                                    cfg.model.max_batch_size, cfg.seed)
        driver.engine = RayEngine(cfg.ray, generation=factory)
    if leader and (multi or (cfg.async_training.enabled and cfg.engine == "local")):
        from agentgym.policies.hf import TransformersPolicy

        # Rollouts (and, sharded, checkpoints) read their own copy of the weights: the
        # trained ones change under them in a background update, or are sharded.
        t.policy = TransformersPolicy(copy.deepcopy(t.model), t.policy.tokenizer,
                                      max_batch_size=cfg.model.max_batch_size, seed=cfg.seed)
    t.policy.policy_version = driver.version
    if multi:
        driver.distributed = distributed.FSDPUpdater.wrap(t)
    return driver


def _generation_policy(backend: str, path: str, device: str, dtype: str, max_batch_size: int,
                       seed: int) -> Any:
    """Built inside a Ray generation worker."""
    if backend == "vllm":
        from agentgym.policies.models import embedded_model_dir
        from agentgym.policies.vllm import VLLMPolicy

        folder = str(embedded_model_dir()) if path in ("smollm2", "embedded") else path
        return VLLMPolicy(folder, dtype=dtype)
    from agentgym.policies.hf import TransformersPolicy

    return TransformersPolicy.load(path, device=device, dtype=dtype,
                                   max_batch_size=max_batch_size, seed=seed)
