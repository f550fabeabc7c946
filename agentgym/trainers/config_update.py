"""Config sections of the update: credit assignment, the critic, the loss, the optimizer, SPA.

Parts of :class:`agentgym.trainers.config.TrainConfig` (``algorithm``, ``loss``, ``optim``,
``progress``); import them from ``agentgym.trainers.config``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from agentgym.errors import ConfigError
from agentgym.trainers.precision import Autocast
from agentgym.trainers.supo import SUPOOptions

MiniBatchBy = Literal["sample", "episode", "group"]
"""What a split of a step's samples into mini-batches keeps whole (``optim.mini_batch_by``)."""

MAX_LR = 1.0
"""Largest learning rate accepted: AdamW moves each weight by about lr a step, so past 1 a
step overwrites what the model knew, and past ~1e37 the step itself overflows float32."""


@dataclass(frozen=True)
class ValueConfig:
    """The value head that GAE needs (``algorithm.value``; agentgym/trainers/critic.py).

    Built only when the estimator reads values: ``estimator: gae``, or
    ``estimator: spa`` with ``options.advantage: gae``.
    """

    lr: float = 1e-5
    """AdamW learning rate of the critic (its own optimizer, not the policy's)."""
    epochs: int = 1
    """Optimizer steps on each training step's value targets."""
    clip: float = 0.2
    """ε_V of the clipped value loss (TRL's default; verl's ``critic.cliprange_value`` is 0.5)."""
    max_tokens_per_micro_batch: int = 8192
    """Padded tokens per critic forward pass."""

    def __post_init__(self) -> None:
        if not (0 < self.lr <= MAX_LR and self.epochs >= 1 and self.clip > 0
                and self.max_tokens_per_micro_batch >= 1):
            raise ConfigError(f"algorithm.value needs lr in (0, 1], epochs >= 1, clip > 0 and "
                              f"max_tokens_per_micro_batch >= 1, got {self}")


@dataclass(frozen=True)
class AlgorithmConfig:
    """Credit assignment."""

    estimator: str = "grpo"
    """Advantage estimator name (``agentgym advantages --help`` lists them)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Estimator options (gamma, invalid_penalty, mode, ...)."""
    drop_zero_variance_groups: bool = False
    """Skip groups whose rollouts all scored the same (dynamic sampling); kept by default
    because invalid-action penalties still give their steps a signal."""
    max_error_rate: float = 0.5
    """Stop when more than this share of a step's trajectories errored."""
    reward_accumulation: Literal["none", "gated", "direct"] = "none"
    """Rewrite rewards before the estimator: gated = G-RA, direct = D-RA (spec §6)."""
    reward_preset: str = "swe"
    """The reward components ``reward_accumulation`` uses: a preset an env family registered
    (:mod:`agentgym.reward_presets`; ``swe``: the SWE env's outcome label gating turns)."""
    reward_options: dict[str, Any] = field(default_factory=dict)
    """Options of ``reward_preset`` (``swe``: the fields of
    ``agentgym.envs.swe.rewards.SWERewardConfig``)."""
    supo: SUPOOptions = field(default_factory=SUPOOptions)
    """SUPO training: overlong masking, step-level estimators (rollout.context=summarize)."""
    value: ValueConfig = field(default_factory=ValueConfig)
    """The critic of GAE advantages (read only when the estimator uses values)."""

    def __post_init__(self) -> None:
        if self.reward_accumulation != "none":  # unknown presets and options fail now
            from agentgym.reward_presets import get_reward_preset

            get_reward_preset(self.reward_preset).components(self.reward_options)


@dataclass(frozen=True)
class RolloutCorrectionConfig:
    """Importance correction for the sampler/trainer log-prob gap (trainers/rollout_correction.py).

    On, the update recomputes π_old with the trainer's weights and weights each token (or
    step) by ρ = π_old / μ, μ being the sampler's recorded log-prob: truncated (TIS) or masked
    (MIS). Use it when generation runs on another engine (``model.generation: vllm``).
    """

    mode: Literal["none", "tis", "mis"] = "none"
    """``tis``: w = min(ρ, C); ``mis``: units with ρ outside [1/C, C] leave the loss."""
    level: Literal["token", "sequence"] = "token"
    """ρ per token, or one ρ per step (the product of its tokens' ratios)."""
    threshold: float = 2.0
    """C (> 1)."""

    def __post_init__(self) -> None:
        if not (self.threshold > 1 and math.isfinite(self.threshold)):
            raise ConfigError(f"loss.rollout_correction.threshold must be a finite number > 1, "
                              f"got {self.threshold}; 2.0 is the usual")


@dataclass(frozen=True)
class LossConfig:
    """The policy loss (spec §8; PPO-clip, GSPO or CISPO, with three aggregations)."""

    clip_low: float = 0.2
    """ε_low."""
    clip_high: float = 0.2
    """ε_high (0.28 for clip-higher)."""
    policy_loss: Literal["ppo", "gspo", "cispo"] = "ppo"
    """Policy term: PPO-clip on token ratios, GSPO's sequence-level ratio, or CISPO's clipped
    and detached importance weight (agentgym/trainers/loss.py has the equations)."""
    aggregation: Literal["token_mean", "seq_mean", "seq_sum"] = "token_mean"
    """How token losses are averaged: over the step's tokens, per sequence then over
    sequences, or summed per sequence over a constant length (``seq_sum``, Dr. GRPO; pair it
    with ``algorithm.options.mode=mean_norm``)."""
    max_completion_tokens: int | None = None
    """``seq_sum``'s constant length L_max (None = ``rollout.max_tokens``, or the largest
    ``max_tokens`` of an envs mix)."""
    kl_coef: float = 0.0
    """Coefficient of the k3 KL to the initial (reference) policy; 0 disables it."""
    entropy_coef: float = 0.0
    """Entropy bonus coefficient."""
    recompute_logprobs: bool | None = None
    """Recompute π_old with a forward pass instead of using the sampling-time log-probs.
    None: recompute when ``optim.autocast`` is on, so that π and π_old come from passes of
    the same precision (bf16 passes scored against a float32 engine's log-probs made the
    agent job's RL collapse; recomputed, it did not: docs/agent-job.md, run 50)."""
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
    """TIS/MIS on π_old / μ (recomputes π_old itself)."""

    def recomputes_old_logprobs(self, autocast: Autocast) -> bool:
        """Whether the update recomputes π_old (``recompute_logprobs``, else under autocast).

        Args:
            autocast: The update's precision (``optim.autocast``).
        """
        if self.recompute_logprobs is not None:
            return self.recompute_logprobs
        return autocast != "none"

    def __post_init__(self) -> None:
        if not (0 <= self.clip_low < 1 and self.clip_high >= 0):
            raise ConfigError(f"loss.clip_low must be in [0, 1) and loss.clip_high >= 0, got "
                              f"{self.clip_low} and {self.clip_high}; the usual is 0.2")
        if self.kl_coef < 0:
            raise ConfigError(f"loss.kl_coef must be >= 0 (0 disables the KL term), got "
                              f"{self.kl_coef}")
        if self.max_completion_tokens is not None and self.max_completion_tokens < 1:
            raise ConfigError(f"loss.max_completion_tokens must be >= 1 or null, got "
                              f"{self.max_completion_tokens}; null uses rollout.max_tokens")


@dataclass(frozen=True)
class OptimConfig:
    """Optimizer and update schedule."""

    lr: float = 1e-5
    """AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Max global grad norm (0 disables clipping)."""
    warmup_steps: int = 0
    """Linear warm-up of the learning rate: training step k (counted from 1) updates at
    ``lr * min(1, k / warmup_steps)``, then the full rate (verl's ``lr_warmup_steps``,
    Hugging Face's linear warm-up without the decay). 0: the full rate from the first step.
    Adam's first update moves every weight by about ``lr``; a warm-up holds it without a
    reference model (on the agent job, lr 4e-4 after 4 warm-up steps: a first update as
    small as lr 1e-4's, five-seed gains less spread and no higher; docs/agent-job.md, run
    43). Read from the step, so a resumed run picks up where it was."""
    epochs: int = 1
    """Passes over each step's samples."""
    mini_batches: int = 1
    """Optimizer steps per epoch (the samples are split into this many parts)."""
    mini_batch_by: MiniBatchBy = "sample"
    """What the split into ``mini_batches`` keeps whole: ``sample`` (each step's sample on
    its own), ``episode`` (an episode's turns together) or ``group`` (a task's rollouts
    together, as verl's mini-batches count prompts). With ``pack_prefixes``, turns and
    rollouts kept together share their prefixes in one prefix tree: on 32 rollouts of the
    agent job's warm start, in two mini-batches, 11.5k tokens forwarded by group and 12.3k
    by episode against 15.2k by sample, and a paired step's update took 171 s against 224 s
    (docs/agent-job.md, run 25). A step with fewer episodes or groups than ``mini_batches``
    takes one optimizer step per episode or group."""
    max_tokens_per_micro_batch: int = 4096
    """Padded tokens per forward pass (gradient accumulation does the rest); packed tokens
    when ``pack_prefixes`` is on."""
    pack_prefixes: bool = True
    """Compute every shared token prefix once in the update: a micro-batch's samples run as
    one prefix tree (a group's completions after one copy of its prompt, a full-history
    episode's turns inside its last turn's sequence), each token attending to its own
    prefix only. Same log-probs and gradients as unpacked (tested, LoRA and two FSDP ranks
    included), on fewer tokens and less memory (docs/benchmarks.md); needs a model taking
    a 4D attention mask and position ids (Llama family: set it false for others). See
    agentgym/trainers/packing.py."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass: a third more compute
    for a forward pass whose memory no longer grows with every layer's activations, so
    larger micro-batches fit (more shared prefixes computed once). Measured in
    docs/agent-job.md."""
    autocast: Autocast = "none"
    """``bfloat16``: forward and backward passes of the update (and the recomputed
    log-probs) under bf16 autocast, weights and optimizer state kept float32; faster and
    smaller where the hardware has bf16 (agentgym/trainers/precision.py). π_old is then
    recomputed in bf16 unless ``loss.recompute_logprobs`` says otherwise: the agent job's
    RL collapsed every time bf16 passes were scored against the engine's log-probs
    (docs/agent-job.md, runs 19, 20, 49 and 50), and not with π_old recomputed (run 50)."""

    def __post_init__(self) -> None:
        if self.warmup_steps < 0:
            raise ConfigError(f"optim.warmup_steps must be >= 0 (0: no warm-up), got "
                              f"{self.warmup_steps}")
        for name in ("epochs", "mini_batches", "max_tokens_per_micro_batch"):
            if getattr(self, name) < 1:
                raise ConfigError(f"optim.{name} must be >= 1, got {getattr(self, name)}"
                                  + ("; an update with no pass over the samples trains nothing"
                                     if name == "epochs" else ""))
        if not 0 < self.lr <= MAX_LR:
            raise ConfigError(f"optim.lr must be in (0, {MAX_LR:g}], got {self.lr}; e.g. "
                              "optim.lr=1e-5 (AdamW moves each weight by about lr a step)")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise ConfigError(f"optim.weight_decay and optim.grad_clip must be >= 0 (grad_clip "
                              f"0 disables clipping), got {self.weight_decay} and "
                              f"{self.grad_clip}")

    def lr_factor(self, step: int) -> float:
        """The warm-up's factor on ``lr`` at training step ``step`` (counted from 0)."""
        return 1.0 if self.warmup_steps == 0 else min(1.0, (step + 1) / self.warmup_steps)


@dataclass(frozen=True)
class ProgressConfig:
    """SPA's progress estimator (used when ``algorithm.estimator`` is ``spa``; docs/spa.md)."""

    model: str = "policy"
    """``policy`` (a copy of its initial weights), ``smollm2``, a Hugging Face folder, or an
    estimator folder written by ``agentgym progress train`` (then fitted further)."""
    lr: float = 3e-6
    """AdamW learning rate of the backbone (the paper's 3e-6)."""
    head_lr: float = 1e-4
    """Learning rate of the zero-initialized scalar head (an Adam step moves ĉ by about
    head_lr·Σ_i|h_i|, ~0.07 for SmolLM2 at 1e-4; raise it for narrow models)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    epochs: int = 1
    """Passes over the buffer per refresh."""
    batch_size: int = 8
    """Trajectories per optimizer step."""
    refresh_every: int = 1
    """Refit every this many training steps (0 = never: a frozen, pre-fitted estimator)."""
    buffer_groups: int = 32
    """Rolling buffer: the most recent groups kept for fitting."""
    explore_tasks: int = 0
    """Exploration phase: groups rolled out with the initial policy before the first step."""
    explore_epochs: int = 3
    """Passes over the exploration data."""
    explore_first_seed: int = 2_000_000
    """First exploration seed (apart from training and held-out seeds)."""
    grad_clip: float = 1.0
    """Max global grad norm (0 disables clipping)."""
    max_tokens_per_micro_batch: int = 8192
    """Padded tokens per forward pass."""

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "explore_epochs", "max_tokens_per_micro_batch"):
            if getattr(self, name) < 1:
                raise ConfigError(f"progress.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("refresh_every", "explore_tasks", "buffer_groups"):
            if getattr(self, name) < 0:
                raise ConfigError(f"progress.{name} must be >= 0, got {getattr(self, name)}")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise ConfigError(f"progress.weight_decay and progress.grad_clip must be >= 0, got "
                              f"{self.weight_decay} and {self.grad_clip}")
        if not (0 < self.lr <= MAX_LR and 0 < self.head_lr <= MAX_LR):
            raise ConfigError(f"progress.lr and progress.head_lr must be in (0, 1], got {self.lr} "
                              f"and {self.head_lr}; the paper uses lr=3e-6")
