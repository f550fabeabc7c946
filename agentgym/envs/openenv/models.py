"""The wire types of an agentgym env served through OpenEnv (pydantic, as OpenEnv wants).

An OpenEnv server speaks ``Action`` in and ``Observation`` out; these subclasses carry
agentgym's records whole, so a client sees what an in-process caller sees:

- :class:`AgentGymAction`: the assistant message (text and tool calls). A text-only client
  (TRL, a notebook) sends ``{"content": "..."}``.
- :class:`AgentGymObservation`: the messages the model reads next, the env's tools (OpenAI
  function form, sent with every reset), ``terminated`` and ``truncated`` apart (OpenEnv's
  ``done`` is their or), the reward (``None`` = not scored here, never a stand-in 0) and the
  env's info (``valid``, ``success``, ``state_key``, ``task_id`` ...).
- :class:`AgentGymState`: what OpenEnv's ``state`` call returns: the env id, its keyword
  arguments, the seed and the step count.

Tool-call entries are kept as sent (``dict`` values of any type), so a malformed call an
agent wrote reaches the env, which answers it as an invalid action, as it does in process.
"""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

from agentgym.types import Message, StepResult, ToolCall, ToolSpec


class AgentGymAction(Action):
    """One assistant turn: text, tool calls, or both."""

    content: str = Field(default="", description="The assistant's text.")
    tool_calls: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Tool calls as {id, name, arguments}; arguments a JSON object.")

    @classmethod
    def from_message(cls, message: Message) -> AgentGymAction:
        """The action carrying an assistant message."""
        return cls(content=message.content, tool_calls=[c.to_dict() for c in message.tool_calls])

    def to_message(self) -> Message:
        """The assistant message this action carries."""
        # kept as sent, malformed or not: the env answers a malformed call as the agent's mistake
        calls = tuple(ToolCall(c.get("id", f"call_{i}"), c.get("name"),  # type: ignore[arg-type]
                               c.get("arguments", {}))
                      for i, c in enumerate(self.tool_calls))
        return Message("assistant", self.content, calls)


class AgentGymObservation(Observation):
    """What the env returned for a reset or a step."""

    messages: list[dict[str, Any]] = Field(
        default_factory=list, description="Messages the model reads next (agentgym form).")
    tools: list[dict[str, Any]] | None = Field(
        default=None, description="The env's tools, OpenAI function form (on reset only).")
    terminated: bool = Field(default=False, description="The task reached a terminal state.")
    truncated: bool = Field(default=False, description="The episode was cut short (a limit).")
    info: dict[str, Any] = Field(default_factory=dict, description="The env's info dict.")
    prose_is_action: bool | None = Field(
        default=None, description="Whether a reply without a tool call is an action (reset).")
    max_turns: int | None = Field(default=None, description="The env's turn limit (reset).")

    @classmethod
    def from_reset(cls, env: Any, messages: list[Message], info: dict[str, Any]
                   ) -> AgentGymObservation:
        """The observation of ``env.reset()``'s result."""
        result = StepResult(tuple(messages), info=info).to_dict()  # info made JSON-ready
        limit = getattr(env, "max_turns", None)
        return cls(messages=result["observation"], info=result["info"],
                   tools=[t.to_openai() for t in env.tools],
                   prose_is_action=getattr(env, "prose_is_action", False) is True,
                   max_turns=limit if isinstance(limit, int) and not isinstance(limit, bool)
                   else None)

    @classmethod
    def from_step(cls, result: StepResult) -> AgentGymObservation:
        """The observation of one ``env.step()`` result."""
        data = result.to_dict()
        return cls(messages=data["observation"], reward=result.reward, done=result.done,
                   terminated=result.terminated, truncated=result.truncated, info=data["info"])


class AgentGymState(State):
    """The session's env: id, keyword arguments, seed (OpenEnv adds episode id, step count)."""

    env_id: str = ""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    seed: int | None = None
    done: bool = False


def tools_from_openai(tools: list[dict[str, Any]] | None) -> tuple[ToolSpec, ...]:
    """ToolSpecs from the observation's OpenAI-form tool list."""
    return tuple(ToolSpec.from_dict(t) for t in tools or ())
