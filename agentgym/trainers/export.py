"""Export a training run's checkpoint as a folder that other tools load.

``agentgym export RUN_DIR --out DIR`` reads the run's ``config.yaml`` and one checkpoint
(the newest, or ``--step N``), rebuilds the policy as the run built it (base model, LoRA
settings, dtype) and writes:

- a full run: a Hugging Face model folder (``model.safetensors``, ``config.json``,
  ``generation_config.json``, the tokenizer files and its chat template), which
  ``transformers.AutoModelForCausalLM.from_pretrained``, vLLM and ``agentgym serve`` load;
- a LoRA run: a PEFT adapter folder (``adapter_model.safetensors``, ``adapter_config.json``
  naming the base model's folder, the tokenizer), which ``peft.PeftModel.from_pretrained``
  and ``agentgym serve`` load; with ``merge=True``, the adapters merged into a full model
  folder instead.

Every folder also gets ``agentgym-export.json`` (the run, step and checkpoint it came from).
The run folder is only read; the output is written to a temporary folder beside it and
renamed into place, and an existing non-empty output folder is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from agentgym.errors import ConfigError
from agentgym.evaluation.inputs import check_output_dir
from agentgym.trainers import checkpoint
from agentgym.trainers.config import ModelConfig, from_dict, load_config, read_config_file
from agentgym.trainers.models import is_checkpoint, load_trained_model
from agentgym.trainers.preflight import check_model

MARKER = "agentgym-export.json"


@dataclass(frozen=True)
class Export:
    """What :func:`export_run` wrote.

    Attributes:
        out: The output folder.
        kind: ``model`` (a full Hugging Face model folder) or ``adapter`` (a PEFT folder).
        step: The training step of the exported checkpoint.
        checkpoint: The checkpoint folder read.
        base: The base model folder (the one an adapter folder needs).
    """

    out: Path
    kind: Literal["model", "adapter"]
    step: int
    checkpoint: Path
    base: str


def find_checkpoint(run_dir: Path, step: int | None = None) -> Path:
    """The newest complete checkpoint of the run, or the one of ``step``.

    Raises:
        ConfigError: The run has no complete checkpoint, or none of that step.
    """
    done = checkpoint.complete(Path(run_dir))
    if not done:
        raise ConfigError(f"{run_dir} holds no complete checkpoint (checkpoints/step-N with "
                          "state.json); train longer or set save_every so that one is saved")
    if step is None:
        return done[-1]
    chosen = Path(run_dir) / "checkpoints" / f"step-{step:06d}"
    if chosen not in done:
        steps = [int(p.name.removeprefix("step-")) for p in done]
        raise ConfigError(f"--step {step}: {run_dir} has no complete checkpoint of that step; "
                          f"it has steps {steps} (a run keeps its newest `keep` checkpoints)")
    return chosen


def _check_out(run_dir: Path, out: Path) -> None:
    check_output_dir(out, "--out")  # no file in the way, a parent this user can write
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--out {str(out)!r} exists and is not an empty folder; export never "
                          "overwrites: pass a new folder")
    run, target = run_dir.resolve(), out.resolve()
    if target == run or run in target.parents:
        raise ConfigError(f"--out {str(out)!r} is inside the run folder {str(run_dir)!r}; "
                          "export only reads the run: pass a folder outside it")


def export_run(run_dir: str | os.PathLike[str], out: str | os.PathLike[str], *,
               step: int | None = None, merge: bool = False, base: str | None = None) -> Export:
    """Write the run's checkpoint as a model or adapter folder (module docstring).

    Args:
        run_dir: The run folder of ``agentgym train`` or ``agentgym sft`` (holds
            ``config.yaml`` and checkpoints).
        out: The folder to create; must not exist, or be empty.
        step: The checkpoint's step (default: the newest).
        merge: For a LoRA run, merge the adapters into a full model folder.
        base: The base model (default: the run's ``model.path``), e.g. when the run was
            trained on another machine.

    Returns:
        What was written.

    Raises:
        ConfigError: Not a run folder, no such checkpoint, an output that exists or lies
            inside the run, ``merge`` for a full run, or a base model that does not match.
    """
    run_dir, out = Path(run_dir), Path(out)
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"{str(run_dir)!r} is not a training run folder (no config.yaml); "
                          "pass the run_dir that `agentgym train` or `agentgym sft` wrote")
    _check_out(run_dir, out)
    model_config = _run_model(run_dir / "config.yaml")
    lora = model_config.lora.enabled
    if merge and not lora:
        raise ConfigError("--merge merges LoRA adapters, and this run trained every weight; "
                          "leave --merge out (the export is already a full model)")
    found = find_checkpoint(run_dir, step)
    state = checkpoint.check_checkpoint(found)  # state.json and weights whole, before loading
    base_path = base or model_config.path
    if lora and not merge and is_checkpoint(base_path):
        raise ConfigError(
            f"the run's base model {base_path!r} is a checkpoint of another run, which an "
            "adapter folder cannot name as its base; pass --merge for a full model, or export "
            "that run first (agentgym export) and name its folder with --base")
    try:
        check_model(replace(model_config, path=base_path),
                    "--base" if base else f"the run's base model (model.path of "
                    f"{run_dir / 'config.yaml'})", device=False)
    except ConfigError as exc:
        if base:
            raise
        raise ConfigError(f"{exc}; if the run was trained elsewhere, pass the base model's "
                          "folder here with --base PATH") from None
    model, tokenizer, base_dir = _load_base(base_path, model_config.dtype)
    if lora:
        from agentgym.trainers.lora import with_lora

        model = with_lora(model, model_config.lora)
    try:
        checkpoint.load_weights(found, model)
    except ValueError as exc:
        raise ConfigError(f"{exc} (base model {base_path!r})") from exc
    kind: Literal["model", "adapter"] = "adapter" if lora and not merge else "model"
    if lora and merge:
        model = model.merge_and_unload()
    elif lora:  # the adapter folder names its base by an absolute path (no hub here)
        model.peft_config["default"].base_model_name_or_path = str(base_dir)
    result = Export(out, kind, state.step, found, str(base_dir))
    _write(out, model, tokenizer, result, run_dir)
    return result


def _run_model(path: Path) -> ModelConfig:
    """The model section of an ``agentgym sft`` run (its config has ``data:``) or a train run.

    Both keep checkpoints of one format, so either exports alike; only the model section is
    read, so demonstrations moved since do not matter.
    """
    data = read_config_file(path, "the run_dir of agentgym train or sft",
                            "and pass the run_dir that `agentgym train` or `agentgym sft` wrote")
    try:
        if "data" in data:
            return from_dict(ModelConfig, data.get("model") or {}, "model")
        return load_config(path).model
    except ConfigError as exc:
        raise ConfigError(f"{path} is not a run config agentgym can read ({exc}); pass the "
                          "run_dir of `agentgym train` or `agentgym sft`") from None


def _load_base(path: str, dtype: str) -> tuple[Any, Any, Path]:
    from agentgym.policies.models import embedded_model_dir, is_embedded

    try:  # a model folder, smollm2, or (as in train) a checkpoint of an earlier run
        model, tokenizer = load_trained_model(path, dtype=dtype)
    except ConfigError as exc:
        raise ConfigError(f"the run's base model cannot be loaded: {exc}; pass its folder "
                          "with --base PATH") from exc
    folder = embedded_model_dir() if is_embedded(path) else Path(path).expanduser().resolve()
    return model, tokenizer, folder


def _write(out: Path, model: Any, tokenizer: Any, result: Export, run_dir: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        model.save_pretrained(tmp)  # safetensors
        tokenizer.padding_side = "right"  # what generic loaders expect; agentgym re-pads
        tokenizer.save_pretrained(tmp)
        (tmp / MARKER).write_text(json.dumps({
            "kind": result.kind, "step": result.step, "run_dir": str(run_dir.resolve()),
            "checkpoint": str(result.checkpoint.resolve()), "base_model": result.base},
            indent=2) + "\n")
        if out.exists():
            out.rmdir()  # empty (checked before): the rename needs it gone
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
