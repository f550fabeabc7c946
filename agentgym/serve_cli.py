"""The inputs of ``agentgym serve``, checked before any model loads.

Each mistake (a folder that is not a model, a port in use or out of range, a device this torch
cannot use, an address that is not this machine's) is a :class:`~agentgym.errors.ConfigError`:
the CLI prints one ``error:`` line naming the option and exits 2.
"""

from __future__ import annotations

import errno
import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentgym.errors import ConfigError, MissingExtraError
from agentgym.policies.models import ADAPTER_CONFIG, is_embedded

DTYPES = ("float32", "bfloat16", "float16")
MAX_BATCH = 4096
"""Largest --max-batch-size accepted."""
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")


def check_options(model: str, *, host: str, port: int, device: str, dtype: str,
                  max_batch_size: int) -> None:
    """Refuse inputs ``agentgym serve`` cannot serve with, naming the option and the fix.

    Raises:
        ConfigError: The first mistake found.
    """
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port must be in [0, 65535] (0 picks a free port), got {port}")
    if dtype not in DTYPES:
        raise ConfigError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if not 1 <= max_batch_size <= MAX_BATCH:
        raise ConfigError(f"--max-batch-size must be in [1, {MAX_BATCH}], got {max_batch_size}")
    check_device(device)
    check_model_folder(model)
    check_bind(host, port)


def check_device(device: str) -> None:
    """A torch device this torch can use: ``cpu``, or ``cuda[:N]``/``mps`` where available."""
    try:
        import torch
    except ImportError as exc:
        raise MissingExtraError(exc.name or "torch", "train", "agentgym serve") from exc
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError):
        raise ConfigError(f"--device {device!r} is not a torch device; use cpu, cuda or "
                          "cuda:N") from None
    if parsed.type == "cpu":
        return
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"--device {device}: this torch ({torch.__version__}) has no "
                              "usable CUDA device; use --device cpu, or install a CUDA build "
                              "of torch on a machine with a GPU")
        count = torch.cuda.device_count()
        if parsed.index is not None and parsed.index >= count:
            raise ConfigError(f"--device {device}: this machine has {count} CUDA device(s), "
                              f"cuda:0 to cuda:{count - 1}")
        return
    if parsed.type == "mps":
        if not torch.backends.mps.is_available():
            raise ConfigError(f"--device {device}: MPS is not available here; use cpu")
        return
    raise ConfigError(f"--device {device!r}: serving runs on cpu, cuda[:N] or mps")


def check_model_folder(model: str) -> None:
    """``model`` is the embedded model, a checkpoint folder or a LoRA adapter folder."""
    if is_embedded(model):
        return
    if not model:
        raise ConfigError("MODEL is empty; pass 'smollm2' or a checkpoint folder")
    folder = Path(model).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"MODEL {model!r} is not a local folder; pass the path of a saved "
                          "Hugging Face checkpoint, or 'smollm2' for the embedded model")
    if (folder / ADAPTER_CONFIG).is_file():
        return  # the adapter names its base model; loading checks that one
    config = folder / "config.json"
    if not config.is_file():
        raise ConfigError(f"{folder} is not a model folder: it has no config.json; pass the "
                          "folder a checkpoint was saved to (config.json, weights, tokenizer)")
    try:
        parsed = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{config} is not a readable JSON model config ({exc}); the "
                          "checkpoint is damaged: export or save it again") from None
    if not isinstance(parsed, dict) or "model_type" not in parsed:
        raise ConfigError(f"{config} names no model_type; it is not a transformers model "
                          "config")
    if not any((folder / name).is_file() for name in _WEIGHT_FILES):
        raise ConfigError(f"{folder} holds no weights (expected one of "
                          f"{', '.join(_WEIGHT_FILES)})")
    if not any((folder / name).is_file() for name in _TOKENIZER_FILES):
        raise ConfigError(f"{folder} holds no tokenizer (expected one of "
                          f"{', '.join(_TOKENIZER_FILES)}); save the tokenizer with the model")


def check_bind(host: str, port: int) -> None:
    """``host`` resolves to an address of this machine and ``port`` is free there."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise ConfigError(f"--host {host!r} is not an address or a name this machine can "
                          f"resolve ({exc}); use 127.0.0.1 (this machine only) or 0.0.0.0") \
            from None
    if port == 0:
        infos = infos[:1]  # a free port is picked at bind time; only the address matters
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does
            try:
                sock.bind(address)
            except OSError as exc:
                raise ConfigError(bind_error(host, port, exc)) from None


def bind_error(host: str, port: int, exc: OSError) -> str:
    """The one-line message for a failed bind."""
    if exc.errno == errno.EADDRINUSE:
        return (f"port {port} on {host} is in use (another server?); pick another with "
                "--port, or --port 0 for a free one")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return (f"not allowed to listen on port {port} (ports below 1024 need privileges); "
                "pick a port above 1023")
    if exc.errno == errno.EADDRNOTAVAIL:
        return (f"--host {host} is not an address of this machine; use 127.0.0.1 or 0.0.0.0")
    return f"cannot listen on {host}:{port}: {exc.strerror or exc}"


def load_policy(model: str, *, device: str, dtype: str, max_batch_size: int) -> Any:
    """The transformers policy for ``model``; a checkpoint that fails to load is a ConfigError.

    :func:`check_options` has accepted the inputs, so a failure here is a damaged or
    foreign checkpoint (a truncated weights file, a config transformers cannot build).
    """
    from agentgym.policies.hf import TransformersPolicy

    damaged: tuple[type[BaseException], ...] = (OSError, ValueError, KeyError, TypeError,
                                                RuntimeError)
    try:
        from safetensors import SafetensorError

        damaged = (*damaged, SafetensorError)
    except ImportError:
        pass
    try:
        return TransformersPolicy.load(model, device=device, dtype=dtype,
                                       max_batch_size=max_batch_size)
    except ConfigError:
        raise
    except damaged as exc:
        raise ConfigError(f"could not load the model in {model}: {type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else ''}; check that the "
                          "folder holds a complete checkpoint (config.json, weights, "
                          "tokenizer)") from None


async def run(policy: Any, host: str, port: int, *, model_name: str,
              on_ready: Callable[[str], None]) -> None:
    """:func:`agentgym.serve.serve`, with a failed bind reported as a ConfigError."""
    from agentgym.serve import serve

    ready = False

    def started(url: str) -> None:
        nonlocal ready
        ready = True
        on_ready(url)

    try:
        await serve(policy, host, port, model_name=model_name, on_ready=started)
    except OSError as exc:
        if ready:
            raise
        raise ConfigError(bind_error(host, port, exc)) from None
