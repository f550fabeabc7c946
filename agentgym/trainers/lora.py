"""LoRA adapters (Hu et al. 2021, arXiv:2106.09685) on the policy, wherever it runs.

A LoRA layer adds a trained low-rank update to a frozen weight W (d × k):

    h = W x + (α / r) · B A x,    A ∈ R^{r×k}, B ∈ R^{d×r}, B = 0 at the start

Only A and B train. Every place that holds a copy of the policy wraps it the same way
(:func:`with_lora`: the same :class:`~agentgym.trainers.config.LoraConfig`, so parameter
names match), and a weight sync sends only the adapters
(:func:`agentgym.trainers.checkpoint.trainable_state`):

- the embedded loop: the trained model itself generates;
- async training: the generation copy (a ``deepcopy`` of the wrapped model) gets the adapters;
- Ray: each generation worker builds its policy with :func:`lora_policy` and receives the
  adapters (a fresh worker's random adapters are overwritten by the first sync, before any
  rollout);
- FSDP: the wrapped model is sharded; only the adapters are gathered after an update.

- ``model.generation: vllm``: the adapters are written as a PEFT folder and served as a vLLM
  LoRA request (:mod:`agentgym.policies.vllm`).

Ray's vLLM generation workers are built without an adapter config, so LoRA with
``ray.generation_backend: vllm`` is refused (:func:`check_supported`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from agentgym.errors import ConfigError, MissingExtraError
from agentgym.policies.backends import BackendOptions
from agentgym.trainers.config import LoraConfig, TrainConfig


def _peft() -> Any:
    try:
        import peft
    except ImportError as exc:
        raise MissingExtraError("peft", "train", "model.lora.enabled") from exc
    return peft


def peft_config(lora: LoraConfig, num_layers: int | None = None) -> Any:
    """The ``peft.LoraConfig`` for the run's LoRA settings.

    Args:
        lora: The run's settings.
        num_layers: The model's decoder layers; needed when ``lora.top_layers`` is set.

    Raises:
        ConfigError: ``top_layers`` is more than the model has, or its count is unknown.
    """
    layers = None
    if lora.top_layers:
        if num_layers is None:
            raise ConfigError(f"model.lora.top_layers={lora.top_layers} needs the model's "
                              "decoder layer count (num_hidden_layers in its config.json), "
                              "which this model does not give; use model.lora.top_layers=0")
        if lora.top_layers > num_layers:
            raise ConfigError(f"model.lora.top_layers={lora.top_layers}, but the model has "
                              f"{num_layers} decoder layers; use at most that many, or 0 for "
                              "every layer")
        layers = list(range(num_layers - lora.top_layers, num_layers))
    return _peft().LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                              target_modules=list(lora.target_modules),
                              layers_to_transform=layers, task_type="CAUSAL_LM")


def with_lora(model: Any, lora: LoraConfig) -> Any:
    """``model`` wrapped by peft with trainable adapters (the base weights frozen).

    Raises:
        ConfigError: A target module name matches no module of the model, or
            ``lora.top_layers`` does not fit it (:func:`peft_config`).
    """
    names = [name for name, _ in model.named_modules()]
    check_targets(lora, names, "the model")
    try:
        layers = getattr(model.config, "num_hidden_layers", None)
        return _peft().get_peft_model(model, peft_config(lora, layers))
    except ValueError as exc:  # e.g. a target that is no layer peft can adapt
        raise ConfigError(f"model.lora.target_modules {list(lora.target_modules)}: {exc}; "
                          "name linear layers such as q_proj, v_proj") from None


def check_targets(lora: LoraConfig, module_names: Iterable[str], model: str) -> None:
    """Refuse target module names that match no module (peft would skip them silently).

    A target matches a module whose dotted name is it or ends with ``.<target>``, as peft
    matches them.

    Raises:
        ConfigError: Naming the unmatched targets and the model's own leaf names.
    """
    names = set(module_names)
    missing = [t for t in lora.target_modules
               if t not in names and not any(n.endswith(f".{t}") for n in names)]
    if missing:  # the leaf modules' own names: what a target usually is
        layers = sorted({n.rsplit(".", 1)[-1] for n in names
                         if n and not any(m.startswith(f"{n}.") for m in names)})
        raise ConfigError(f"model.lora.target_modules {missing} match no module of {model}; "
                          f"its module names include {layers[:24]}; e.g. "
                          "model.lora.target_modules=[q_proj, v_proj]")


def check_supported(config: TrainConfig) -> None:
    """Refuse the LoRA combinations whose generation side cannot take adapter syncs.

    Raises:
        ConfigError: LoRA with vLLM generation workers.
    """
    if config.model.lora.enabled and config.engine == "ray" \
            and config.ray.generation_backend == "vllm":
        raise ConfigError(
            "model.lora.enabled with ray.generation_backend=vllm is not supported: Ray's vLLM "
            "workers are built without an adapter config, so they could not take the adapter "
            "syncs; use ray.generation_backend=transformers, engine=local with "
            "model.generation=vllm (adapters synced as vLLM LoRA requests), or train every "
            "weight (model.lora.enabled=false)")


def merged_state(model: Any) -> dict[str, Any]:
    """The full weights with the adapters' deltas added, named as the base model's.

    For a generator that runs LoRA slowly (vLLM's CPU build: 7x fewer tokens/s with adapters,
    docs/vllm.md): it receives merged weights instead. The model is not touched (merging in
    place and unmerging would round the base weights a little more at every step).
    """
    import torch
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    adapted = {name: module for name, module in base.named_modules()
               if isinstance(module, LoraLayer)}
    out = {}
    with torch.no_grad():  # no graph: the sums are sent, never differentiated
        for name, param in base.named_parameters():
            if "lora_" in name:
                continue
            clean = name.replace(".base_layer.", ".")
            owner, _, leaf = clean.rpartition(".")
            tensor = param.detach()
            if leaf == "weight" and owner in adapted:
                # each delta made where it is added and dropped at once: all of them first
                # would be another copy of the adapted weights in memory.
                # LoraLayer's subclasses (Linear, Embedding, ...) define get_delta_weight
                module = cast(Any, adapted[owner])
                for adapter in module.active_adapters:
                    tensor = tensor + module.get_delta_weight(adapter)
            out[clean] = tensor.contiguous().cpu()
    return out


def lora_policy(model_path: str, lora: LoraConfig, options: BackendOptions) -> Any:
    """A transformers policy whose model carries (untrained) adapters named as the trainer's.

    A module-level function, so that ``functools.partial`` of it travels to Ray workers.
    """
    from agentgym.policies.hf import TransformersPolicy
    from agentgym.trainers.models import load_trained_model  # imports this module

    model, tokenizer = load_trained_model(model_path, device=options.device,
                                          dtype=options.dtype or "float32")
    return TransformersPolicy(with_lora(model, lora).eval(), tokenizer,
                              max_batch_size=options.max_batch_size, seed=options.seed)
