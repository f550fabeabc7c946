"""A command's file and model inputs, checked before any model loads.

``eval``, ``rollout``, ``train``, ``sft`` and ``export`` read model folders and write into
folders the user names. Each mistake here is a :class:`~agentgym.errors.ConfigError` whose
message names the option (``what``), what was expected and the fix; the CLI prints it as
one ``error:`` line. The checks read headers only (a few KB), never weights.

- :func:`check_output_dir` / :func:`check_output_file`: the path can be created and written
  (no regular file in the way, no file where a folder is due, a writable parent);
- :func:`check_safetensors`: a ``.safetensors`` file is whole (its header parses and its
  tensors end where the file ends: a copy cut short is caught here, not mid-load);
- :func:`check_model_folder`: a Hugging Face model or PEFT adapter folder, or ``smollm2``;
- :func:`check_policy_spec`: the model folder that an ``hf:PATH``/``vllm:PATH`` spec names;
- :func:`check_device`: a torch device this torch can use.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

from agentgym.errors import ConfigError, MissingExtraError

MODEL_CONFIG = "config.json"
ADAPTER_CONFIG = "adapter_config.json"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
EMBEDDED = ("smollm2", "embedded")
_HEADER_LIMIT = 100_000_000
"""Largest safetensors JSON header read (the format's own limit)."""


def _existing_ancestor(path: Path, what: str) -> Path:
    """The nearest part of ``path`` that exists; every existing part must be a folder."""
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"{what} {str(path)!r} lies under {str(parent)!r}, which is a "
                                  "file, not a folder; pass a path under a folder")
            return parent
    return Path("/")


def check_output_dir(path: str | os.PathLike[str], what: str) -> None:
    """``path`` is a folder, or can be made one: no file in its place or on its way.

    Raises:
        ConfigError: ``path`` is a file, lies under a file, or its parent is not writable.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{what} {str(path)!r} is a file; expected a folder (or a path to "
                          "create one at): pass another path")
    _check_writable(path if path.is_dir() else _existing_ancestor(path, what), path, what)


def check_output_file(path: str | os.PathLike[str], what: str) -> None:
    """``path`` is a file, or can be made one: no folder in its place, no file on its way.

    Raises:
        ConfigError: ``path`` is a folder, lies under a file, or cannot be written.
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{what} {str(path)!r} is a directory; expected a file path")
    _check_writable(_existing_ancestor(path, what), path, what)


def _check_writable(folder: Path, path: Path, what: str) -> None:
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{what} {str(path)!r}: the folder {str(folder)!r} is not writable "
                          "by this user; pass a path under a folder you can write")


def check_safetensors(path: str | os.PathLike[str], what: str = "",
                      fix: str = "save or copy it again") -> list[str]:
    """The tensor names of a whole ``.safetensors`` file (its header only is read).

    Raises:
        ConfigError: The file is missing, cut short, or not safetensors: ``what`` (the option
            it came from), the file, what is wrong, then ``fix``.
    """
    path = Path(path)
    where = f"{what}: " if what else ""

    def damaged(why: str) -> ConfigError:
        return ConfigError(f"{where}{path} is damaged ({why}); expected a whole safetensors "
                           f"file: {fix}")

    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            length = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
            text = f.read(length) if 0 < length <= min(_HEADER_LIMIT, size - 8) else None
    except FileNotFoundError:
        raise ConfigError(f"{where}{path} is missing; expected a safetensors file: "
                          f"{fix}") from None
    if text is None:
        raise damaged(f"{size:,} bytes, shorter than its header" if length >= 0
                      else f"{size} bytes, no header")
    try:
        header = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise damaged("its header is not JSON") from None
    if not isinstance(header, dict):
        raise damaged("its header is not a JSON object")
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2
                and all(type(x) is int for x in offsets)):
            raise damaged(f"tensor {name!r} has no data offsets")
        end = max(end, offsets[1])
    if 8 + length + end != size:
        raise damaged(f"{size:,} bytes where its header says {8 + length + end:,}: "
                      + ("cut short" if size < 8 + length + end else "bytes past its end"))
    return [n for n in header if n != "__metadata__"]


def check_model_folder(path: str | os.PathLike[str], what: str) -> None:
    """``path`` is ``smollm2``, a Hugging Face model folder or a PEFT adapter folder.

    A model folder holds ``config.json`` (naming a ``model_type``), weights and a tokenizer;
    its ``.safetensors`` files must be whole. An adapter folder holds ``adapter_config.json``
    and adapter weights (its base model is checked when it loads).

    Raises:
        ConfigError: Naming ``what`` (the option), the folder and what it lacks.
    """
    if str(path).lower() in EMBEDDED:
        return
    if not str(path):
        raise ConfigError(f"{what} is empty; pass 'smollm2' or a model folder")
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"{what} {str(path)!r} is not a local folder; pass the folder a "
                          "Hugging Face model was saved to, or 'smollm2' for the embedded model")
    if (folder / ADAPTER_CONFIG).is_file():
        _json_object(folder / ADAPTER_CONFIG, what)
        _needs(folder, ADAPTER_WEIGHTS, "adapter weights", what)
        return
    if not (folder / MODEL_CONFIG).is_file():
        raise ConfigError(f"{what} {str(path)!r} is not a model folder: it has no "
                          f"{MODEL_CONFIG}; pass the folder a model was saved to (config.json, "
                          "weights, tokenizer), e.g. one written by agentgym export")
    if "model_type" not in _json_object(folder / MODEL_CONFIG, what):
        raise ConfigError(f"{what}: {folder / MODEL_CONFIG} names no model_type; it is not "
                          "a transformers model config")
    _needs(folder, WEIGHT_FILES, "weights", what)
    _needs(folder, TOKENIZER_FILES, "tokenizer", what)
    for weights in sorted(folder.glob("*.safetensors")):
        check_safetensors(weights, what)


def _json_object(path: Path, what: str) -> dict[str, object]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ConfigError(f"{what}: {path} is not valid JSON ({exc}); the folder is damaged: "
                          "save or export it again") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{what}: {path} must hold a JSON object, got "
                          f"{type(data).__name__}")
    return data


def _needs(folder: Path, names: tuple[str, ...], kind: str, what: str) -> None:
    if not any((folder / name).is_file() for name in names):
        raise ConfigError(f"{what}: {folder} holds no {kind} (expected one of "
                          f"{', '.join(names)}); save the model and its tokenizer to one folder")


def check_policy_spec(spec: str, what: str = "--policy") -> None:
    """A policy spec that names a known policy, and for ``hf:``/``vllm:`` a model folder.

    Raises:
        ConfigError: An unknown spec (listing the accepted ones), or a spec whose folder is
            not a model (:func:`check_model_folder`).
    """
    from agentgym.policies.backends import resolve
    from agentgym.policies.factory import MODEL_FREE, policy_specs

    if spec in MODEL_FREE:
        return
    try:
        info, target = resolve(spec)
    except ConfigError:
        raise ConfigError(f"{what}: unknown policy {spec!r}; choose one of "
                          f"{', '.join(policy_specs())}") from None
    if info.name in ("hf", "vllm"):
        check_model_folder(target, f"{what} {spec}")


def check_device(device: str, what: str) -> None:
    """A torch device this torch can use: ``cpu``, or ``cuda[:N]``/``mps`` where available.

    Raises:
        ConfigError: Not a device name, or a device this machine or torch build lacks.
        MissingExtraError: torch is not installed (for a device other than cpu).
    """
    if device == "cpu":
        return  # no torch import for the common case
    try:
        import torch
    except ImportError as exc:
        raise MissingExtraError("torch", "train", f"{what} {device}") from exc
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError):
        raise ConfigError(f"{what} {device!r} is not a torch device; use cpu, cuda or "
                          "cuda:N") from None
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"{what} {device}: this torch ({torch.__version__}) has no usable "
                              "CUDA device; use cpu, or a CUDA build of torch on a GPU machine")
        count = torch.cuda.device_count()
        if parsed.index is not None and parsed.index >= count:
            raise ConfigError(f"{what} {device}: this machine has {count} CUDA device(s), "
                              f"cuda:0 to cuda:{count - 1}")
    elif parsed.type == "mps":
        if not torch.backends.mps.is_available():
            raise ConfigError(f"{what} {device}: MPS is not available here; use cpu")
    elif parsed.type != "cpu":
        raise ConfigError(f"{what} {device!r}: expected cpu, cuda[:N] or mps")
