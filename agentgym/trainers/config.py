"""Training configuration: nested frozen dataclasses, one YAML file, dotted overrides.

The YAML file maps 1:1 onto :class:`TrainConfig` (sections are nested mappings, every key a
field). Overrides on the command line use dotted paths: ``optim.lr=3e-6``,
``rollout.group_size=8``. Unknown keys and wrongly typed values raise
:class:`~agentgym.errors.ConfigError` naming the field, what was expected and the closest
valid key. Every number is finite and every count within what the machine holds, checked
at load (``config_parse.py`` and each section's ``__post_init__``). A config file that is
empty is refused, not read as "every default" (:func:`read_config_file`): leaving the
file out is how to ask for the defaults. The resolved config is written to
``<run_dir>/config.yaml`` under :data:`CONFIG_HEADER`, which marks the folder as a run's;
a ``run_dir`` holding a ``config.yaml`` no run wrote is refused rather than overwritten.

This module holds the run itself and the checks across its sections; the sections live in
``config_rollout.py`` (env, envs mix, model, collection), ``config_update.py`` (algorithm,
loss, optimizer, SPA's progress estimator) and ``config_run.py`` (suite evaluation, async
overlap, logging, FSDP), the mapping and override handling in ``config_parse.py``. Import
every name from here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from agentgym.engines.config import RayConfig
from agentgym.errors import ConfigError
from agentgym.files import atomic_write, yaml_error_message
from agentgym.parsing import FORMATS
from agentgym.trainers.config_parse import apply_overrides, from_dict, to_dict
from agentgym.trainers.config_rollout import (
    CollectionConfig,
    EnvConfig,
    EnvMixEntry,
    LoraConfig,
    ModelConfig,
)
from agentgym.trainers.config_run import (
    AsyncConfig,
    DistributedConfig,
    LoggingConfig,
    SuiteEvalConfig,
)
from agentgym.trainers.config_update import (
    MAX_LR,
    AlgorithmConfig,
    LossConfig,
    OptimConfig,
    ProgressConfig,
    ValueConfig,
)

__all__ = [
    "CONFIG_HEADER", "MAX_LR", "AlgorithmConfig", "AsyncConfig", "CollectionConfig",
    "DistributedConfig", "EnvConfig", "EnvMixEntry", "LoggingConfig", "LoraConfig", "LossConfig",
    "ModelConfig", "OptimConfig", "ProgressConfig", "SuiteEvalConfig", "TrainConfig",
    "ValueConfig", "apply_overrides", "from_dict", "load_config", "read_config_file",
    "save_config", "to_dict",
]


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
    methods: dict[str, Any] = field(default_factory=dict)
    """Plug-in training methods to turn on, each with its options
    (``methods: {NAME: {option: value}}``; ``agentgym/trainers/methods/``). Built-in ones
    (G-RA, GAE, SPA, SUPO) are turned on by their own sections."""

    def __post_init__(self) -> None:
        from agentgym.trainers.advantages import estimator_info

        info = estimator_info(self.algorithm.estimator)  # unknown names: did-you-mean now
        checks = [
            (0 <= self.seed < 2**32, f"seed must be in [0, 2**32) (numpy's seed range), got "
             f"{self.seed}"),
            (self.steps >= 1, "steps must be >= 1"),
            (self.eval_every >= 0, f"eval_every must be >= 0 (0 = only before and after), got "
             f"{self.eval_every}"),
            (self.save_every >= 1, f"save_every must be >= 1 (steps between checkpoints), got "
             f"{self.save_every}; the last step is always saved, so set save_every to steps "
             "to keep one checkpoint"),
            (self.rollout.group_size >= 2 or not info.group_baseline,
             f"rollout.group_size must be >= 2 for a group baseline, got "
             f"{self.rollout.group_size}; set rollout.group_size=4"),
            (0 <= self.algorithm.max_error_rate <= 1, "algorithm.max_error_rate must be in [0, 1]"),
            (self.rollout.top_p == 1.0
             or self.loss.recomputes_old_logprobs(self.optim.autocast),
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

            total = sum(e.weight for e in self.envs)
            if not math.isfinite(total):
                raise ConfigError(f"the envs weights sum to {total} (past a float's range); "
                                  "weights are shares: scale them down, e.g. to 1 and 2")
            check_mix(self, info.needs)
        self._check_off_policy(info.level)
        from agentgym.trainers.methods import check_methods

        check_methods(self)  # unknown plug-in names and options: did-you-mean now
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


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> TrainConfig:
    """The config in a YAML file (or the defaults) with dotted overrides applied."""
    data: dict[str, Any] = {}
    if path is not None:
        data = read_config_file(path, "examples/*.yaml", "or run `agentgym train` with no "
                                "CONFIG to use every default")
    return from_dict(TrainConfig, apply_overrides(data, overrides))


def read_config_file(path: str | Path, examples: str, empty_hint: str) -> dict[str, Any]:
    """The mapping of sections in a config YAML file.

    An empty file (or one of only comments) is refused rather than read as "every default":
    it is far more often a file not yet saved, truncated, or the wrong one, and a run on the
    defaults writes into ``runs/`` for minutes. The defaults stay one explicit step away:
    leave the CONFIG argument out.

    Raises:
        ConfigError: No file, an empty file, or a file not holding a mapping.
    """
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"no config file at {str(path)!r}; see {examples}")
    if path.is_dir():
        raise ConfigError(f"{str(path)!r} is a folder; expected a config YAML file "
                          f"(see {examples})")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(yaml_error_message(exc, path)) from None
    if data is None:
        raise ConfigError(f"config file {str(path)!r} is empty; write the sections to change "
                          f"(see {examples}), {empty_hint}")
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of sections (env:, "
                          f"model:, ...), got a {type(data).__name__}; see {examples}")
    return data


CONFIG_HEADER = "# agentgym run config: written by the run itself (edit a copy, not this file)"
"""First line of a run's ``config.yaml``: how a run folder is told from any other folder
(``agentgym.trainers.checkpoint.check_run_dir``), so that no run replaces a user's file."""


def save_config(config: Any, path: str | Path) -> None:
    """Write a resolved config (train's or sft's) as YAML under :data:`CONFIG_HEADER`.

    Atomic; a file that already says it is kept byte for byte.
    """
    text = CONFIG_HEADER + "\n" + yaml.safe_dump(to_dict(config), sort_keys=False)
    path = Path(path)
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return  # e.g. `train RUN/config.yaml --resume`: the input stays byte for byte
    atomic_write(path, text)
