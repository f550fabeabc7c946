"""The generation-backend registry: one entry per ``NAME:TARGET`` policy spec.

    >>> from agentgym.policies.backends import backend_names
    >>> {"hf", "vllm", "openai"} <= set(backend_names())
    True

A backend registers a builder ``build(target, options) -> Policy`` under a name; the spec
``NAME:TARGET`` (``hf:./my-model``, ``openai:http://127.0.0.1:8000/v1``) then builds it, in
``agentgym rollout/eval --policy``, in Ray generation workers and in the trainer. An alias
(``smollm2``) stands for a whole spec. Adding a backend is one file that calls
:func:`register_backend` (other packages: the entry-point group ``agentgym.backends``);
nothing else lists backends. Builders import their heavy dependencies when called, so this
module imports neither torch nor aiohttp.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

from agentgym.errors import ConfigError, did_you_mean
from agentgym.policies.base import Policy


@dataclass(frozen=True)
class BackendOptions:
    """Settings a builder may read (each ignores what does not apply to it)."""

    model: str | None = None
    """The served model's name (OpenAI-compatible servers)."""
    device: str = "cpu"
    """Torch device (in-process backends)."""
    dtype: str | None = None
    """Weights dtype (in-process backends); None = the backend's default."""
    max_batch_size: int = 64
    """Most requests decoded together (transformers)."""
    seed: int | None = None
    """Sampling seed of the backend's generator, where it has one."""


Builder = Callable[[str, BackendOptions], Policy]


@dataclass(frozen=True)
class BackendInfo:
    """A registered backend."""

    name: str
    """The spec prefix (``NAME:TARGET``)."""
    build: Builder
    """Builds the policy from the target and options."""
    target: str
    """What follows the colon, for help texts (``PATH``, ``URL``)."""
    summary: str
    """One line for ``--help``."""
    trainable: bool
    """Whether it implements :class:`~agentgym.policies.base.TrainablePolicy` (the trainer
    can push weights into it)."""


_BACKENDS: dict[str, BackendInfo] = {}
_ALIASES: dict[str, str] = {}
_PLUGINS_LOADED = False


def register_backend(name: str, build: Builder, *, target: str, summary: str,
                     trainable: bool, aliases: dict[str, str] | None = None) -> None:
    """Register a generation backend.

    Args:
        name: Spec prefix; ``NAME:TARGET`` builds it.
        build: ``build(target, options) -> Policy``.
        target: What the target is, for help (``PATH``, ``URL``).
        summary: One line for ``--help``.
        trainable: Whether it accepts weight updates (``update_weights``).
        aliases: Whole specs this backend answers to, e.g. ``{"smollm2": "hf:smollm2"}``.

    Raises:
        ConfigError: ``name`` (or an alias) is taken by another backend, or holds a colon.
    """
    if ":" in name or not name:
        raise ConfigError(f"a backend name is a non-empty word without ':', got {name!r}")
    old = _BACKENDS.get(name)
    if old is not None and old.build is not build:
        warnings.warn(f"backend {name!r} registered again; the new builder "
                      f"{getattr(build, '__qualname__', build)!r} replaces the old one",
                      stacklevel=2)
    _BACKENDS[name] = BackendInfo(name, build, target, summary, trainable)
    for alias, spec in (aliases or {}).items():
        _ALIASES[alias] = spec


def backend_names() -> list[str]:
    """Registered backend names, sorted."""
    _load_plugins()
    return sorted(_BACKENDS)


def backend_specs() -> list[str]:
    """Every accepted spec form (``hf:PATH``, aliases), for help texts."""
    _load_plugins()
    return [*sorted(_ALIASES), *(f"{n}:{_BACKENDS[n].target}" for n in sorted(_BACKENDS))]


def resolve(spec: str) -> tuple[BackendInfo, str]:
    """The backend and target a spec names (aliases expanded).

    Raises:
        ConfigError: No backend of that name (with a did-you-mean).
    """
    _load_plugins()
    spec = _ALIASES.get(spec, spec)
    name, sep, target = spec.partition(":")
    if not sep or name not in _BACKENDS:
        known = [*_ALIASES, *_BACKENDS]
        raise ConfigError(f"unknown policy {spec!r}; choose one of "
                          f"{', '.join(backend_specs())}{did_you_mean(name, known)}")
    return _BACKENDS[name], target


def build_backend(spec: str, *, options: BackendOptions | None = None) -> Policy:
    """Build the generation backend ``spec`` names (``hf:PATH``, ``smollm2``, ...).

    Raises:
        ConfigError: An unknown backend, or a target the backend rejects.
    """
    info, target = resolve(spec)
    return info.build(target, options or BackendOptions())


def _load_plugins() -> None:
    """Register the ``agentgym.backends`` entry points once."""
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED = True
    from importlib.metadata import entry_points

    for ep in entry_points(group="agentgym.backends"):
        try:
            ep.load()
        except Exception as exc:  # a broken plug-in must not hide the built-in backends
            warnings.warn(f"backend plug-in {ep.name!r} ({ep.value}) failed to load: {exc!r}",
                          stacklevel=2)


# -- the built-in backends (their modules import torch / vllm / aiohttp on use) ----------

def _transformers(target: str, o: BackendOptions) -> Policy:
    from agentgym.policies.hf import TransformersPolicy

    return TransformersPolicy.load(target or "smollm2", device=o.device,
                                   dtype=o.dtype or "float32", max_batch_size=o.max_batch_size,
                                   seed=o.seed)


def _vllm(target: str, o: BackendOptions) -> Policy:
    from agentgym.policies.models import embedded_model_dir
    from agentgym.policies.vllm import VLLMPolicy

    folder = str(embedded_model_dir()) if target in ("smollm2", "embedded", "") else target
    return VLLMPolicy(folder, dtype=o.dtype or "float32", seed=o.seed or 0,
                      max_num_seqs=o.max_batch_size)


def _llamacpp(target: str, o: BackendOptions) -> Policy:
    from agentgym.policies.llamacpp import LlamaCppPolicy
    from agentgym.policies.models import embedded_model_dir

    folder = str(embedded_model_dir()) if target in ("smollm2", "embedded", "") else target
    return LlamaCppPolicy(folder, dtype=o.dtype or "float32", seed=o.seed or 0,
                          max_num_seqs=min(o.max_batch_size, 16))


def _openai(target: str, o: BackendOptions) -> Policy:
    from agentgym.policies.openai import OpenAIPolicy

    if not o.model:
        raise ConfigError("an openai: policy needs the served model's name; pass --model NAME")
    return OpenAIPolicy(target, o.model)


register_backend("hf", _transformers, target="PATH", trainable=True,
                 summary="a local Hugging Face model on transformers (in-process)",
                 aliases={"smollm2": "hf:smollm2", "embedded": "hf:smollm2"})
register_backend("vllm", _vllm, target="PATH", trainable=True,
                 summary="a local model (or smollm2) on a vLLM engine (GPU, or vLLM's CPU build)")
register_backend("llamacpp", _llamacpp, target="PATH", trainable=True,
                 summary="a local Llama-family model (or smollm2) on a llama.cpp server (CPU)")
register_backend("openai", _openai, target="URL", trainable=False,
                 summary="any OpenAI-compatible server (name the model with --model)")
