"""Config sections around the loop: suite evaluation, async overlap, logging, FSDP.

Parts of :class:`agentgym.trainers.config.TrainConfig` (``eval``, ``async_training``,
``logging``, ``distributed``); import them from ``agentgym.trainers.config``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from agentgym.errors import ConfigError


@dataclass(frozen=True)
class SuiteEvalConfig:
    """A suite evaluated during training (greedy, one rollout per task).

    It runs when the held-out seeds do: before the first step, every ``eval_every`` steps
    and after the last.
    """

    suite: str | None = None
    """Suite name or YAML file (``agentgym eval --list``); None = no suite evaluation."""
    tasks: int | None = 8
    """At most this many tasks per suite entry (keeps in-training evals cheap)."""
    max_tokens: int | None = None
    """Most tokens per policy call (None = rollout.max_tokens)."""

    def __post_init__(self) -> None:
        if self.tasks is not None and self.tasks < 1:
            raise ConfigError(f"eval.tasks must be >= 1 or null, got {self.tasks}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ConfigError(f"eval.max_tokens must be >= 1 or null (rollout.max_tokens), got "
                              f"{self.max_tokens}")
        if self.suite is not None:  # an unknown suite fails now (did-you-mean), not mid-run
            from agentgym.evaluation.suites import get_suite

            get_suite(self.suite)


@dataclass(frozen=True)
class VCPOConfig:
    """VCPO under async training or partial rollouts (``async_training.vcpo``)."""

    enabled: bool = False
    """Scale the learning rate by ESS and (with ``baseline``) use the OPOB baseline."""
    lr_scaling: Literal["sqrt", "linear", "none"] = "sqrt"
    """η_eff = η · min(1, ρ/ρ_base)^p with p = 1/2 (``sqrt``, for AdamW) or 1; ``none``
    only logs the ESS."""
    base_ess_ratio: float = 1.0
    """ρ_base: an ESS ratio at or above it keeps the full learning rate."""
    baseline: bool = True
    """Replace the estimator's advantages by R_i − b* (needs a trajectory-level estimator)."""

    def __post_init__(self) -> None:
        if not 0 < self.base_ess_ratio <= 1:
            raise ConfigError(f"async_training.vcpo.base_ess_ratio must be in (0, 1], got "
                              f"{self.base_ess_ratio}; 1.0 scales every off-policy update")


@dataclass(frozen=True)
class AsyncConfig:
    """Overlap generation with the policy update (one-step-off / bounded staleness)."""

    enabled: bool = False
    """Collect the next steps' rollouts while the trainer updates (off: strictly on-policy)."""
    max_staleness: int = 1
    """N: rollouts may be collected up to N steps ahead, and a trajectory with a step sampled
    more than N policy versions before the update is dropped (1 = one-step-off)."""
    correction: Literal["importance", "none"] = "importance"
    """How stale steps within the bound are trained: truncated importance weights toward the
    current policy (decoupled PPO), or as if on-policy."""
    max_importance_weight: float = 2.0
    """Truncation cap of the importance weight (stable default; 1 never up-weights)."""
    vcpo: VCPOConfig = field(default_factory=VCPOConfig)
    """VCPO: learning rate scaled by the effective sample size of the importance weights,
    and the off-policy optimal baseline (agentgym/trainers/vcpo.py); also read under
    ``rollout.april``, whose carried turns are off-policy too."""

    def __post_init__(self) -> None:
        if self.max_staleness < 1:
            raise ConfigError(f"async_training.max_staleness must be >= 1, got "
                              f"{self.max_staleness}; disable overlap with "
                              "async_training.enabled=false instead")
        if self.max_importance_weight < 1:
            raise ConfigError(f"async_training.max_importance_weight must be >= 1, got "
                              f"{self.max_importance_weight}")


@dataclass(frozen=True)
class LoggingConfig:
    """Where metrics go besides ``metrics.jsonl`` and TensorBoard (trainers/wandb_log.py)."""

    wandb: bool = False
    """Also log to Weights & Biases: the same metrics, the config, sample trajectories."""
    wandb_project: str = "agentgym"
    """The W&B project."""
    wandb_run_name: str | None = None
    """The W&B run name (None = the run folder's name)."""
    wandb_mode: Literal["online", "offline"] | None = None
    """``offline`` writes the W&B run to ``run_dir/wandb`` only (no account; ``wandb sync``
    uploads it later); None follows ``WANDB_MODE``, else W&B's default (online)."""
    sample_trajectories: int = 4
    """Trajectories per step in the W&B ``trajectories`` table (0 = none)."""
    rollouts: bool = False
    """Keep every training step's trajectories in ``run_dir/rollouts/step-NNNNNN.jsonl``
    (the JSONL ``agentgym rollout`` writes; a resumed run that redoes a step rewrites its
    file). Each episode's line holds its token ids and log-probs."""

    def __post_init__(self) -> None:
        if self.sample_trajectories < 0:
            raise ConfigError(f"logging.sample_trajectories must be >= 0, got "
                              f"{self.sample_trajectories}")


@dataclass(frozen=True)
class DistributedConfig:
    """Multi-GPU policy updates with FSDP (launch with torchrun; see docs/scale-out.md)."""

    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, ~30% more compute)."""
    reshard_after_forward: bool = True
    """FSDP: free gathered parameters after the forward (ZeRO-3); False keeps them (ZeRO-2)."""
    mixed_precision: Literal["none", "bfloat16"] = "none"
    """FSDP parameter dtype in forward/backward (gradients reduced in float32)."""
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    """torch.distributed backend (auto: nccl with CUDA, else gloo)."""
