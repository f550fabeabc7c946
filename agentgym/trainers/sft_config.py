"""Configuration of ``agentgym sft``: one YAML file, dotted overrides, checked before torch loads.

The ``env``, ``model`` and ``rollout`` sections are those of ``agentgym train``
(:mod:`agentgym.trainers.config`): SFT replays demonstrations through the same context
manager (``rollout.context``, ``rollout.history_length``) that RL rollouts use, and the
held-out evaluation samples with ``rollout.max_tokens``. Copy those sections from the RL
config the SFT model will start, so that both see identical prompts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agentgym.errors import ConfigError
from agentgym.trainers.config import (
    MAX_LR,
    CollectionConfig,
    EnvConfig,
    ModelConfig,
    TrainConfig,
    apply_overrides,
    from_dict,
    read_config_file,
)
from agentgym.trainers.precision import Autocast


@dataclass(frozen=True)
class SFTDataConfig:
    """Which trajectories to imitate (the ``data`` section)."""

    paths: tuple[str, ...] = ()
    """Trajectory JSONL files (``agentgym rollout ... --out FILE``)."""
    success_only: bool = False
    """Keep only episodes the env marked successful (its ``success`` flag, else reward > 0):
    rejection-sampling fine-tuning on model rollouts."""
    min_reward: float | None = None
    """Keep only episodes whose outcome reward is at least this (None = no threshold)."""
    skip_invalid_steps: bool = True
    """Leave out steps the env could not parse or run (their actions are not imitated)."""
    max_trajectories: int | None = None
    """Use at most this many trajectories (after filtering, in file order)."""

    def __post_init__(self) -> None:
        if not self.paths:
            raise ConfigError("data.paths is empty; name the trajectory JSONL files to imitate, "
                              "e.g. data.paths=[runs/expert.jsonl] from `agentgym rollout ENV "
                              "--policy expert --out runs/expert.jsonl`")
        for path in self.paths:
            if not Path(path).is_file():
                raise ConfigError(f"data.paths: no file at {path!r}; write one with `agentgym "
                                  f"rollout ENV --policy expert --out {path}`")
        if self.max_trajectories is not None and self.max_trajectories < 1:
            raise ConfigError(f"data.max_trajectories must be >= 1 or null, got "
                              f"{self.max_trajectories}")


@dataclass(frozen=True)
class SFTOptimConfig:
    """Optimizer and schedule of the supervised updates."""

    lr: float = 1e-4
    """AdamW learning rate (constant)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Max global grad norm (0 disables clipping)."""
    epochs: int = 2
    """Passes over the demonstrations."""
    batch_size: int = 16
    """Steps (samples) per optimizer step."""
    max_tokens_per_micro_batch: int = 4096
    """Padded tokens per forward pass (gradient accumulation does the rest); packed tokens
    when ``pack_prefixes`` is on."""
    pack_prefixes: bool = True
    """Run each micro-batch's shared prefixes once (an env's instructions, a group's
    prompt), as ``optim.pack_prefixes`` of train; same loss, needs a Llama-family model."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, about a third more compute),
    as ``optim.gradient_checkpointing`` of train."""
    autocast: Autocast = "none"
    """``bfloat16``: the passes under bf16 autocast, weights kept float32, as
    ``optim.autocast`` of train."""

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "max_tokens_per_micro_batch"):
            if getattr(self, name) < 1:
                raise ConfigError(f"optim.{name} must be >= 1, got {getattr(self, name)}")
        if not 0 < self.lr <= MAX_LR:
            raise ConfigError(f"optim.lr must be in (0, {MAX_LR:g}], got {self.lr}; try "
                              "optim.lr=1e-4")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise ConfigError(f"optim.weight_decay and optim.grad_clip must be >= 0 (grad_clip "
                              f"0 disables clipping), got {self.weight_decay} and "
                              f"{self.grad_clip}")


@dataclass(frozen=True)
class SFTConfig:
    """A supervised fine-tuning run."""

    data: SFTDataConfig
    """The demonstrations."""
    run_dir: str = "runs/sft"
    """Where checkpoints, metrics, the resolved config and the exported model go."""
    seed: int = 0
    """Seeds torch, numpy, the sample order and evaluation sampling."""
    save_every: int = 50
    """Checkpoint every this many optimizer steps (and at the end)."""
    resumable_checkpoints: bool = False
    """Also save the optimizer state so that ``--resume`` continues exactly."""
    eval_every: int = 0
    """Held-out evaluation every this many optimizer steps (0 = only before and after)."""
    tensorboard: bool = True
    """Also write TensorBoard event files."""
    export: bool = True
    """At the end, write ``run_dir/model``: a Hugging Face folder (LoRA merged) that
    ``model.path`` of a train config and ``hf:PATH`` policies load."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """The env: its held-out seeds are evaluated before and after."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The model to fine-tune (full or LoRA), as in ``train``."""
    rollout: CollectionConfig = field(default_factory=CollectionConfig)
    """The context manager that builds prompts (as in the RL config) and evaluation
    sampling (``max_tokens``)."""
    optim: SFTOptimConfig = field(default_factory=SFTOptimConfig)
    """The optimizer."""

    def __post_init__(self) -> None:
        if not 0 <= self.seed < 2**32:
            raise ConfigError(f"seed must be in [0, 2**32) (numpy's seed range), got "
                              f"{self.seed}")
        if self.save_every < 1:
            raise ConfigError(f"save_every must be >= 1, got {self.save_every}")
        if self.eval_every < 0:
            raise ConfigError(f"eval_every must be >= 0, got {self.eval_every}")
        if self.rollout.context == "summarize":
            raise ConfigError("rollout.context=summarize: SFT cannot rebuild SUPO's summaries "
                              "from demonstrations; use rollout.context=full or window")

    def as_train_config(self) -> TrainConfig:
        """The train config with this run's env, model and rollout (for evaluation)."""
        return TrainConfig(run_dir=self.run_dir, seed=self.seed, env=self.env,
                           model=self.model, rollout=self.rollout, tensorboard=False)


def load_sft_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> SFTConfig:
    """The SFT config in a YAML file with dotted overrides, env id and kwargs checked."""
    data = read_config_file(path, "examples/sft_sokoban.yaml",
                            "at least data.paths (the demonstrations)")
    config: SFTConfig = from_dict(SFTConfig, apply_overrides(data, overrides))
    import agentgym

    for kwargs in (config.env.kwargs, {**config.env.kwargs, **config.env.eval_kwargs}):
        agentgym.make(config.env.id, **kwargs)  # bad env id/kwargs fail before loading a model
    return config
