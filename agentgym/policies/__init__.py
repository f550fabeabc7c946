"""Policies: model-free ones here; model backends (transformers, OpenAI-compatible, vLLM)."""

from agentgym.policies.simple import RandomPolicy, ScriptedPolicy, make_policy

__all__ = ["RandomPolicy", "ScriptedPolicy", "make_policy"]
