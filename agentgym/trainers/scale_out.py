"""Where a run generates, where it updates, and how the weights go from one to the other.

:func:`scale_out` reads the config once and gives the training loop three parts:

- a collector (:mod:`agentgym.trainers.collectors`): embedded, on an engine (vLLM, Ray, a
  second in-process copy), APRIL's pool, and/or ahead of the update (async training);
- an updater (:class:`~agentgym.trainers.update.LocalUpdater`, or every rank's FSDP shard
  under torchrun: :class:`~agentgym.trainers.distributed.FSDPUpdater`);
- a :class:`WeightSync` the loop calls after each update (a version bump when the collector
  samples with the trained weights themselves).

Combinations no part can serve are refused here, before any rollout.
"""

from __future__ import annotations

import copy
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentgym.errors import ConfigError
from agentgym.policies.backends import BackendOptions, build_backend
from agentgym.policies.base import TrainablePolicy
from agentgym.policies.hf import TransformersPolicy
from agentgym.trainers.checkpoint import TrainState, trainable_state
from agentgym.trainers.collectors import (
    AheadCollector,
    AprilCollector,
    Collector,
    EmbeddedCollector,
    EngineCollector,
)
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.update import Learner, LocalUpdater, UpdateConfig
from agentgym.trainers.vllm_generation import ENGINES

if TYPE_CHECKING:
    from agentgym.engines.ray_engine import RayEngine
    from agentgym.trainers.distributed import FSDPUpdater


class WeightSync:
    """Pushes the trained weights to the generator after each update: a new policy version.

    Args:
        policy: The in-process generation backend.
        learner: The trained model (unsharded, or rank 0's view of the FSDP one).
        engine: The Ray engine whose workers generate, or None.
        distributed: The FSDP updater, whose full weights are gathered, or None.
        version: The policy version the run starts at.
        merge_adapters: Sync LoRA runs' weights with the adapters merged in
            (``model.vllm_lora_sync``).
        embedded: The embedded loop: the backend samples with the trained weights
            themselves, so a sync is a version bump (and logs no ``sync_s``).
    """

    def __init__(self, policy: TrainablePolicy, learner: Learner, engine: RayEngine | None = None,
                 distributed: FSDPUpdater | None = None, version: int = 0,
                 merge_adapters: bool = False, embedded: bool = False) -> None:
        self.policy, self.learner, self.engine = policy, learner, engine
        self.distributed, self.version, self.merge = distributed, version, merge_adapters
        self.embedded = embedded
        self._started = False

    async def start(self) -> None:
        """Before the first rollout.

        A generator in another process (Ray workers, a vLLM engine) is sent the trainer's
        weights, which a resumed run has changed since the generator loaded them. Only the
        first call does anything.
        """
        if self._started:
            return
        self._started = True
        if self.engine is not None or getattr(self.policy, "model", None) is None:
            await self._push()

    async def __call__(self) -> dict[str, float]:
        """After an update: the next version, pushed (``sync_s``: its wall time)."""
        start = time.perf_counter()
        self.version += 1
        if self.embedded:  # the backend reads the trained weights: a version bump
            await self.policy.update_weights([])
            return {}
        await self._push()
        return {"sync_s": time.perf_counter() - start}

    async def _push(self) -> None:
        state = self.distributed.full_state() if self.distributed is not None \
            else trainable_state(self.learner.model)
        if self.merge:  # a generator that runs adapters slowly: merged weights
            from agentgym.trainers.lora import merged_state

            state = merged_state(self.learner.model)
        if self.engine is not None:
            await self.engine.sync_weights(state, self.version)
        # The in-process policy: a generation copy to fill, or (Ray, one process) the
        # trained model itself, whose version is the one logged.
        fill = (self.engine is None or self.distributed is not None) \
            and getattr(self.policy, "model", None) is not self.learner.model
        await self.policy.update_weights(state if fill else [], version=self.version)


@dataclass(frozen=True)
class ScaleOut:
    """The parts :func:`scale_out` gives the loop."""

    collector: Collector
    """Where each step's rollouts come from."""
    updater: LocalUpdater | FSDPUpdater
    """Where the policy update runs."""
    sync: WeightSync
    """Called after each update."""
    learner: Learner
    """The trained model and optimizer (FSDP-sharded under torchrun)."""


def scale_out(config: TrainConfig, state: TrainState, learner: Learner,
              policy: TransformersPolicy) -> ScaleOut:
    """The collector, updater and weight sync a config asks for.

    Sets up a separate generation copy of the weights when rollouts must not read the
    weights being trained (async overlap or sharded training), a vLLM engine, the Ray
    engine, and the FSDP-sharded learner.

    Args:
        config: The run's config.
        state: Where the run starts (its step is the first policy version).
        learner: The freshly built (unsharded) learner.
        policy: The generation backend sharing the learner's weights.

    Raises:
        ConfigError: A combination only known here (torchrun) that a part cannot serve.
    """
    from agentgym.trainers import distributed, lora

    cfg = config
    multi = distributed.world_size() > 1
    if multi and cfg.rollout.context == "summarize":
        raise ConfigError("rollout.context=summarize (SUPO) takes its summary turns in one "
                          "process: launch without torchrun or use rollout.context=window")
    if multi and (cfg.rollout.april.enabled or cfg.async_training.vcpo.enabled):
        raise ConfigError("rollout.april and async_training.vcpo run in one process; "
                          "launch without torchrun or turn them off")
    if multi and state.step > 0:
        raise ConfigError("--resume is not supported for FSDP runs (the optimizer state is "
                          "sharded); start a new run from the last checkpoint's weights "
                          "with model.path=<checkpoint folder>")
    update_config = UpdateConfig.of(cfg)
    embedded = cfg.engine == "local" and not cfg.async_training.enabled and not multi \
        and not cfg.rollout.april.enabled and cfg.model.generation == "transformers"
    if embedded:
        return ScaleOut(EmbeddedCollector(cfg, policy), LocalUpdater(learner, update_config),
                        WeightSync(policy, learner, version=state.step, embedded=True), learner)
    lora.check_supported(cfg)  # LoRA elsewhere: adapters only are synced (trainers/lora.py)
    leader = distributed.rank() == 0
    engine = _ray_engine(cfg) if cfg.engine == "ray" and leader else None
    generator: TrainablePolicy = policy
    if leader and cfg.engine == "local" and cfg.model.generation in ENGINES:
        from agentgym.trainers.vllm_generation import engine_policy

        generator = engine_policy(cfg)  # rollouts on the engine; weights synced after updates
    elif leader and (multi or (cfg.async_training.enabled and cfg.engine == "local")):
        # Rollouts (and, sharded, checkpoints) read their own copy of the weights: the
        # trained ones change under them in a background update, or are sharded.
        generator = TransformersPolicy(copy.deepcopy(learner.model), policy.tokenizer,
                                       max_batch_size=cfg.model.max_batch_size, seed=cfg.seed)
    generator.policy_version = state.step
    updater: LocalUpdater | FSDPUpdater
    if multi:
        updater = distributed.FSDPUpdater.shard(learner.model, learner.reference,
                                                learner.pad_token_id, cfg)
        learner = updater.learner
    else:
        updater = LocalUpdater(learner, update_config, split_threads=(
            cfg.async_training.enabled and engine is None and learner.device.type == "cpu"))
    merge = False
    if cfg.model.generation in ENGINES and cfg.model.lora.enabled:
        from agentgym.trainers.vllm_generation import syncs_merged

        merge = syncs_merged(cfg)
    sync = WeightSync(generator, learner, engine,
                      updater if isinstance(updater, distributed.FSDPUpdater) else None,
                      version=state.step, merge_adapters=merge)

    def version() -> int:
        return sync.version

    inner: EngineCollector
    if cfg.rollout.april.enabled:
        from agentgym.engines.april import PartialRollouts

        inner = AprilCollector(cfg, generator, PartialRollouts(
            cfg.rollout.april, first_seed=state.next_seed), version)
    else:
        inner = EngineCollector(cfg, generator, engine, version=(
            version if cfg.async_training.enabled else None),
            max_staleness=cfg.async_training.max_staleness)
    collector: Collector = AheadCollector(inner, cfg) if cfg.async_training.enabled else inner
    return ScaleOut(collector, updater, sync, learner)


def _ray_engine(cfg: TrainConfig) -> RayEngine:
    from agentgym.engines.ray_engine import RayEngine
    from agentgym.trainers import lora

    device = "cuda" if cfg.ray.generation_gpus > 0 else cfg.model.device
    backend = {"transformers": "hf", "vllm": "vllm"}[cfg.ray.generation_backend]
    options = BackendOptions(device=device, dtype=cfg.model.dtype, seed=cfg.seed,
                             max_batch_size=cfg.model.max_batch_size)
    factory: Callable[[], Any] = functools.partial(
        build_backend, f"{backend}:{cfg.model.path}", options=options)
    if cfg.model.lora.enabled:  # workers carry adapters named as the trainer's
        factory = functools.partial(lora.lora_policy, cfg.model.path, cfg.model.lora, options)
    return RayEngine(cfg.ray, generation=factory)
