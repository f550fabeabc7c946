"""Every shipped task is sound: its FAIL_TO_PASS tests fail on the buggy code, the oracle
patch resolves it (reward 1), and empty or wrong patches do not.

Run with the local sandbox by default; the ``docker`` test repeats the oracle and wrong
patches for every task in real containers.
"""

from __future__ import annotations

import asyncio

import pytest

import agentgym
from agentgym.envs.swe import SWEEnv, shipped_tasks
from agentgym.envs.swe.evaluation import patched_files
from agentgym.envs.swe.rewards import swe_outcome
from agentgym.types import Message, Step, ToolCall, Trajectory

TASKS = shipped_tasks()


def _call(name: str, **arguments) -> Message:
    return Message("assistant", "", tool_calls=(ToolCall("c0", name, arguments),))


async def _episode(env: SWEEnv, task_id: str, actions) -> Trajectory:
    """Play ``actions`` (messages, or callables of the env) and record a trajectory."""
    prompt, info = await env.reset(options={"task_id": task_id})
    steps, key = [], info["state_key"]
    for action in actions:
        action = action() if callable(action) else action
        result = await env.step(action)
        steps.append(Step(len(steps), action, result, state_key=key, valid=result.valid))
        key = result.info["state_key"]
        if result.done:
            break
    return Trajectory("t", task_id, "g", tuple(prompt), tuple(steps)).with_outcome()


def _wrong_edit(task) -> Message:
    """A behaviour-neutral edit of the file the fix changes: the bug stays."""
    source = next(p for p in patched_files(task.patch) if not p.startswith("tests/"))
    return _call("editor", command="insert", path=source, insert_line=0,
                 new_str="# looked at this file\n")


def test_shipped_set_size_and_splits():
    splits = [t.split for t in TASKS]
    assert len(TASKS) >= 20 and splits.count("train") >= 14 and splits.count("test") >= 5
    for task in TASKS:
        assert task.patch and task.test_patch and task.fail_to_pass and task.pass_to_pass
        assert all(not p.startswith("tests/") for p in patched_files(task.patch))
        assert set(patched_files(task.test_patch)) <= {i.split("::")[0] for i in
                                                        task.fail_to_pass + task.pass_to_pass}


async def _check_task(env: SWEEnv, task) -> str:
    """Wrong, oracle and empty patches score as they should; returns the oracle's patch."""
    # Wrong patch: the FAIL_TO_PASS tests run on the buggy behaviour, and fail.
    wrong = await _episode(env, task.instance_id, [_wrong_edit(task), _call("submit")])
    info, ev = wrong.steps[-1].result.info, env.evaluation
    assert ev is not None and ev.tests_ran
    assert all(ev.statuses[i] == "FAILED" for i in task.fail_to_pass), ev.output
    assert all(ev.statuses[i] == "PASSED" for i in task.pass_to_pass), ev.output
    assert (wrong.outcome_reward, info["resolved"], info["patch_empty"]) == (0.0, False, False)
    assert swe_outcome(wrong) == "failing_patch"
    # Oracle patch: resolved.
    oracle = await _episode(env, task.instance_id, [env.expert_action] * 2)
    info = oracle.steps[-1].result.info
    assert oracle.outcome_reward == 1.0 and info["resolved"], env.evaluation.output
    assert info["fail_to_pass_passed"] == len(task.fail_to_pass)
    assert info["pass_to_pass_passed"] == len(task.pass_to_pass)
    assert swe_outcome(oracle) == "resolved"
    oracle_patch = env.evaluation.patch
    # Empty patch: not resolved, no tests needed.
    empty = await _episode(env, task.instance_id, [_call("submit")])
    info = empty.steps[-1].result.info
    assert (empty.outcome_reward, info["resolved"], info["patch_empty"]) == (0.0, False, True)
    assert swe_outcome(empty) == "empty_patch"
    return oracle_patch


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.instance_id)
async def test_task_fails_before_and_only_the_oracle_resolves(task):
    """Wrong, oracle and empty patches score as they should, and ``expert="editor"`` (each
    hunk demonstrated as a str_replace) makes the oracle's fix: the same patch, resolved."""
    async with SWEEnv(split="all") as env, SWEEnv(split="all", expert="editor") as edits:
        oracle_patch = await _check_task(env, task)
        by_editor = await _episode(edits, task.instance_id, [edits.expert_action] * 8)
    assert by_editor.outcome_reward == 1.0
    assert edits.evaluation is not None and edits.evaluation.patch == oracle_patch
    names = [c.name for s in by_editor.steps for c in s.action.tool_calls]
    assert names[-1] == "submit" and set(names[:-1]) == {"editor"}, names


async def test_editing_the_judging_tests_does_not_count():
    """The hidden tests are restored before they run, so faking them fails."""
    task = next(t for t in TASKS if t.instance_id == "pager-last-page")
    fake = ("def test_partial_last_page():\n    pass\n\n\ndef test_exact_pages():\n    pass\n")
    async with SWEEnv(split="all") as env:
        traj = await _episode(env, task.instance_id, [
            _call("bash", command=f"printf '%s' '{fake}' > tests/test_pages.py"),
            _call("submit")])
    info = traj.steps[-1].result.info
    assert info["patch_empty"] is False and info["resolved"] is False
    assert info["fail_to_pass_passed"] == 0


async def test_fix_that_breaks_a_passing_test_is_not_resolved():
    task = next(t for t in TASKS if t.instance_id == "semver-numeric-compare")
    async with SWEEnv(split="all") as env:
        traj = await _episode(env, task.instance_id, [
            _call("editor", command="str_replace", path="semverlite/version.py",
                  old_str="return cls(tuple(pieces))",
                  new_str="return cls(tuple(int(p) for p in pieces))"),
            _call("editor", command="str_replace", path="semverlite/version.py",
                  old_str="if len(pieces) != 3 or not all(p.isdigit() for p in pieces):",
                  new_str="if not pieces:"),  # drops the validation a passing test checks
            _call("submit")])
    info = traj.steps[-1].result.info
    assert info["fail_to_pass_passed"] == 1 and info["pass_to_pass_passed"] == 2
    assert info["resolved"] is False and traj.outcome_reward == 0.0


@pytest.mark.docker
async def test_every_task_in_docker(docker_engine, sandbox_image):
    """Oracle, wrong and empty patches for every task, in containers from the warm pool."""
    from agentgym.sandboxes.pool import close_shared_pools

    gate = asyncio.Semaphore(4)

    async def one(task):
        async with gate, SWEEnv(split="all", sandbox="docker") as env:
            await _check_task(env, task)

    try:
        await asyncio.gather(*(one(t) for t in TASKS))
    finally:
        await close_shared_pools()


def test_registered_env_uses_the_shipped_splits():
    env = agentgym.make("agentgym/SWE-v0", split="test")
    assert {t.instance_id for t in env.unwrapped.tasks} == {
        t.instance_id for t in TASKS if t.split == "test"}
