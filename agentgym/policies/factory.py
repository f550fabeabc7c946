"""Build an agent from a command-line policy spec.

Specs: ``random``, ``scripted`` or ``expert`` (model-free; the env's own expert), or a
generation backend from :mod:`agentgym.policies.backends`: ``smollm2`` (the embedded model)
or ``hf:PATH`` (a local Hugging Face model) on transformers; ``vllm:PATH`` (a vLLM engine, on
a GPU or through vLLM's CPU build; ``vllm:smollm2`` is the embedded model); ``openai:URL``
(any OpenAI-compatible server; name the model with ``model``); or a plug-in's
``NAME:TARGET``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentgym.errors import ConfigError, did_you_mean
from agentgym.policies.backends import BackendOptions, backend_specs, build_backend, resolve
from agentgym.policies.base import Policy, SamplingParams
from agentgym.policies.simple import RandomAgent, ScriptedAgent

if TYPE_CHECKING:  # agentgym.context imports this package
    from agentgym.context import ContextConfig

MODEL_FREE = ("random", "scripted", "expert")
"""Specs of agents that need no model."""


def policy_specs() -> list[str]:
    """Every spec ``make_agent`` accepts, for help texts and error messages."""
    return [*MODEL_FREE, *backend_specs()]


def make_policy_backend(spec: str, *, model: str | None = None, device: str = "cpu",
                        dtype: str | None = None) -> Policy:
    """The generation backend a model spec names (see :mod:`agentgym.policies.backends`).

    Raises:
        ConfigError: An unknown spec (listing every accepted one) or a bad target.
    """
    try:
        resolve(spec)
    except ConfigError:
        specs = policy_specs()
        raise ConfigError(f"unknown policy {spec!r}; choose one of {', '.join(specs)}"
                          f"{did_you_mean(spec, specs)}") from None
    return build_backend(spec, options=BackendOptions(model=model, device=device, dtype=dtype))


def make_agent(spec: str, *, seed: int | None = None, sampling: SamplingParams | None = None,
               context: ContextConfig | None = None, model: str | None = None,
               device: str = "cpu", dtype: str | None = None) -> Any:
    """An agent for :func:`agentgym.rollout.run_groups` from a policy spec."""
    from agentgym.context import ContextConfig
    from agentgym.rollout import LMAgent

    if spec == "random":
        return RandomAgent(seed)
    if spec in ("scripted", "expert"):
        return ScriptedAgent()
    backend = make_policy_backend(spec, model=model, device=device, dtype=dtype)
    return LMAgent(backend, context or ContextConfig(), sampling or SamplingParams(seed=seed))
