"""Write a Hugging Face Llama-family model as a GGUF file, the format llama.cpp loads.

The llama.cpp backend (:mod:`agentgym.policies.llamacpp`) serves a model folder's weights
and, after each update, the trainer's. Both come through here: the folder's
``config.json`` and ``tokenizer.json`` give the metadata, the tensors come from its
safetensors files or from the trainer. Names follow llama.cpp's for its ``llama``
architecture; the query and key projections are permuted from Hugging Face's rotary layout
(rotate-half) to llama.cpp's (pairs interleaved), as llama.cpp's own converter does. The
tensors are written one at a time, so a sync never holds a second copy of the model.

Only ``LlamaForCausalLM`` (SmolLM2, Llama) is written; another architecture is refused.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentgym.errors import ConfigError, MissingExtraError

GGUF_TYPES = {"float32": 0, "float16": 1}
"""Weights dtypes written, as llama.cpp's ``general.file_type`` numbers them."""

_LAYER = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
          "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
          "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
          "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def read_config(folder: str | Path) -> dict[str, Any]:
    """The folder's ``config.json``, refused unless llama.cpp's ``llama`` architecture takes it."""
    path = Path(folder, "config.json")
    if not path.is_file():
        raise ConfigError(f"the llama.cpp backend needs a local model folder with a "
                          f"config.json; {str(folder)!r} is not one (the embedded model: "
                          "llamacpp:smollm2)")
    config = json.loads(path.read_text())
    if config.get("model_type") != "llama" or config.get("attention_bias") \
            or config.get("mlp_bias"):
        raise ConfigError(f"the llama.cpp backend writes Llama-family models without biases "
                          f"(SmolLM2, Llama); {str(folder)!r} is model_type "
                          f"{config.get('model_type')!r}: use vllm:PATH or hf:PATH for it")
    return config


@dataclass(frozen=True)
class StoredTensor:
    """A weight in a safetensors file, read only when written (its shape is known before)."""

    file: Path
    name: str
    shape: tuple[int, ...]

    def load(self) -> Any:
        """The tensor, read from its file."""
        from safetensors import safe_open

        with safe_open(str(self.file), framework="pt") as f:
            return f.get_tensor(self.name)


def folder_tensors(folder: str | Path) -> list[tuple[str, StoredTensor]]:
    """The folder's weights (every ``*.safetensors`` file), each read only when written."""
    from safetensors import safe_open

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise ConfigError(f"{str(folder)!r} has no *.safetensors weights to serve")
    out = []
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                out.append((name, StoredTensor(file, name, tuple(f.get_slice(name).get_shape()))))
    return out


def write_gguf(folder: str | Path, tensors: Iterable[tuple[str, Any]], out: str | Path, *,
               dtype: str = "float32") -> Path:
    """Write ``tensors`` (Hugging Face names) as a GGUF file with ``folder``'s metadata.

    One tensor is converted at a time, so writing holds no second copy of the model.

    Args:
        folder: The model folder (config and tokenizer).
        tensors: Every weight, named as in the model's ``state_dict``: torch tensors, arrays
            or :class:`StoredTensor`; a tied output layer is left out (llama.cpp ties it to
            the embeddings itself).
        out: The file to write.
        dtype: Weights dtype of the matrices (``float32`` or ``float16``); norms stay float32.

    Raises:
        ConfigError: Another architecture, a dtype llama.cpp is not given here, or a weight
            of a name the ``llama`` architecture lacks, or one left out.
    """
    try:
        import gguf
    except ImportError as exc:
        raise MissingExtraError("gguf", "llamacpp", "The llama.cpp backend") from exc
    if dtype not in GGUF_TYPES:
        raise ConfigError(f"the llama.cpp backend writes weights as {sorted(GGUF_TYPES)}, "
                          f"not {dtype!r}")
    config = read_config(folder)
    plan = [(target, name, tuple(tensor.shape), tensor) for name, tensor in tensors
            if (target := _target(config, name)) is not None]
    expected = 2 + 9 * config["num_hidden_layers"] + (not config.get("tie_word_embeddings"))
    if len(plan) != expected:
        raise ConfigError(f"a full set of weights has {expected} tensors; got {len(plan)} "
                          "(a sync to llama.cpp sends every weight, LoRA merged in)")
    matrix = np.dtype(np.float32 if dtype == "float32" else np.float16)
    writer = gguf.GGUFWriter(str(out), "llama")
    _metadata(writer, config, Path(folder), GGUF_TYPES[dtype])
    for target, _, shape, _ in plan:
        kind = np.dtype(np.float32) if len(shape) == 1 else matrix
        writer.add_tensor_info(target, shape, kind, math.prod(shape) * kind.itemsize)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, name, _, tensor in plan:
        writer.write_tensor_data(_array(config, name, tensor, matrix))
    writer.close()
    return Path(out)


def _target(config: dict[str, Any], name: str) -> str | None:
    """llama.cpp's name for a weight; None for a tied output layer."""
    if name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if name == "model.norm.weight":
        return "output_norm.weight"
    if name == "lm_head.weight":
        return None if config.get("tie_word_embeddings") else "output.weight"
    parts = name.split(".")
    module = ".".join(parts[3:-1])
    if parts[:2] != ["model", "layers"] or module not in _LAYER:
        raise ConfigError(f"weight {name!r} has no place in llama.cpp's llama architecture")
    return f"blk.{parts[2]}.{_LAYER[module]}.weight"


def _array(config: dict[str, Any], name: str, tensor: Any, matrix: np.dtype) -> np.ndarray:
    """One weight as written: float32 (a matrix in ``matrix``), rotary rows interleaved."""
    if isinstance(tensor, StoredTensor):
        tensor = tensor.load()
    array = tensor.detach().float().cpu().numpy() if hasattr(tensor, "detach") \
        else np.asarray(tensor, dtype=np.float32)
    if name.endswith("self_attn.q_proj.weight"):
        array = _interleave_rotary(array, config["num_attention_heads"])
    elif name.endswith("self_attn.k_proj.weight"):
        array = _interleave_rotary(array, config["num_key_value_heads"])
    return array if array.ndim == 1 else np.ascontiguousarray(array, dtype=matrix)


def _interleave_rotary(weight: np.ndarray, heads: int) -> np.ndarray:
    """Rows of each head from rotate-half order (x0..x31, y0..y31) to pairs (x0, y0, ...)."""
    half = weight.shape[0] // heads // 2
    return np.ascontiguousarray(weight.reshape(heads, 2, half, *weight.shape[1:])
                                .swapaxes(1, 2).reshape(weight.shape))


def _metadata(writer: Any, config: dict[str, Any], folder: Path, file_type: int) -> None:
    heads = config["num_attention_heads"]
    rope = (config.get("rope_parameters") or {}).get("rope_theta",
                                                      config.get("rope_theta", 10000.0))
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_rope_freq_base(float(rope))
    writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    writer.add_vocab_size(config["vocab_size"])
    writer.add_rope_dimension_count(config.get("head_dim", config["hidden_size"] // heads))
    writer.add_file_type(file_type)
    tokens, types, merges = _vocabulary(folder, config["vocab_size"])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")  # text is never tokenized there: prompts go as ids
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    for key, add in (("bos_token_id", writer.add_bos_token_id),
                     ("eos_token_id", writer.add_eos_token_id)):
        value = config.get(key)
        if isinstance(value, list):
            value = value[0]
        if value is not None:
            add(int(value))
    writer.add_add_bos_token(False)


def _vocabulary(folder: Path, size: int) -> tuple[list[str], list[int], list[str]]:
    """Tokens, their llama.cpp types and BPE merges, from the folder's ``tokenizer.json``."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise ConfigError(f"the llama.cpp backend reads the vocabulary from tokenizer.json; "
                          f"{str(folder)!r} has none")
    spec = json.loads(path.read_text())
    model = spec.get("model") or {}
    if model.get("type") != "BPE":
        raise ConfigError(f"the llama.cpp backend writes byte-level BPE vocabularies; "
                          f"{str(folder)!r} has a {model.get('type')!r} tokenizer")
    normal, control, user, unused = 1, 3, 4, 5  # llama.cpp's token types
    tokens, types = [""] * size, [normal] * size
    for token, index in model["vocab"].items():
        if index < size:
            tokens[index] = token
    for added in spec.get("added_tokens", []):
        if added["id"] < size:
            tokens[added["id"]] = added["content"]
            types[added["id"]] = control if added.get("special") else user
    for index, token in enumerate(tokens):
        if not token:
            tokens[index], types[index] = f"[PAD{index}]", unused
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return tokens, types, merges
