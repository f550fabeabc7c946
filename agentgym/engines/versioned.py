"""Record, per step, the policy version that sampled it (``StepTokens.policy_version``).

Async training needs to know how stale each step is when it reaches the trainer: a
multi-turn episode that runs across a weight update holds steps of several versions. The
:class:`~agentgym.policies.base.Completion` of every backend carries ``policy_version``; this
agent wrapper copies it into the step's tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from agentgym.env import Env
from agentgym.rollout import ContextAgent, NumberedAgent, SummarizingEpisode, SummaryTurn
from agentgym.types import Message, StepTokens


class VersionedAgent:
    """Wraps an :class:`~agentgym.rollout.LMAgent` so each step records its policy version.

    Attribute reads (``policy``, ``sampling``) go to the wrapped agent, and a wrapped
    :class:`~agentgym.rollout.ContextAgent`'s ``context`` is this agent's too, so
    :func:`~agentgym.rollout.run_episode` enforces the same H and records the same K.

    Args:
        agent: The LM agent (its episodes expose the last :class:`Completion` as ``last``).
    """

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        if isinstance(agent, ContextAgent):
            # Declared here, not only forwarded, so the engine's protocol check sees it
            # (isinstance on a protocol does not consult __getattr__ from Python 3.12 on).
            self.context = agent.context

    def reserve_episode(self) -> int | None:
        """The wrapped agent's next episode number, where it numbers its episodes."""
        return self.agent.reserve_episode() if isinstance(self.agent, NumberedAgent) else None

    def start(self, prompt: Sequence[Message], env: Env, number: int | None = None
              ) -> _VersionedEpisode:
        """Start the wrapped agent's episode (with its reserved number, if given)."""
        if number is None or not isinstance(self.agent, NumberedAgent):
            return _VersionedEpisode(self.agent.start(prompt, env))
        return _VersionedEpisode(self.agent.start(prompt, env, number))

    def __getattr__(self, name: str) -> Any:
        if name == "agent":  # not set yet (unpickling): never recurse
            raise AttributeError(name)
        return getattr(self.agent, name)


class _VersionedEpisode:
    def __init__(self, episode: Any) -> None:
        self.episode = episode

    async def act(self) -> tuple[Message, StepTokens | None]:
        action, tokens = await self.episode.act()
        version = getattr(getattr(self.episode, "last", None), "policy_version", None)
        if tokens is not None and version is not None:
            tokens = replace(tokens, policy_version=int(version))
        return action, tokens

    async def summarize(self) -> SummaryTurn | None:
        """The wrapped episode's SUPO summary turn, if it takes them, stamped the same way."""
        if not isinstance(self.episode, SummarizingEpisode):
            return None
        turn = await self.episode.summarize()
        version = getattr(getattr(self.episode, "last", None), "policy_version", None)
        if turn is not None and turn.tokens is not None and version is not None:
            turn = replace(turn, tokens=replace(turn.tokens, policy_version=int(version)))
        return turn

    def observe(self, observation: Sequence[Message]) -> None:
        self.episode.observe(observation)
