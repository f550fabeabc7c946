"""ToolEnv: tasks, tools, verifiers, answers, per-episode state and bad input."""

import asyncio
import time

import pytest

from agentgym import Message, ToolCall, ToolEnv, check_env
from agentgym.errors import ConfigError
from agentgym.rollout import RolloutConfig, run_groups
from agentgym.tool_env import Task, ToolFault
from agentgym.verifiers import exact, numeric, parse_number


def call(name, **args):
    return Message("assistant", "", tool_calls=(ToolCall("c0", name, args),))


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b


async def slow_lookup(key: str) -> str:
    """Look a key up slowly.

    Args:
        key: The key.
    """
    await asyncio.sleep(3600)
    return key


def blocking(seconds: float) -> str:
    """Block the calling thread.

    Args:
        seconds: How long.
    """
    time.sleep(seconds)
    return "done"


def spam(n: int) -> str:
    """Return a long text.

    Args:
        n: Length.
    """
    return "x" * n


def remember(text: str, state) -> str:
    """Remember a text for this episode.

    Args:
        text: What to remember.
    """
    state.scratch.setdefault("notes", []).append(text)
    return f"{len(state.scratch['notes'])} notes"


def broken_backend() -> str:
    """A tool whose backend is down."""
    raise ToolFault("backend unreachable")


TASKS = [{"id": "t0", "prompt": "What is 2 + 3?", "answer": 5},
         {"id": "t1", "prompt": "What is 10 + 7?", "answer": 17}]


def env(**kw):
    tools = kw.pop("tools", [add, slow_lookup, blocking, spam, remember, broken_backend])
    return ToolEnv(kw.pop("tasks", TASKS), tools, verifier=kw.pop("verifier", "numeric"), **kw)


async def test_tool_round_trip_and_answer_tool():
    e = env()
    obs, info = await e.reset(seed=1)
    assert info["task_id"] == "t1" and "10 + 7" in obs[-1].content
    r = await e.step(call("add", a=10, b=7))
    assert r.valid and r.reward is None and r.observation[0].content == "17"
    assert r.observation[0].role == "tool" and r.observation[0].tool_call_id == "c0"
    r = await e.step(call("final_answer", answer=17))
    assert r.terminated and r.reward == 1.0 and r.info["success"]


async def test_answer_tag_and_wrong_answer():
    e = env()
    await e.reset(seed=0)
    r = await e.step(Message("assistant", "I think <answer>6</answer>"))
    assert r.terminated and r.reward == 0.0 and r.info["answer"] == "6"


async def test_hermes_text_calls_are_parsed():
    e = env()
    await e.reset(seed=0)
    text = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
    r = await e.step(Message("assistant", text))
    assert r.valid and r.observation[0].content == "5"


@pytest.mark.parametrize("action,needle", [
    (call("add", a="two", b=3), "is not of type 'integer'"),
    (call("add", a=1), "'b' is a required property"),
    (call("add", a=1, b=2, c=3), "Additional properties"),
    (call("ad", a=1, b=2), "did you mean 'add'"),
    (Message("assistant", "no idea"), "no tool call"),
    (Message("assistant", '<tool_call>{"name": "add", "arguments": {"a": </tool_call>'),
     "malformed JSON"),
])
async def test_bad_calls_are_invalid_observations(action, needle):
    e = env()
    await e.reset(seed=0)
    r = await e.step(action)
    assert not r.valid and not r.done and needle in r.observation[0].content


async def test_hanging_async_and_blocking_sync_tools_time_out():
    e = env(timeout=0.3)
    await e.reset(seed=0)
    start = time.perf_counter()
    r1 = await e.step(call("slow_lookup", key="k"))
    r2 = await e.step(call("blocking", seconds=30.0))  # runs in a daemon thread
    assert time.perf_counter() - start < 5
    for r in (r1, r2):
        assert not r.valid and "timed out after 0.3 s" in r.observation[0].content


async def test_enormous_output_is_cut():
    e = env(max_output_chars=1000)
    await e.reset(seed=0)
    r = await e.step(call("spam", n=5_000_000))
    assert r.valid and len(r.observation[0].content) < 1100
    assert "truncated 4999000 characters" in r.observation[0].content


async def test_state_is_per_episode():
    e = env()
    await e.reset(seed=0)
    await e.step(call("remember", text="a"))
    assert (await e.step(call("remember", text="b"))).observation[0].content == "2 notes"
    await e.reset(seed=0)
    assert (await e.step(call("remember", text="c"))).observation[0].content == "1 notes"
    assert "state" not in e.tools[[t.name for t in e.tools].index("remember")].parameters[
        "properties"]


async def test_state_factory_is_closed_at_reset_and_aclose():
    closed = []

    class Res:
        def __init__(self, task):
            self.task = task

        async def aclose(self):
            closed.append(self.task.id)

    e = env(state_factory=Res)
    await e.reset(seed=0)
    await e.reset(seed=1)
    await e.aclose()
    await e.aclose()
    assert closed == ["t0", "t1"]


async def test_tool_fault_becomes_error_trajectory():
    e = env()
    await e.reset(seed=0)
    with pytest.raises(ToolFault):
        await e.step(call("broken_backend"))

    class Agent:
        def start(self, prompt, env):
            class Ep:
                async def act(self):
                    return call("broken_backend"), None

                def observe(self, obs):
                    pass
            return Ep()

    (traj,) = await run_groups(env, Agent(), seeds=[0], config=RolloutConfig(max_steps=3))
    assert traj.status == "error" and traj.outcome_reward is None
    assert "backend unreachable" in traj.error


async def test_turn_limit_truncates_with_zero_reward():
    e = env(max_turns=2)
    await e.reset(seed=0)
    assert not (await e.step(call("add", a=1, b=1))).done
    r = await e.step(call("add", a=1, b=1))
    assert r.truncated and not r.terminated and r.reward == 0.0


async def test_task_function_and_custom_verifier_and_expert():
    def task(seed):
        return Task(f"sq-{seed}", f"What is {seed} squared?", seed * seed,
                    solution=(ToolCall("c", "add", {"a": seed, "b": 0}),))

    e = ToolEnv(task, [add], verifier=lambda answer, t: float(answer.strip() == str(t.answer)))
    await e.reset(seed=9)
    assert (await e.step(e.expert_action())).observation[0].content == "9"
    r = await e.step(e.expert_action())
    assert r.reward == 1.0 and r.info["answer"] == "81"


async def test_verifier_returning_nonsense_raises():
    e = ToolEnv(TASKS, [add], verifier=lambda a, t: "yes")
    await e.reset(seed=0)
    with pytest.raises(TypeError, match="must return a bool or a finite number"):
        await e.step(Message("assistant", "<answer>5</answer>"))


async def test_check_env_passes():
    assert "determinism" in await check_env(env(), make_env=env)


def test_bad_construction():
    with pytest.raises(ConfigError, match="tasks is empty"):
        ToolEnv([], [add])
    with pytest.raises(ConfigError, match="'prompt'"):
        ToolEnv([{"question_text": "?"}], [add])
    with pytest.raises(ConfigError, match="did you mean 'numeric'"):
        ToolEnv(TASKS, [add], verifier="numerc")
    with pytest.raises(ConfigError, match="no docstring"):
        ToolEnv(TASKS, [lambda x: x])
    with pytest.raises(ConfigError, match="answer_tool or answer_tag"):
        ToolEnv(TASKS, [add], answer_tool=None, answer_tag=None)


def test_verifiers():
    t = Task("t", "?", answer=1234)
    assert numeric()("It is 1,234.", t) and not numeric()("1235", t)
    assert parse_number("x = -3.5e2") == -350.0 and parse_number("none") is None
    assert parse_number("93.2 - 32 = 61.2") == 61.2
    assert exact()("The Paris!", Task("t", "?", answer=["paris", "Lutetia"]))
    with pytest.raises(ConfigError, match="has no answer"):
        exact()("x", Task("t", "?"))
