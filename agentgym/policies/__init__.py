"""Policies: model-free agents, the generation protocol and model backends.

Generation backends are registered in :mod:`agentgym.policies.backends` (``NAME:TARGET``).

Backends import their heavy dependencies on use: ``agentgym.policies.hf`` (transformers,
``[train]``), ``agentgym.policies.openai`` (aiohttp), ``agentgym.policies.vllm`` (``[vllm]``).
"""

from agentgym.policies.backends import BackendOptions, register_backend
from agentgym.policies.base import (
    Completion,
    GenerationRequest,
    Policy,
    SamplingParams,
    TrainablePolicy,
)
from agentgym.policies.factory import make_agent, make_policy_backend
from agentgym.policies.simple import RandomAgent, RandomPolicy, ScriptedAgent, ScriptedPolicy

__all__ = ["BackendOptions", "Completion", "GenerationRequest", "Policy", "RandomAgent",
           "RandomPolicy", "SamplingParams", "ScriptedAgent", "ScriptedPolicy",
           "TrainablePolicy", "make_agent", "make_policy_backend", "register_backend"]
