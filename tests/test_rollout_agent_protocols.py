"""The engine's typed agent interfaces: ``ContextAgent`` (H and K) and ``SummarizingEpisode``.

Any agent may take part, not only :class:`~agentgym.rollout.LMAgent`: these agents are plain
classes that declare the members the protocols name.
"""

from __future__ import annotations

from agentgym import BaseEnv, Message, StepResult
from agentgym.context import ContextConfig, SummarizeConfig
from agentgym.policies import RandomPolicy
from agentgym.rollout import (
    ContextAgent,
    LMAgent,
    RolloutConfig,
    SummarizingEpisode,
    SummaryTurn,
    run_episode,
)


class _Endless(BaseEnv):
    async def _reset(self, seed, options):
        return [Message("user", "go")], {"state_key": "s"}

    async def _step(self, action):
        return StepResult((Message("user", "again"),), reward=0.0, info={"state_key": "s"})


class _Episode:
    def __init__(self, summary_every: int | None) -> None:
        self.summary_every, self.acts = summary_every, 0

    async def act(self):
        self.acts += 1
        return Message("assistant", f"move {self.acts}"), None

    def observe(self, observation):
        pass


class _SummarizingEpisode(_Episode):
    async def summarize(self):
        if self.acts % self.summary_every:
            return None
        return SummaryTurn(Message("assistant", "so far: moves"), None,
                           Message("user", "continue from the summary"), True)


class _Agent:
    """An agent with a context config but no model."""

    def __init__(self, context: ContextConfig, summary_every: int | None = None) -> None:
        self.context, self.summary_every = context, summary_every

    def start(self, prompt, env):
        if self.summary_every is None:
            return _Episode(None)
        return _SummarizingEpisode(self.summary_every)


SUPO = ContextConfig(mode="summarize", summarize=SummarizeConfig(max_calls=5))


def test_protocols_recognise_what_agents_declare():
    assert isinstance(LMAgent(policy=object(), context=SUPO), ContextAgent)  # type: ignore[arg-type]
    assert isinstance(_Agent(SUPO), ContextAgent)
    assert not isinstance(RandomPolicy(0), ContextAgent)
    assert isinstance(_SummarizingEpisode(2), SummarizingEpisode)
    assert not isinstance(_Episode(None), SummarizingEpisode)


async def test_a_context_agents_call_cap_and_summaries_are_run_by_the_engine():
    traj = await run_episode(_Endless(), _Agent(SUPO, summary_every=2), seed=0, group_id="g",
                             config=RolloutConfig(max_steps=50))
    # H = 5 policy calls: act, act, summary, act, act (the cap stops the next summary).
    assert [s.summary for s in traj.steps] == [False, False, True, False, False]
    assert traj.steps[2].state_key is None and traj.steps[2].result.observation[0].content \
        == "continue from the summary"
    assert traj.metrics["overlong"] == 1.0 and traj.metrics["stopped_by_max_calls"] == 1.0
    assert traj.metrics["summaries"] == 1.0 and "history_length" not in traj.metrics


async def test_an_episode_without_summarize_is_never_asked_for_one():
    traj = await run_episode(_Endless(), _Agent(SUPO), seed=0, group_id="g",
                             config=RolloutConfig(max_steps=50))
    assert len(traj.steps) == 5 and not any(s.summary for s in traj.steps)
    assert traj.metrics["summaries"] == 0.0


async def test_a_window_context_records_k_and_a_plain_agent_records_nothing():
    window = ContextConfig(mode="window", history_length=3)
    traj = await run_episode(_Endless(), _Agent(window), seed=0, group_id="g",
                             config=RolloutConfig(max_steps=4))
    assert traj.metrics["history_length"] == 3.0 and len(traj.steps) == 4
    assert "overlong" not in traj.metrics and "summaries" not in traj.metrics
    plain = await run_episode(_Endless(), RandomPolicy(0), seed=0, group_id="g",
                              config=RolloutConfig(max_steps=4))
    assert not {"history_length", "summaries", "overlong"} & plain.metrics.keys()
