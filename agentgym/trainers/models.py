"""The model a run trains: from a model folder, the embedded SmolLM2, or another run's checkpoint.

``model.path`` of a ``train`` or ``sft`` config may name a checkpoint folder of an earlier
run (``runs/sft/checkpoints/step-000040``): a checkpoint holds only the trainable parameters
(``agentgym/trainers/checkpoint.py``), so the base model is read from that run's ``config.yaml``
(itself possibly a checkpoint), loaded, and the saved parameters are put into it; LoRA
adapters are merged into the weights, so the new run starts from a plain model.

:func:`export_model` writes a run's weights as a Hugging Face folder (``run_dir/model``),
which every ``hf:PATH`` policy, ``agentgym eval`` and ``model.path`` load (``agentgym export``,
``agentgym/trainers/export.py``, does the same for a ``train`` run, with adapter folders as well).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from agentgym.errors import ConfigError
from agentgym.policies.models import load_model
from agentgym.trainers import checkpoint
from agentgym.trainers.config import LoraConfig, from_dict
from agentgym.trainers.lora import with_lora

WEIGHTS = "model.safetensors"


def is_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` is a complete checkpoint folder of a run (not a model folder)."""
    folder = Path(path).expanduser()
    return (folder / checkpoint.MARKER).is_file() and (folder / WEIGHTS).is_file() \
        and not (folder / "config.json").is_file()


def load_trained_model(path: str, *, device: str = "cpu", dtype: str = "float32"
                       ) -> tuple[Any, Any]:
    """``(model, tokenizer)`` for ``model.path``: a checkpoint of a run, or :func:`load_model`.

    Raises:
        ConfigError: A checkpoint whose run has no ``config.yaml`` or whose weights do not
            fit the base model it names.
    """
    if not is_checkpoint(path):
        return load_model(path, device=device, dtype=dtype)
    folder = Path(path).expanduser()
    run_config = folder.parent.parent / "config.yaml"
    if not run_config.is_file():
        raise ConfigError(f"checkpoint {folder} has no run config at {run_config}, so its base "
                          "model is unknown; pass the checkpoint's own run folder layout "
                          "(RUN/checkpoints/step-N) or an exported model folder (RUN/model)")
    section = (yaml.safe_load(run_config.read_text(encoding="utf-8")) or {}).get("model", {})
    base = str(section.get("path", "smollm2"))
    if Path(base).expanduser().resolve() == folder.resolve():
        raise ConfigError(f"{run_config} names its own checkpoint {folder} as its base model")
    model, tokenizer = load_trained_model(base, device=device, dtype=dtype)
    lora: LoraConfig = from_dict(LoraConfig, section.get("lora") or {}, "model.lora")
    if lora.enabled:
        model = with_lora(model, lora)
    try:
        checkpoint.load_weights(folder, model)
    except ValueError as exc:
        raise ConfigError(f"{exc} (base model {base!r}, named by {run_config})") from exc
    if lora.enabled:
        model = model.merge_and_unload()
    return model.to(device).eval(), tokenizer


def checkpoint_activations(model: Any) -> Any:
    """Turn on gradient checkpointing for training passes (``model.train()``) only.

    Generation runs the model in eval mode, where transformers keeps its KV cache, so the
    same model still decodes with a cache. Non-reentrant checkpoints need no input that
    requires grad, so frozen embeddings under LoRA are fine: the hook transformers adds to
    make the embeddings' output require grad is taken off again, since with it the backward
    pass runs through every layer even when only the top ones train
    (``model.lora.top_layers``).
    """
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.disable_input_require_grads()
    return model


def export_model(model: Any, tokenizer: Any, folder: str | Path) -> Path:
    """Write ``model`` (LoRA merged into a copy) and ``tokenizer`` as a Hugging Face folder."""
    import copy
    import shutil

    folder = Path(folder)
    tmp = folder.with_name(f".{folder.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    plain = copy.deepcopy(model).merge_and_unload() if hasattr(model, "merge_and_unload") \
        else model
    plain.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder
