"""What a run checks about its model before loading it: the folder, the device, LoRA targets.

``train``, ``sft`` and ``export`` call :func:`check_model` first, so that a ``model.path``
that is no model, a checkpoint cut short, a CUDA device on a CPU-only torch or a LoRA
target the model lacks is one :class:`~agentgym.errors.ConfigError` naming the field, not a
traceback seconds (or, for a large model, minutes) into loading it.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from agentgym.evaluation.inputs import (
    MODEL_CONFIG,
    check_device,
    check_model_folder,
    check_safetensors,
)
from agentgym.trainers import checkpoint
from agentgym.trainers.config import ModelConfig
from agentgym.trainers.lora import check_targets
from agentgym.trainers.models import is_checkpoint


def check_model(model: ModelConfig, what: str = "model.path", *, device: bool = True) -> None:
    """Refuse a model section that cannot load (module docstring).

    Args:
        model: The run's model section.
        what: How messages name the path (``model.path``, ``--base``).
        device: Also check ``model.device`` (export loads on the CPU and skips it).

    Raises:
        ConfigError: The first mistake found.
    """
    if device:
        check_device(model.device, "model.device")
    check_base(model.path, what)
    if model.lora.enabled and not is_checkpoint(model.path):
        names = weight_module_names(Path(model.path).expanduser())
        if names is not None:
            check_targets(model.lora, names, repr(model.path))


def check_base(path: str, what: str) -> None:
    """A model folder, ``smollm2``, or a whole checkpoint of a run whose base is one.

    Raises:
        ConfigError: Naming ``what``.
    """
    if not is_checkpoint(path):
        check_model_folder(path, what)
        return
    folder = Path(path).expanduser()
    checkpoint.check_checkpoint(folder)  # state.json and weights whole
    run_config = folder.parent.parent / "config.yaml"
    if not run_config.is_file():
        return  # loading says what is missing, naming the expected layout
    section = yaml.safe_load(run_config.read_text(encoding="utf-8"))
    base = section.get("model", {}).get("path") if isinstance(section, dict) else None
    if isinstance(base, str) and Path(base).expanduser().resolve() != folder.resolve():
        check_base(base, f"{what} {path} (its run's model.path)")


def weight_module_names(folder: Path) -> list[str] | None:
    """The module names a model folder's safetensors weights imply, or None if unknown.

    ``model.layers.0.self_attn.q_proj.weight`` implies the module
    ``model.layers.0.self_attn.q_proj`` and its parents; a tied ``lm_head`` has no weight of
    its own, so it is added when the config ties the embeddings.
    """
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not files or not (folder / MODEL_CONFIG).is_file():
        return None  # the embedded model's cache, .bin weights: peft's own check follows
    names: set[str] = set()
    for file in files:
        for tensor in check_safetensors(file):
            parts = tensor.split(".")[:-1]
            names.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    try:
        tied = json.loads((folder / MODEL_CONFIG).read_text()).get("tie_word_embeddings", True)
    except (ValueError, AttributeError):
        tied = True
    if tied:
        names.add("lm_head")
    return sorted(names)
