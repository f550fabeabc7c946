"""Training configuration: nested frozen dataclasses, one YAML file, dotted overrides.

The YAML file maps 1:1 onto :class:`TrainConfig` (sections are nested mappings, every key a
field). Overrides on the command line use dotted paths: ``optim.lr=3e-6``,
``rollout.group_size=8``. Unknown keys and wrongly typed values raise
:class:`~agentgym.errors.ConfigError` naming the field, what was expected and the closest
valid key. The resolved config is written to ``<run_dir>/config.yaml``.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml

from agentgym.context import SummarizeConfig
from agentgym.engines.april import AprilConfig
from agentgym.engines.config import RayConfig
from agentgym.errors import ConfigError, did_you_mean
from agentgym.files import atomic_write
from agentgym.parsing import FORMATS
from agentgym.trainers.horizon import HorizonSchedule
from agentgym.trainers.supo import SUPOOptions
from agentgym.trainers.vcpo import VCPOConfig


@dataclass(frozen=True)
class EnvConfig:
    """Which env to train on, and which tasks."""

    id: str = "agentgym/Arithmetic-v0"
    """Registered env id."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for ``agentgym.make``."""
    max_turns: int | None = None
    """Override of the env's turn limit (None keeps the registered one)."""
    first_seed: int = 0
    """Training tasks are seeds first_seed, first_seed + 1, ... in order."""
    eval_seeds: int = 0
    """Held-out tasks evaluated before training and every ``eval_every`` steps (0 = none)."""
    eval_first_seed: int = 1_000_000
    """First held-out seed (kept far from the training seeds)."""
    eval_kwargs: dict[str, Any] = field(default_factory=dict)
    """Merged over ``kwargs`` for the held-out evaluation (e.g. ``{split: test}``)."""


@dataclass(frozen=True)
class EnvMixEntry(EnvConfig):
    """One env of a weighted mix (the ``envs`` list; trainers/mixture.py).

    Every :class:`EnvConfig` field (id, kwargs, max_turns, seeds, held-out evaluation) plus
    the entry's share of each step and its own context and reward settings.
    """

    name: str | None = None
    """Label in metrics (``env/<name>/...``) and group ids; default: the env id. Two entries
    of one env id need different names."""
    weight: float = 1.0
    """Share of each step's tasks: weight / sum of weights (largest remainder)."""
    reward_scale: float = 1.0
    """Multiplies this env's outcome and step rewards before the estimator."""
    reward_accumulation: Literal["gated", "direct"] | None = None
    """This env's rewards rewritten by G-RA (``gated``) or D-RA (``direct``) with
    ``reward_options`` before the estimator (then ``reward_scale``); None: as the env gives."""
    reward_options: dict[str, Any] = field(default_factory=dict)
    """Fields of ``trainers.rewards.SWERewardConfig`` for ``reward_accumulation``."""
    context: Literal["full", "window"] | None = None
    """This env's context manager (None = ``rollout.context``)."""
    history_length: int | None = None
    """K of this env's window context (None = ``rollout.history_length``)."""
    max_tokens: int | None = None
    """Most tokens per policy call in this env (None = ``rollout.max_tokens``)."""
    max_prompt_tokens: int | None = None
    """This env's prompt limit (None = ``rollout.max_prompt_tokens``)."""

    @property
    def label(self) -> str:
        """The entry's name, or its env id."""
        return self.name or self.id

    def __post_init__(self) -> None:
        where = f"envs entry {self.label!r}"
        if not (self.weight > 0 and math.isfinite(self.weight)):
            raise ConfigError(f"{where}: weight must be > 0, got {self.weight}")
        if not math.isfinite(self.reward_scale):
            raise ConfigError(f"{where}: reward_scale must be a finite number, got "
                              f"{self.reward_scale}")
        for name in ("history_length", "max_tokens", "max_prompt_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{where}: {name} must be >= 1 or null, got {value}")
        if self.name is not None and (not self.name or "|" in self.name or ":" in self.name):
            raise ConfigError(f"{where}: name must be non-empty without '|' or ':', got "
                              f"{self.name!r}")


@dataclass(frozen=True)
class LoraConfig:
    """Low-rank adapters via peft (only the adapters train)."""

    enabled: bool = False
    """Train LoRA adapters instead of every weight."""
    r: int = 16
    """Adapter rank."""
    alpha: int = 32
    """Adapter scaling numerator (scale = alpha / r)."""
    dropout: float = 0.0
    """Dropout on the adapter input."""
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    """Module names that get adapters."""


@dataclass(frozen=True)
class ModelConfig:
    """The policy model."""

    path: str = "smollm2"
    """``smollm2`` (the embedded model) or a local Hugging Face model folder."""
    device: str = "cpu"
    """Torch device for training and generation."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Weights dtype."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """Low-rank adapters."""
    max_batch_size: int = 64
    """Most generation requests decoded together."""


@dataclass(frozen=True)
class CollectionConfig:
    """How trajectories are collected each step (the ``rollout`` section).

    Not :class:`agentgym.rollout.RolloutConfig`, the rollout engine's own settings, which the
    trainer builds from this section.
    """

    tasks_per_step: int = 4
    """Tasks (groups) per training step."""
    group_size: int = 4
    """Rollouts per task."""
    concurrency: int = 64
    """Episodes in flight."""
    temperature: float = 1.0
    """Sampling temperature (the loss uses the same one)."""
    top_p: float = 1.0
    """Nucleus sampling mass (keep 1.0: recorded log-probs ignore it)."""
    max_tokens: int = 64
    """Most tokens per policy call."""
    context: Literal["full", "window", "summarize"] = "full"
    """Context manager (``summarize`` = SUPO, set up by ``summarize`` below)."""
    history_length: int = 2
    """K for the window context (HGPO reads it too)."""
    max_prompt_tokens: int = 4096
    """Longer prompts end the episode as truncated."""
    step_timeout: float = 300.0
    """Seconds per policy call or env step before the episode is an error."""
    tool_format: str | None = "auto"
    """The model's tool-call syntax (``hermes``, ``qwen3_coder``, ``mistral``, ``deepseek``,
    ``harmony``, ``llama3_json``, ``pythonic``, ``json``, ...): its calls are parsed in the
    rollout and reach the env as structured calls. ``auto`` reads it from the chat template;
    null leaves every reply to the env's parser (which reads all of them by their markers)."""
    max_steps: int = 100
    """The rollout engine's cap on env steps per episode (summary turns not counted),
    for envs without a turn limit of their own; an episode that reaches it ends as
    ``truncated``, which SUPO's overlong masking counts (trainers/supo.py ``is_overlong``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.max_steps, int) or self.max_steps < 1:
            raise ConfigError(f"rollout.max_steps must be an int >= 1 (the engine's cap on "
                              f"steps per episode), got {self.max_steps!r}; the default is 100")

    summarize: SummarizeConfig = field(default_factory=SummarizeConfig)
    """SUPO's working window W, max summaries S (and S at evaluation), max policy calls H and
    the summary prompts (read when context is ``summarize``; docs/supo.md)."""
    horizon_schedule: HorizonSchedule = field(default_factory=HorizonSchedule)
    """ScalingInter-RL: the training rollouts' turn cap by step (trainers/horizon.py); the
    held-out evaluation keeps the env's own limit."""
    april: AprilConfig = field(default_factory=AprilConfig)
    """Active partial rollouts: over-provision groups, end a step's collection once
    ``tasks_per_step`` groups finished, carry unfinished episodes into the next step
    (agentgym/engines/april.py; docs/scale-out.md)."""


@dataclass(frozen=True)
class ValueConfig:
    """The value head that GAE needs (``algorithm.value``; trainers/critic.py).

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
        if not (self.lr > 0 and self.epochs >= 1 and self.clip > 0
                and self.max_tokens_per_micro_batch >= 1):
            raise ConfigError(f"algorithm.value needs lr > 0, epochs >= 1, clip > 0 and "
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
    reward_options: dict[str, Any] = field(default_factory=dict)
    """Fields of ``trainers.rewards.SWERewardConfig`` (the SWE preset's components)."""
    supo: SUPOOptions = field(default_factory=SUPOOptions)
    """SUPO training: overlong masking, step-level estimators (rollout.context=summarize)."""
    value: ValueConfig = field(default_factory=ValueConfig)
    """The critic of GAE advantages (read only when the estimator uses values)."""


@dataclass(frozen=True)
class LossConfig:
    """The policy loss (spec §8; PPO-clip, GSPO or CISPO, with three aggregations)."""

    clip_low: float = 0.2
    """ε_low."""
    clip_high: float = 0.2
    """ε_high (0.28 for clip-higher)."""
    policy_loss: Literal["ppo", "gspo", "cispo"] = "ppo"
    """Policy term: PPO-clip on token ratios, GSPO's sequence-level ratio, or CISPO's clipped
    and detached importance weight (trainers/loss.py has the equations)."""
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
    recompute_logprobs: bool = False
    """Recompute π_old with a forward pass instead of using the sampling-time log-probs."""

    def __post_init__(self) -> None:
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
    epochs: int = 1
    """Passes over each step's samples."""
    mini_batches: int = 1
    """Optimizer steps per epoch (the samples are split into this many parts)."""
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
    trainers/packing.py."""


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
        if self.lr <= 0 or self.head_lr <= 0:
            raise ConfigError(f"progress.lr and progress.head_lr must be > 0, got {self.lr} "
                              f"and {self.head_lr}; the paper uses lr=3e-6")


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
        if self.suite is not None:  # an unknown suite fails now (did-you-mean), not mid-run
            from agentgym.evaluation.suites import get_suite

            get_suite(self.suite)


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
    and the off-policy optimal baseline (trainers/vcpo.py); also read under
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


@dataclass(frozen=True)
class TrainConfig:
    """A training run."""

    run_dir: str = "runs/train"
    """Where checkpoints, metrics and the resolved config go."""
    seed: int = 0
    """Seeds torch, numpy and sampling."""
    steps: int = 10
    """Training steps (collect → update)."""
    save_every: int = 5
    """Checkpoint every this many steps (and at the end)."""
    resumable_checkpoints: bool = False
    """Also save the optimizer state (AdamW: twice the trained weights) so that ``--resume``
    continues exactly; off, a checkpoint holds the weights, data position and random states."""
    eval_every: int = 0
    """Evaluate on held-out seeds every this many steps (0 = only before and after)."""
    tensorboard: bool = True
    """Also write TensorBoard event files."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """The environment (leave it out when ``envs`` lists several)."""
    envs: tuple[EnvMixEntry, ...] = ()
    """Several envs in one run, each with a weight, its own tasks, context and reward scale;
    groups never mix envs and metrics come per env (``env/<name>/...``). Empty: ``env``."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The policy model."""
    rollout: CollectionConfig = field(default_factory=CollectionConfig)
    """Trajectory collection."""
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    """Credit assignment."""
    loss: LossConfig = field(default_factory=LossConfig)
    """The loss."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """The optimizer."""
    progress: ProgressConfig = field(default_factory=ProgressConfig)
    """SPA's progress estimator (read when algorithm.estimator is spa)."""
    eval: SuiteEvalConfig = field(default_factory=SuiteEvalConfig)
    """Suite evaluation during training; results go to run_dir/eval/step-N/."""
    engine: Literal["local", "ray"] = "local"
    """Where rollouts run: this process (asyncio) or Ray actors (docs/scale-out.md)."""
    ray: RayConfig = field(default_factory=RayConfig)
    """Ray env and generation workers (read when engine is ray)."""
    async_training: AsyncConfig = field(default_factory=AsyncConfig)
    """Overlap generation with the update, with a staleness bound."""
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    """FSDP settings for multi-GPU updates (read when launched with torchrun)."""
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    """Weights & Biases logging (``logging.wandb: true``)."""

    def __post_init__(self) -> None:
        from agentgym.trainers.advantages import estimator_info

        info = estimator_info(self.algorithm.estimator)  # unknown names: did-you-mean now
        checks = [
            (self.steps >= 1, "steps must be >= 1"),
            (self.save_every >= 1, f"save_every must be >= 1 (steps between checkpoints), got "
             f"{self.save_every}; the last step is always saved, so set save_every to steps "
             "to keep one checkpoint"),
            (self.rollout.group_size >= 2 or not info.group_baseline,
             f"rollout.group_size must be >= 2 for a group baseline, got "
             f"{self.rollout.group_size}; set rollout.group_size=4"),
            (self.rollout.tasks_per_step >= 1, "rollout.tasks_per_step must be >= 1"),
            (self.optim.lr > 0, f"optim.lr must be > 0, got {self.optim.lr}"),
            (self.optim.mini_batches >= 1, "optim.mini_batches must be >= 1"),
            (0 <= self.algorithm.max_error_rate <= 1, "algorithm.max_error_rate must be in [0, 1]"),
            (self.rollout.top_p == 1.0 or self.loss.recompute_logprobs,
             "rollout.top_p < 1 changes the sampling distribution that the recorded log-probs do "
             "not describe; set rollout.top_p=1.0"),
            (self.rollout.tool_format in (None, "auto", *FORMATS),
             f"rollout.tool_format must be auto, null or one of {list(FORMATS)}, got "
             f"{self.rollout.tool_format!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)
        if self.envs:
            from agentgym.trainers.mixture import check_mix

            check_mix(self, info.needs)
        self._check_off_policy(info.level)
        k = self.algorithm.options.get("history_length")
        if "history_length" in info.needs:
            name = info.name
            if self.rollout.context == "full" and k is None:
                raise ConfigError(
                    f"{name} needs the history length K: set rollout.context=window ({name} "
                    "then reads rollout.history_length) or algorithm.options.history_length")
            if self.rollout.context == "window" and k is not None \
                    and k != self.rollout.history_length:
                raise ConfigError(
                    f"algorithm.options.history_length={k} differs from rollout.history_length="
                    f"{self.rollout.history_length}; {name} must group by the K the prompts used")

    def _check_off_policy(self, level: str) -> None:
        """APRIL and VCPO settings that cannot work together with the rest of the config."""
        april, vcpo = self.rollout.april, self.async_training.vcpo
        if april.enabled and self.engine == "ray":
            raise ConfigError("rollout.april runs episodes in this process; use engine=local "
                              "or set rollout.april.enabled=false")
        if april.enabled and self.async_training.enabled \
                and april.max_staleness < self.async_training.max_staleness:
            raise ConfigError(f"rollout.april.max_staleness={april.max_staleness} is below "
                              f"async_training.max_staleness={self.async_training.max_staleness}"
                              "; APRIL's bound covers the overlap too: raise it")
        if not vcpo.enabled:
            return
        if not (self.async_training.enabled or april.enabled):
            raise ConfigError("async_training.vcpo corrects off-policy updates; enable "
                              "async_training.enabled=true or rollout.april.enabled=true")
        if self.async_training.correction == "none":
            raise ConfigError("async_training.vcpo needs the importance weights; set "
                              "async_training.correction=importance")
        if vcpo.baseline and (level != "trajectory" or self.rollout.context == "summarize"
                              or self.algorithm.reward_accumulation != "none"):
            raise ConfigError("async_training.vcpo.baseline replaces the advantages by "
                              "R_i - b* per trajectory: it needs a trajectory-level estimator "
                              "(grpo, rloo), no SUPO context and no reward accumulation; "
                              "or set async_training.vcpo.baseline=false")


def from_dict(cls: type[Any], data: Mapping[str, Any], where: str = "") -> Any:
    """Build dataclass ``cls`` from a nested mapping, checking keys and types."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where or 'config'} must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else key
        if key not in names:
            raise ConfigError(f"unknown config key {path!r}{did_you_mean(key, names)}; "
                              f"valid keys here: {names}")
        kwargs[key] = _coerce(hints[key], value, path)
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{where or 'config'}: {exc}") from exc


def _coerce(hint: Any, value: Any, path: str) -> Any:
    origin, args = get_origin(hint), get_args(hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return from_dict(hint, value or {}, path)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(arg, value, path)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0])
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{path} must be one of {list(args)}, got {value!r}")
        return value
    if origin is tuple:
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise ConfigError(f"{path} must be a list, got {value!r}")
        if len(args) == 2 and args[1] is Ellipsis and args[0] is not Any:
            return tuple(_coerce(args[0], v, f"{path}[{i}]") for i, v in enumerate(value))
        return tuple(value)
    if origin is dict or hint is Any:
        if origin is dict and not isinstance(value, Mapping):
            raise ConfigError(f"{path} must be a mapping, got {value!r}")
        return dict(value) if origin is dict else value
    if hint is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if hint is float and isinstance(value, str):  # YAML 1.1 reads "3e-6" as a string
        try:
            return float(value)
        except ValueError:
            pass
    if hint in (int, str, bool) and type(value) is hint:
        return value
    raise ConfigError(f"{path} must be {getattr(hint, '__name__', hint)}, got {value!r}")


def to_dict(config: Any) -> dict[str, Any]:
    """Plain nested dict (tuples as lists) for YAML."""
    def plain(value: Any) -> Any:
        if isinstance(value, tuple | list):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return plain(dataclasses.asdict(config))


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (values parsed as YAML) to a nested dict."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override must look like section.key=value, got {item!r}")
        node = data
        *parents, leaf = key.strip().split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {part!r} is not a section")
        node[leaf] = yaml.safe_load(raw)
    return data


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> TrainConfig:
    """The config in a YAML file (or the defaults) with dotted overrides applied."""
    data: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.exists():
            raise ConfigError(f"no config file at {str(path)!r}; see examples/*.yaml")
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return from_dict(TrainConfig, apply_overrides(data, overrides))


def save_config(config: TrainConfig, path: str | Path) -> None:
    """Write the resolved config as YAML, atomically; a file that already says it is kept."""
    text = yaml.safe_dump(to_dict(config), sort_keys=False)
    path = Path(path)
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return  # e.g. `train RUN/config.yaml --resume`: the input stays byte for byte
    atomic_write(path, text)
