"""``check_env``: the async contract checks every env should pass.

Env authors run it on a fresh env (``await agentgym.check_env(agentgym.make("my/Env-v0"))``);
the test suite runs it over every registered env. It checks:

1. ``reset`` and ``step`` return the documented types (messages, a finite or ``None``
   reward, bool flags, dict infos, a ``str`` state key when there is one);
2. determinism: the same seed and the same actions give the same observations, rewards,
   flags and state keys;
3. agent mistakes are observations: text with no tool call, an unknown tool and malformed
   arguments come back with ``info["valid"] = False`` instead of raising. An env that sets
   ``prose_is_action = True`` (declining and ending a turn are actions there) must instead
   return ``valid=True`` for the text reply, and still ``valid=False`` for the rest;
4. a trajectory built from the steps round-trips through JSONL;
5. ``aclose`` can be called twice.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from agentgym.env import Env, accepts_prose
from agentgym.errors import AgentGymError
from agentgym.types import Message, Step, StepResult, ToolCall, Trajectory


class EnvCheckError(AgentGymError, AssertionError):
    """An env broke the contract; the message lists every failed check."""


def probe_actions(env: Env) -> list[Message]:
    """Agent mistakes every env must turn into observations."""
    actions = [Message("assistant", "I am not sure what to do.")]
    if env.tools:
        name = env.tools[0].name
        actions += [
            Message("assistant", "", tool_calls=(ToolCall("probe_0", "no_such_tool_xyz", {}),)),
            Message("assistant", "", tool_calls=(
                ToolCall("probe_1", name, {"__not_an_argument__": [1, 2, 3]}),)),
            Message("assistant",
                    '<tool_call>{"name": "' + name + '", "arguments": {"x": </tool_call>'),
        ]
    return actions


async def check_env(env: Env, *, seed: int = 0, actions: Sequence[Message] = (),
                    make_env: Callable[[], Env] | None = None) -> list[str]:
    """Run the contract checks; raise :class:`EnvCheckError` listing every failure.

    Args:
        env: A fresh env (not yet reset). It is closed at the end.
        seed: Seed for the determinism checks.
        actions: Extra (valid) actions to replay after the probes, e.g. a known solution.
        make_env: Builds a second fresh env for the determinism check; defaults to
            ``env.spec.make()`` when the env came from the registry, else the same env reset.

    Returns:
        The names of the checks that ran.
    """
    problems: list[str] = []
    ran: list[str] = []

    def check(ok: bool, what: str) -> None:
        if not ok:
            problems.append(what)

    for attr in ("reset", "step", "aclose"):
        check(inspect.iscoroutinefunction(getattr(env, attr, None)),
              f"{attr} must be an async method")
    check(all(hasattr(t, "to_openai") for t in getattr(env, "tools", ())),
          "tools must be a sequence of ToolSpec")
    if problems:
        raise EnvCheckError(_report(env, problems))

    try:
        first = await _play(env, seed, actions, check)
        ran.append("types")
        if env.tools:  # a plain-text env may accept any text as an action
            _check_mistakes(first[1][: len(probe_actions(env))], accepts_prose(env), check)
        ran.append("agent mistakes are observations")

        spec = getattr(env, "spec", None)
        other = make_env() if make_env is not None else (spec.make() if spec is not None else env)
        try:
            second = await _play(other, seed, actions, lambda ok, what: None)
        finally:
            if other is not env:
                await other.aclose()
        check(_fingerprint(first) == _fingerprint(second),
              f"not deterministic: reset(seed={seed}) and the same actions gave different "
              "observations, rewards, flags or state keys")
        ran.append("determinism")

        traj = first[2]
        check(Trajectory.from_json(traj.to_json()) == traj,
              "a trajectory of this env does not round-trip through JSON (info values must "
              "be JSON types)")
        json.loads(traj.to_json())
        ran.append("trajectory round-trip")
    finally:
        try:
            await env.aclose()
            await env.aclose()
            ran.append("aclose twice")
        except Exception as exc:  # the check's own finding
            problems.append(f"aclose() twice raised {exc!r}; aclose must be idempotent")
    if problems:
        raise EnvCheckError(_report(env, problems))
    return ran


async def _play(env: Env, seed: int, actions: Sequence[Message],
                check: Callable[[bool, str], None]
                ) -> tuple[list[Message], list[StepResult | None], Trajectory]:
    """Reset with ``seed`` and replay probes + ``actions``; resets again after an episode end."""
    observation, info = await env.reset(seed=seed)
    _check_reset(observation, info, check)
    prompt = list(observation)
    results: list[StepResult | None] = []
    steps: list[Step] = []
    key = info.get("state_key")
    for action in [*probe_actions(env), *actions]:
        try:
            result = await env.step(action)
        except Exception as exc:  # reported, not raised: the checker lists every failure
            check(False, f"step({action.content[:40]!r}...) raised {exc!r}; agent mistakes "
                         "must become observations")
            results.append(None)
            continue
        _check_result(result, check)
        results.append(result)
        steps.append(Step(len(steps), action, result, state_key=key, valid=result.valid))
        key = result.info.get("state_key")
        if result.done:
            observation, info = await env.reset(seed=seed)
            key = info.get("state_key")
    traj = Trajectory("check-0", str(info.get("task_id", "check")), "check-group", tuple(prompt),
                      tuple(steps), status="truncated", tools=tuple(env.tools))
    return prompt, results, traj.with_outcome()


def _check_mistakes(results: Sequence[StepResult | None], prose_ok: bool,
                    check: Callable[[bool, str], None]) -> None:
    """The probes' ``valid`` flags: the text reply (first) as the env declares, the rest False."""
    prose, mistakes = results[0], [r for r in results[1:] if r is not None]
    if prose_ok:
        check(prose is None or prose.valid,
              "the env sets prose_is_action = True, so a reply without a tool call must come "
              "back with info['valid'] = True")
    elif prose is not None:
        mistakes.append(prose)
    check(all(not r.valid for r in mistakes),
          "agent mistakes (unknown tool, malformed arguments"
          + ("" if prose_ok else ", no tool call")
          + ") must come back as observations with info['valid'] = False")


def _check_reset(observation: Any, info: Any, check: Callable[[bool, str], None]) -> None:
    check(isinstance(observation, list) and all(isinstance(m, Message) for m in observation),
          f"reset must return a list of Message, got {type(observation).__name__}")
    check(isinstance(info, dict), f"reset must return an info dict, got {type(info).__name__}")
    if isinstance(info, dict):
        key = info.get("state_key")
        check(key is None or isinstance(key, str), "info['state_key'] must be a str or None")


def _check_result(result: Any, check: Callable[[bool, str], None]) -> None:
    if not isinstance(result, StepResult):
        check(False, f"step must return a StepResult, got {type(result).__name__}")
        return
    check(all(isinstance(m, Message) for m in result.observation),
          "StepResult.observation must hold Message objects")
    check(result.reward is None or (isinstance(result.reward, int | float)
                                    and math.isfinite(result.reward)),
          f"reward must be a finite float or None, got {result.reward!r}")
    check(isinstance(result.terminated, bool) and isinstance(result.truncated, bool),
          "terminated and truncated must be bools")
    key = result.info.get("state_key")
    check(key is None or isinstance(key, str), "info['state_key'] must be a str or None")


def _fingerprint(played: tuple[list[Message], list[StepResult | None], Trajectory]) -> str:
    prompt, results, _ = played
    return json.dumps([[m.to_dict() for m in prompt],
                       [None if r is None else r.to_dict() for r in results]], sort_keys=True,
                      default=repr)


def _report(env: Env, problems: list[str]) -> str:
    spec = getattr(env, "spec", None)
    name = spec.id if spec is not None else type(env).__name__
    return f"{name} fails the env contract:\n" + "\n".join(f"- {p}" for p in problems)
