"""Build an agent from a command-line policy spec.

Specs: ``random``, ``scripted`` or ``expert`` (model-free; the env's own expert);
``smollm2`` (the embedded model) or ``hf:PATH`` (a local Hugging Face model) on the
transformers backend; ``vllm:PATH`` (the same on an in-process vLLM engine, GPU only);
``openai:URL`` (any OpenAI-compatible server; name the model with ``model``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentgym.errors import ConfigError
from agentgym.policies.base import Policy, SamplingParams
from agentgym.policies.simple import RandomPolicy, ScriptedPolicy

if TYPE_CHECKING:  # agentgym.context imports this package
    from agentgym.context import ContextConfig

SPECS = ("random", "scripted", "expert", "smollm2", "hf:PATH", "vllm:PATH", "openai:URL")


def make_policy_backend(spec: str, *, model: str | None = None, device: str = "cpu") -> Policy:
    """The generation backend a model spec names (imports torch or aiohttp on demand)."""
    if spec in ("smollm2", "embedded") or spec.startswith("hf:"):
        from agentgym.policies.hf import TransformersPolicy

        return TransformersPolicy.load(spec.removeprefix("hf:"), device=device)
    if spec.startswith("vllm:"):
        from agentgym.policies.vllm import VLLMPolicy

        return VLLMPolicy(spec.removeprefix("vllm:"))
    if spec.startswith("openai:"):
        from agentgym.policies.openai import OpenAIPolicy

        if not model:
            raise ConfigError("an openai: policy needs the served model's name; pass --model NAME")
        return OpenAIPolicy(spec.removeprefix("openai:"), model)
    raise ConfigError(f"unknown policy {spec!r}; choose one of {', '.join(SPECS)}")


def make_agent(spec: str, *, seed: int | None = None, sampling: SamplingParams | None = None,
               context: ContextConfig | None = None, model: str | None = None,
               device: str = "cpu") -> Any:
    """An agent for :func:`agentgym.rollout.run_groups` from a policy spec."""
    from agentgym.context import ContextConfig
    from agentgym.rollout import LMAgent

    if spec == "random":
        return RandomPolicy(seed)
    if spec in ("scripted", "expert"):
        return ScriptedPolicy()
    backend = make_policy_backend(spec, model=model, device=device)
    return LMAgent(backend, context or ContextConfig(), sampling or SamplingParams(seed=seed))
