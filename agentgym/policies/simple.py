"""Agents that need no model: ``random`` (baseline, smoke tests) and ``scripted`` (oracle).

Both follow the :class:`~agentgym.rollout.Agent` protocol: ``start(prompt, env)`` returns an
episode object with ``act()`` and ``observe(observation)``.
"""

from __future__ import annotations

import inspect
import string
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agentgym.env import Env
from agentgym.errors import ConfigError
from agentgym.types import Message, StepTokens, ToolCall


class RandomAgent:
    """Calls a uniformly random tool with arguments sampled from its JSON schema.

    Args:
        seed: Seed of the policy's own generator.
        text_actions: Texts to pick from for envs without tools.
    """

    def __init__(self, seed: int | None = None,
                 text_actions: Sequence[str] = ("yes", "no", "look")) -> None:
        self.rng = np.random.default_rng(seed)
        self.text_actions = tuple(text_actions)

    def start(self, prompt: Sequence[Message], env: Env) -> _Episode:
        """An episode acting at random in ``env``."""
        return _Episode(lambda: self.action(env))

    def action(self, env: Env) -> Message:
        """One random action for ``env``."""
        if not env.tools:
            return Message("assistant", self.text_actions[int(self.rng.integers(
                len(self.text_actions)))])
        spec = env.tools[int(self.rng.integers(len(env.tools)))]
        params = spec.parameters
        args = {name: self._sample(schema) for name, schema in params.get("properties", {}).items()
                if name in params.get("required", ()) or self.rng.random() < 0.5}
        return Message("assistant", "", tool_calls=(ToolCall("call_0", spec.name, args),))

    def _sample(self, schema: Mapping[str, Any]) -> Any:
        if "enum" in schema:
            return schema["enum"][int(self.rng.integers(len(schema["enum"])))]
        kind = schema.get("type", "string")
        if isinstance(kind, list):
            kind = kind[int(self.rng.integers(len(kind)))]
        if kind == "integer":
            return int(self.rng.integers(-10, 100))
        if kind == "number":
            return float(np.round(self.rng.normal(0, 50), 2))
        if kind == "boolean":
            return bool(self.rng.integers(2))
        if kind == "array":
            return [self._sample(schema.get("items", {})) for _ in range(int(self.rng.integers(3)))]
        if kind == "object":
            return {}
        if kind == "null":
            return None
        letters = list(string.ascii_lowercase + " ")
        return "".join(self.rng.choice(letters, size=int(self.rng.integers(1, 12))))


class ScriptedAgent:
    """Plays the env's own expert: ``env.expert_action()`` (an optional env method).

    The method returns the next action as a ``Message``, or an awaitable of one. The
    policy specs ``scripted`` and ``expert`` both name this agent.
    """

    def start(self, prompt: Sequence[Message], env: Env) -> _Episode:
        """An episode following the env's expert."""
        expert = getattr(env, "expert_action", None)
        if expert is None:
            spec = getattr(env, "spec", None)
            name = spec.id if spec is not None else type(env).__name__
            raise ConfigError(
                f"{name} has no scripted policy (the env defines no expert_action()); "
                "use --policy random"
            )
        return _Episode(expert)


class _Episode:
    def __init__(self, next_action: Any) -> None:
        self.next_action = next_action

    async def act(self) -> tuple[Message, StepTokens | None]:
        action = self.next_action()
        if inspect.isawaitable(action):  # an expert that must query a browser or engine
            action = await action
        return action, None

    def observe(self, observation: Sequence[Message]) -> None:
        pass


# The names before these agents were called agents (they hold no model: they are agents, not
# generation backends); kept so that existing scripts keep working.
RandomPolicy = RandomAgent
ScriptedPolicy = ScriptedAgent
