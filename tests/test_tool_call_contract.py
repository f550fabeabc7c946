"""The tool-call contract: a malformed structured call is an invalid action, never an exception.

A ``ToolCall`` is a plain record (its constructor checks nothing), so a user's agent can hand
``env.step`` a call whose name is not a string or whose arguments are not a mapping with string
keys. Every env answers such a call with an observation: ``valid=False`` where the env has
tools, and at least no exception where it reads prose only. The recorded trajectory still
round-trips through JSON. The envs come from the registry, as in ``test_fuzz_step.py``; those
that need a browser run under the ``browser`` marker, Docker and GPU ones are left out.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from typing import Any

import pytest

import agentgym
from agentgym import Message, StepResult, ToolBox, ToolCall, Trajectory, tools
from agentgym.rollout import RolloutConfig, run_episode

BROWSER_IDS = ("agentgym/WebShop-v0", "miniwob/click-test-v0", "miniwob/enter-text-v0")
"""Browser envs fed the calls (the MiniWoB tasks share one env class: two stand for all)."""


def _ids() -> list[Any]:
    ids: list[Any] = []
    for env_id, spec in agentgym.registry.items():
        needs = set(spec.system_requirements)
        if needs & {"docker", "gpu"}:
            continue
        if "browser" in needs:
            if env_id in BROWSER_IDS:
                ids.append(pytest.param(env_id, marks=pytest.mark.browser, id=env_id))
            continue
        ids.append(pytest.param(env_id, id=env_id))
    return ids


def malformed(name: str) -> list[ToolCall]:
    """Calls a user's agent could build: ``name`` is one of the env's tools."""
    names: list[Any] = [5, None, True, 1.5, b"x", [name], {"name": name}, ("a", "b")]
    arguments: list[Any] = ['{"a": 1}', "", [1, 2], [("a", 1)], None, 5, {1: "x"},
                            {None: 1, "a": 2}, {("k",): 1}]
    return ([ToolCall(f"bad_name_{i}", n, {}) for i, n in enumerate(names)]
            + [ToolCall(f"bad_args_{i}", name, a) for i, a in enumerate(arguments)]
            + [ToolCall("both", [name], "x"), ToolCall(7, name, [])])  # type: ignore[arg-type]


def _needs_browser(env_id: str) -> None:
    missing = shutil.which("chromium") is None or (
        env_id.startswith("miniwob/") and importlib.util.find_spec("miniwob") is None)
    if missing:
        if os.environ.get("AGENTGYM_REQUIRE_BROWSER") == "1":  # CI: never skip
            pytest.fail("AGENTGYM_REQUIRE_BROWSER=1 but Chromium or miniwob is missing")
        pytest.skip("Chromium or the miniwob package is not installed")


@pytest.mark.parametrize("env_id", _ids())
async def test_malformed_structured_calls_are_invalid_actions(env_id: str) -> None:
    if env_id in BROWSER_IDS:
        _needs_browser(env_id)
    env = agentgym.make(env_id)
    problems: list[str] = []
    try:
        await env.reset(seed=0)
        has_tools = bool(env.tools)
        name = env.tools[0].name if has_tools else "act"
        calls = malformed(name)
        replies = [(c,) for c in calls] + [(calls[0], calls[-1])]  # and two in one reply
        for reply in replies:
            what = f"{reply[0].name!r}({reply[0].arguments!r})"
            try:
                result = await env.step(Message("assistant", "", reply))
            except Exception as exc:  # the defect this hunts for
                problems.append(f"{what} raised {type(exc).__name__}: {exc}")
                await env.reset(seed=0)
                continue
            if not isinstance(result, StepResult) or not all(
                    isinstance(m, Message) and isinstance(m.content, str)
                    for m in result.observation):
                problems.append(f"{what} gave a malformed result {result!r:.200}")
            elif has_tools and result.valid:
                problems.append(f"{what} came back valid")
            else:
                json.dumps([m.to_dict() for m in result.observation])  # recordable as is
            if isinstance(result, StepResult) and result.done:
                await env.reset(seed=0)
    finally:
        await env.aclose()
    assert not problems, f"{env_id}:\n" + "\n".join(problems)


def test_the_registry_still_has_tool_envs_to_check() -> None:
    """The parametrisation above covers the tool envs the issue names (not an empty list)."""
    ids = {p.values[0] for p in _ids()}
    assert {"agentgym/CodeMath-v0", "agentgym/LogSearch-v0", "agentgym/WebShopText-v0",
            "agentgym/MCPInventory-v0", "babyai/GoTo-v0", "miniwob/click-test-v0"} <= ids


class _Sends:
    """A user's agent that sends the given replies in turn (the engine's Agent protocol)."""

    def __init__(self, replies: list[Message]) -> None:
        self.replies = replies

    def start(self, prompt: Any, env: Any) -> _Sends:
        self.turn = 0
        return self

    async def act(self) -> tuple[Message, None]:
        self.turn += 1
        return self.replies[min(self.turn - 1, len(self.replies) - 1)], None

    def observe(self, observation: Any) -> None:
        pass


async def test_a_malformed_call_is_recorded_and_round_trips() -> None:
    """Through the rollout engine: invalid steps, a finished episode, an exact JSON round trip."""
    env = agentgym.make("agentgym/Arithmetic-v0")
    replies = [Message("assistant", "", (c,)) for c in malformed("calculator")]
    try:
        traj = await run_episode(env, _Sends(replies), seed=0, group_id="g",
                                 config=RolloutConfig(max_steps=len(replies)))
    finally:
        await env.aclose()
    assert traj.status != "error", traj.error
    assert traj.steps and not any(s.valid for s in traj.steps)
    line = traj.to_json()  # writable, though some calls hold bytes or tuples
    assert Trajectory.from_json(line).to_json() == line


@pytest.mark.parametrize("call", malformed("add"), ids=lambda c: c.id if isinstance(
    c.id, str) else repr(c.id))
async def test_toolbox_answers_each_malformed_call(call: ToolCall) -> None:
    def add(a: int, b: int) -> int:
        """Add.

        Args:
            a: First.
            b: Second.
        """
        return a + b

    out = await ToolBox([add]).run(Message("assistant", "", (call,)))
    assert not out.valid and out.results == (None,)
    assert out.messages[0].role == "tool" and out.messages[0].content.startswith("error: ")
    assert call.problem() is not None and call.problem() in out.messages[0].content
    seen = out.calls[0]  # what envs read back: always well formed
    assert seen == tools.readable_call(call) and seen.problem() is None and isinstance(seen.id, str)


def test_problem_names_what_is_wrong() -> None:
    assert ToolCall("c", "add", {"a": 1}).problem() is None
    assert ToolCall("c", 5, {}).problem() == "a tool call's name must be a string, got int 5"  # type: ignore[arg-type]
    assert ToolCall("c", "add", [1]).problem() == \
        "the arguments of add must be a JSON object, got list"  # type: ignore[arg-type]
    assert ToolCall("c", "add", {1: 2}).problem() == ("the arguments of add must be a JSON "
                                                      "object, whose keys are strings; got the "
                                                      "key 1")


@pytest.mark.parametrize("call", [
    ToolCall("c", "add", {"a": [1, {"b": None}]}), ToolCall("c", 5, {}),
    ToolCall("c", ["add"], "text"), ToolCall("c", "add", None), ToolCall("c", None, [1, 2]),
    ToolCall("c", "add", {}),
])
def test_calls_round_trip_through_json_malformed_or_not(call: ToolCall) -> None:
    assert ToolCall.from_dict(json.loads(json.dumps(call.to_dict()))) == call
