"""Settings of the Ray rollout engine.

A plain frozen dataclass (no Ray import), so a training config can nest it as its ``ray``
section; the trainer's own scale-out settings (``async_training``, ``distributed``) live in
:mod:`agentgym.trainers.config`. ``docs/scale-out.md`` explains how they fit together.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from agentgym.errors import ConfigError


@dataclass(frozen=True)
class RayConfig:
    """Ray actors for env execution and generation (used when ``engine: ray``)."""

    address: str | None = None
    """Ray cluster to join (``auto``, ``ray://host:10001``); None starts a local cluster."""
    num_cpus: int | None = None
    """CPUs a local cluster advertises (None: Ray counts them); ignored when joining."""
    env_workers: int = 2
    """Env worker actors; each runs many episodes concurrently (asyncio inside the actor)."""
    env_worker_cpus: float = 1.0
    """CPUs reserved per env worker (fractions allowed; envs go on CPU nodes)."""
    env_resources: dict[str, float] = field(default_factory=dict)
    """Custom Ray resources an env worker needs, e.g. ``{env_node: 0.01}`` to pin envs to
    nodes started with ``--resources '{"env_node": 1}'``."""
    generation_workers: int = 1
    """Generation actors serving the model (LM agents only; model-free agents need none)."""
    generation_gpus: float = 0.0
    """GPUs per generation worker (1 on GPU nodes; 0 runs it on CPU)."""
    generation_cpus: float = 1.0
    """CPUs per generation worker."""
    generation_backend: Literal["transformers", "vllm"] = "transformers"
    """Backend inside each generation worker (vLLM: a GPU, or vLLM's CPU build)."""
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"
    """Ray placement-group strategy for all workers' bundles."""
    episodes_per_call: int = 8
    """Episodes sent to an env worker per call (smaller: finer load balance and smaller loss
    when a worker dies; larger: less call overhead)."""
    max_worker_failures: int = 3
    """Worker deaths tolerated in a row (each replaced, its episodes marked error) before the
    run stops with an error."""
    startup_timeout: float = 120.0
    """Seconds to wait for the placement group (cluster resources) before giving up."""

    def __post_init__(self) -> None:
        for name in ("env_workers", "generation_workers", "episodes_per_call"):
            if getattr(self, name) < 1:
                raise ConfigError(f"ray.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("env_worker_cpus", "generation_gpus", "generation_cpus"):
            if getattr(self, name) < 0:
                raise ConfigError(f"ray.{name} must be >= 0, got {getattr(self, name)}")
        if self.max_worker_failures < 0:
            raise ConfigError(f"ray.max_worker_failures must be >= 0, got "
                              f"{self.max_worker_failures}")
