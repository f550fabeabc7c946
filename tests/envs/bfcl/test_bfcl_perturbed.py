"""Broken ground truth: the env's reward agrees with BFCL's own checker, case by case.

Each case takes an entry's ground truth and breaks it once: one call dropped, or one argument
changed. The env plays the broken calls; BFCL's checker judges the same calls directly (the
AST checker on ``[{name: arguments}]``; the multi-turn checker on the call strings per turn).
As a control, single-turn answers also get one argument set to another value BFCL accepts:
those must pass in both.
"""

import copy
import uuid

from bfcl_helpers import make, run

from agentgym import Message, ToolCall
from agentgym.envs.bfcl import CATEGORIES, MULTI_TURN, SINGLE_TURN, data, scoring, task_ids

PER_CATEGORY_SINGLE = 20
PER_CATEGORY_MULTI = 12


def changed(value):
    """A different value of the same JSON type."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 1.5 + 1.0
    if isinstance(value, str):
        return value + "_x"
    if isinstance(value, list):
        return value[:-1] if value else ["x"]
    if isinstance(value, dict):
        return {**value, "unexpected_key": "x"}
    return "x"


def broken_variants(calls):
    """(kind, calls) pairs: the last call dropped, and one argument of one call changed."""
    out = [("drop", calls[:-1])]
    for i, c in enumerate(calls):
        if c.arguments:
            key = sorted(c.arguments)[len(c.arguments) // 2]
            args = {**copy.deepcopy(dict(c.arguments)), key: changed(c.arguments[key])}
            out.append(("change", [*calls[:i], ToolCall(c.id, c.name, args), *calls[i + 1:]]))
            break
    return out


def alternative(calls, ground_truth):
    """The calls with one argument set to another value BFCL accepts, when there is one."""
    for i, (c, answer) in enumerate(zip(calls, ground_truth, strict=False)):
        (_, params), = answer.items()
        for key, options in sorted(params.items()):
            others = [o for o in options if o != "" and o != c.arguments.get(key)]
            if key in c.arguments and others and isinstance(others[0], str | int | float):
                args = {**dict(c.arguments), key: others[0]}
                return [("alternative", [*calls[:i], ToolCall(c.id, c.name, args),
                                         *calls[i + 1:]])]
    return []


def single_turn_cases():
    b = scoring.bfcl()
    cases = []
    for category in SINGLE_TURN:
        if CATEGORIES[category].kind != "ast":
            continue
        env = make(category)
        for task_id in task_ids(category)[:: 7][:PER_CATEGORY_SINGLE]:
            run(env.reset(options={"task_id": task_id}))
            task = data.get_task(category, task_id=task_id)
            gold = list(env.expert_action().tool_calls)
            for kind, calls in broken_variants(gold) + alternative(gold, task.ground_truth):
                result = run(env.step(Message("assistant", "", tool_calls=tuple(calls))))
                run(env.reset(options={"task_id": task_id}))
                decoded = [{c.name: dict(c.arguments)} for c in calls]
                expected = bool(decoded) and b.ast_checker(
                    task.entry["function"], decoded, task.ground_truth, b.Language.PYTHON,
                    category, scoring.SCORER_PROFILE)["valid"]
                cases.append((task_id, kind, result.reward, float(expected)))
    return cases


def bfcl_multi_turn_verdict(task, turns):
    """BFCL's multi-turn checker on call strings per turn (one step per non-empty turn)."""
    b = scoring.bfcl()
    name = f"perturbed_{uuid.uuid4().hex}"
    decoded = [[[scoring.call_string(c.name, c.arguments) for c in calls]] if calls else []
               for calls in turns]
    try:
        return b.multi_turn_checker(decoded, task.ground_truth, task.entry, task.category.name,
                                    name)["valid"]
    finally:
        namespace = vars(b.multi_turn_utils)
        for key in [k for k in list(namespace) if k.startswith(name)]:
            del namespace[key]


def play_turns(env, task_id, turns):
    run(env.reset(options={"task_id": task_id}))
    for calls in turns:
        if calls:
            run(env.step(Message("assistant", "", tool_calls=tuple(calls))))
        result = run(env.step(Message("assistant", "Done.")))
    assert result.terminated
    return result.reward


def multi_turn_cases():
    cases = []
    for category in MULTI_TURN:
        env = make(category)
        for n, task_id in enumerate(task_ids(category)[:: 13][:PER_CATEGORY_MULTI]):
            run(env.reset(options={"task_id": task_id}))
            task = data.get_task(category, task_id=task_id)
            gold = env.ground_truth_calls()
            busy = [i for i, t in enumerate(gold) if t]
            turn = busy[n % len(busy)]
            for kind, calls in broken_variants(gold[turn]):
                turns = [*gold[:turn], calls, *gold[turn + 1:]]
                reward = play_turns(env, task_id, turns)
                expected = bfcl_multi_turn_verdict(task, turns)
                cases.append((task_id, kind, reward, float(expected)))
        run(env.aclose())
    return cases


def test_env_and_bfcl_agree_on_at_least_300_broken_answers():
    cases = single_turn_cases() + multi_turn_cases()
    disagreements = [c for c in cases if c[2] != c[3]]
    assert disagreements == []
    broken = [c for c in cases if c[1] != "alternative"]
    assert len(broken) >= 300 and {c[3] for c in broken} == {0.0}
    accepted = [c for c in cases if c[1] == "alternative"]
    assert len(accepted) >= 20 and {c[3] for c in accepted} == {1.0}  # the env tells them apart
