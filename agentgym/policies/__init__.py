"""Policies: model-free agents, the generation protocol and model backends.

Backends import their heavy dependencies on use: ``agentgym.policies.hf`` (transformers,
``[train]``), ``agentgym.policies.openai`` (aiohttp), ``agentgym.policies.vllm`` (``[vllm]``).
"""

from agentgym.policies.base import Completion, GenerationRequest, Policy, SamplingParams
from agentgym.policies.factory import make_agent, make_policy_backend
from agentgym.policies.simple import RandomPolicy, ScriptedPolicy

__all__ = ["Completion", "GenerationRequest", "Policy", "RandomPolicy", "SamplingParams",
           "ScriptedPolicy", "make_agent", "make_policy_backend"]
