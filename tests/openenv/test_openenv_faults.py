"""Faults through OpenEnv: an env that raises, a server that is gone, a foreign server.

- A served env that raises is an error the client tells apart (``EXECUTION_ERROR``, text
  starting "agentgym env fault") from a malformed request (``VALIDATION_ERROR``).
- Through :class:`OpenEnvEnv`, a refused connection, a server stopped mid-episode and an env
  fault end the episode as ``status="error"`` with no score; the env recovers on reset.
- A server that is not agentgym's (a real openenv-core ``Environment``) is driven through the
  ``act`` tool and its action schema; arguments off the schema are the agent's mistake.
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("openenv")

from openenv.core.env_server.http_server import create_app  # noqa: E402
from openenv.core.env_server.interfaces import Environment  # noqa: E402
from openenv.core.env_server.types import Action, Observation, State  # noqa: E402
from openenv.core.generic_client import GenericEnvClient  # noqa: E402
from openenv_helpers import served  # noqa: E402
from pydantic import Field  # noqa: E402

import agentgym  # noqa: E402
from agentgym import BaseEnv, Message, StepResult, ToolCall  # noqa: E402
from agentgym.envs.openenv import ACT_TOOL, OpenEnvEnv, OpenEnvFault  # noqa: E402
from agentgym.envs.openenv.server import ENV_FAULT, bind, build_app  # noqa: E402
from agentgym.errors import ConfigError, EnvClosedError, ResetNeeded  # noqa: E402
from agentgym.policies import RandomAgent  # noqa: E402
from agentgym.rollout import RolloutConfig, run_groups  # noqa: E402


class _FaultyEnv(BaseEnv):
    """Answers the first step, raises on the second (a crashed engine)."""

    async def _reset(self, seed, options):
        return [Message("user", f"task {seed}")], {"task_id": f"faulty-{seed}"}

    async def _step(self, action):
        if self.turn >= 1:
            raise OSError("the engine died")
        return StepResult((Message("user", "go on"),), reward=0.0)


def _faulty() -> str:
    """Register the faulty env (at run time, so registry-wide tests never collect it)."""
    agentgym.register("agtest/OpenEnvFaulty-v0", _FaultyEnv, max_turns=5)
    return "agtest/OpenEnvFaulty-v0"


async def test_env_fault_and_malformed_request_are_told_apart():
    with served(build_app(_faulty())) as url:
        client = GenericEnvClient(base_url=url)
        try:
            await client.reset(seed=1)
            with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
                await client.step({"content": 5, "unknown": True})
            await client.step({"content": "one"})
            with pytest.raises(RuntimeError) as fault:
                await client.step({"content": "two"})
            assert ENV_FAULT in str(fault.value) and "EXECUTION_ERROR" in str(fault.value)
            assert "OSError: the engine died" in str(fault.value)
            again = await client.reset(seed=2)  # the session outlives the fault
            assert again.observation["info"]["task_id"] == "faulty-2"
        finally:
            await client.close()


async def test_env_fault_becomes_an_error_trajectory_never_a_score():
    with served(build_app(_faulty())) as url:
        trajs = await run_groups(lambda: agentgym.make(f"openenv:{url}"), RandomAgent(seed=0),
                                 range(3), RolloutConfig(max_steps=5), env_id=f"openenv:{url}")
    assert [t.status for t in trajs] == ["error"] * 3
    assert all(t.outcome_reward is None and ENV_FAULT in (t.error or "") for t in trajs)
    assert all(len(t.steps) == 1 for t in trajs)  # the step before the fault is kept


async def test_refused_connection_is_an_error_trajectory():
    sock = bind("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()  # nothing listens there now
    env = agentgym.make(f"openenv:{url}", connect_timeout=5)
    with pytest.raises(OpenEnvFault, match="reset failed"):
        await env.reset(seed=0)
    trajs = await run_groups(lambda: agentgym.make(f"openenv:{url}", connect_timeout=5),
                             RandomAgent(seed=0), range(2), RolloutConfig())
    assert [(t.status, t.outcome_reward) for t in trajs] == [("error", None)] * 2
    assert all("OpenEnvFault" in (t.error or "") for t in trajs)


async def test_server_gone_mid_episode_is_a_fault_and_reset_reconnects():
    app = build_app("agentgym/Arithmetic-v0")
    with served(app) as url:
        env = agentgym.make(f"openenv:{url}")
        await env.reset(seed=0)
    with pytest.raises(OpenEnvFault, match="step failed"):  # the server stopped
        await env.step(Message("assistant", "<answer>1</answer>"))
    with served(app) as url2:
        env.url = url2  # a new server: the next reset opens a new connection
        messages, info = await env.reset(seed=0)
        assert info["task_id"] == "arithmetic-train-0" and messages
        await env.aclose()


async def test_caller_mistakes_raise_at_once():
    with pytest.raises(ConfigError, match="OpenEnv server"):
        OpenEnvEnv("localhost:8000")
    env = OpenEnvEnv("http://127.0.0.1:1")
    with pytest.raises(ResetNeeded):
        await env.step(Message("assistant", "x"))
    await env.aclose()
    await env.aclose()  # idempotent
    with pytest.raises(EnvClosedError):
        await env.reset()


# -- a server that is not agentgym's -------------------------------------------------------
class GuessAction(Action):
    word: str = Field(description="A guess at the secret word.")


class GuessObservation(Observation):
    hint: str = ""


class GuessEnvironment(Environment[GuessAction, GuessObservation, State]):
    """A real openenv-core environment: guess the secret word (the seed picks it)."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    WORDS = ("apple", "pear", "plum")

    def __init__(self):
        super().__init__()
        self._state, self.secret = State(), "apple"

    def reset(self, seed=None, episode_id=None, **kwargs):
        self.secret = self.WORDS[(seed or 0) % len(self.WORDS)]
        self._state = State(episode_id=episode_id, step_count=0)
        return GuessObservation(hint=f"{len(self.secret)} letters")

    def step(self, action, timeout_s=None, **kwargs):
        self._state.step_count += 1
        right = action.word == self.secret
        return GuessObservation(hint="right" if right else "wrong", done=right,
                                reward=1.0 if right else 0.0)

    @property
    def state(self):
        return self._state


async def test_foreign_openenv_server_through_the_act_tool():
    app = create_app(GuessEnvironment, GuessAction, GuessObservation, max_concurrent_envs=4)
    with served(app) as url:
        env = agentgym.make(f"openenv:{url}")
        try:
            messages, info = await env.reset(seed=1)
            assert messages == [Message("user", '{"hint": "4 letters"}')] and info == {}
            (tool,) = env.tools
            assert tool.name == ACT_TOOL and tool.parameters["required"] == ["word"]
            assert "metadata" not in tool.parameters["properties"]
            assert env.prose_is_action  # one required text field: a plain reply fills it
            off_schema = await env.step(Message("assistant", "", (
                ToolCall("c1", ACT_TOOL, {"word": 7}),)))
            assert not off_schema.valid and off_schema.observation[0].tool_call_id == "c1"
            wrong = await env.step(Message("assistant", "apple"))
            assert (wrong.reward, wrong.done, wrong.valid) == (0.0, False, True)
            right = await env.step(Message("assistant", "", (
                ToolCall("c2", ACT_TOOL, {"word": "pear"}),)))
            assert (right.reward, right.terminated, right.truncated) == (1.0, True, False)
            assert right.observation == (Message("tool", '{"hint": "right"}',
                                                 tool_call_id="c2", name=ACT_TOOL),)
        finally:
            await env.aclose()


async def test_sessions_past_max_sessions_are_refused_as_faults():
    with served(build_app("agentgym/MentalMath-v0", max_sessions=1)) as url:
        first, second = agentgym.make(f"openenv:{url}"), agentgym.make(f"openenv:{url}")
        try:
            await first.reset(seed=0)
            # openenv-core's server sends CAPACITY_REACHED and closes the socket at once; the
            # client may meet the close first. Either way the reset is a fault, never a score.
            with pytest.raises(OpenEnvFault, match="CAPACITY_REACHED|ConnectionClosed"):
                await second.reset(seed=1)
            await first.aclose()  # its session ends: the slot is free again
            for _ in range(600):  # the server frees the slot just after the socket closes
                try:
                    messages, info = await second.reset(seed=1)
                    break
                except OpenEnvFault:
                    await asyncio.sleep(0.1)
            else:
                pytest.fail("the slot was never freed")
            assert info["task_id"] == "mental-train-1"
        finally:
            await first.aclose()
            await second.aclose()
