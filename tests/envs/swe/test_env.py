"""SWEEnv: tools, validity, state keys, the task loader, faults, and G-RA on real episodes."""

from __future__ import annotations

import json

import pytest

import agentgym
from agentgym.envs.swe import SWEEnv, SWETask, load_tasks, parse_pytest_summary, shipped_tasks
from agentgym.envs.swe.rewards import swe_components, swe_metrics, swe_outcome
from agentgym.errors import ConfigError, SchemaError
from agentgym.policies.simple import ScriptedPolicy
from agentgym.rollout import RolloutConfig, run_groups
from agentgym.sandboxes.base import SandboxError
from agentgym.sandboxes.local import LocalSandbox
from agentgym.trainers.rewards import rescore_groups
from agentgym.types import Group, Message, ToolCall

TASK = "pager-last-page"


def _call(name: str, **arguments) -> Message:
    return Message("assistant", "", tool_calls=(ToolCall("c0", name, arguments),))


async def _reset(env: SWEEnv, task_id: str = TASK):
    return await env.reset(options={"task_id": task_id})


async def test_editor_commands_and_their_mistakes():
    async with SWEEnv(split="all") as env:
        await _reset(env)
        path = "pager/paginator.py"
        view = await env.step(_call("editor", command="view", path=path, view_range=[17, 17]))
        assert view.valid and view.observation[0].content == (
            "    17\t        return len(self.items) // self.per_page")
        listing = await env.step(_call("editor", command="view", path="."))
        assert listing.valid and "./pager/paginator.py" in listing.observation[0].content
        mistakes = [
            _call("editor", command="view", path="../../etc/passwd"),
            _call("editor", command="view", path="nope.py"),
            _call("editor", command="str_replace", path=path, old_str="self", new_str="x"),
            _call("editor", command="str_replace", path=path, old_str="absent", new_str="x"),
            _call("editor", command="create", path=path, file_text="x"),
            _call("editor", command="insert", path=path, new_str="x", insert_line=999),
            _call("editor", command="undo_edit", path=path),
            _call("editor", command="view", path=".git/config"),
            _call("editor", command="delete", path=path),  # not one of the commands
        ]
        for action in mistakes:
            result = await env.step(action)
            assert not result.valid and result.observation[0].content.startswith("error:")
        repeated = (await env.step(mistakes[2])).observation[0].content
        assert "found 12 times (lines 9, 12, 13, 16, 17, 19" in repeated
        edit = await env.step(_call("editor", command="str_replace", path=path,
                                    old_str="len(self.items) // self.per_page",
                                    new_str="-(-len(self.items) // self.per_page)"))
        assert edit.valid and "-(-len(self.items)" in edit.observation[0].content
        await env.step(_call("editor", command="insert", path=path, insert_line=0,
                             new_str="# top"))
        await env.step(_call("editor", command="create", path="notes.txt", file_text="n\n"))
        assert "notes.txt" in await env.sandbox.diff("/testbed")
        for valid in (True, True, False):  # two edits of the file, then nothing to undo
            undo = await env.step(_call("editor", command="undo_edit", path=path))
            assert undo.valid is valid
        await env.step(_call("editor", command="undo_edit", path="notes.txt"))
        assert await env.sandbox.diff("/testbed") == ""  # every edit undone


async def test_bash_exit_codes_timeouts_and_validity():
    async with SWEEnv(split="all", command_timeout=1) as env:
        await _reset(env)
        ok = await env.step(_call("bash", command="echo hi; exit 4"))
        assert ok.valid and ok.observation[0].content == "hi\n\n[exit code 4]"
        slow = await env.step(_call("bash", command="sleep 30"))
        assert not slow.valid and "ran past 1 s" in slow.observation[0].content
        text = await env.step(Message("assistant", "I think the bug is in page()."))
        assert not text.valid and not text.done


async def test_calls_after_submit_in_the_same_turn_are_not_run():
    async with SWEEnv(split="all") as env:
        await _reset(env)
        action = Message("assistant", "", tool_calls=(
            ToolCall("a", "submit", {}), ToolCall("b", "bash", {"command": "touch late.txt"})))
        result = await env.step(action)
        assert result.terminated and result.info["patch_empty"] and not result.valid
        assert "not run" in result.observation[1].content


async def test_state_key_is_the_diff_and_last_call():
    sed = "sed -i 's/x = 1/x = 2/' pager/__init__.py"

    async def play(actions):
        async with SWEEnv(split="all") as env:
            _, info = await _reset(env)
            keys = [info["state_key"]]
            for a in actions:
                keys.append((await env.step(a)).info["state_key"])
            return keys

    edit = _call("editor", command="insert", path="pager/__init__.py", insert_line=0,
                 new_str="x = 2")
    via_editor = await play([edit, _call("bash", command="ls")])
    via_bash = await play([_call("bash", command=f"printf 'x = 1\\n' | cat - pager/__init__.py "
                                                 f"> t && mv t pager/__init__.py && {sed}"),
                           _call("bash", command="ls")])
    again = await play([_call("bash", command="ls")])
    assert via_editor[0] == via_bash[0] == again[0]  # the same task, untouched
    assert via_editor[1] != via_bash[1]  # same tree, different last command
    assert via_editor[2] == via_bash[2]  # same tree and the same command: same state
    assert again[1] != via_editor[2]  # same command, different tree
    other = SWEEnv(split="all")
    _, info = await _reset(other, "lru-get-refresh")
    assert info["state_key"] != via_editor[0]
    await other.aclose()


async def test_scripted_rollouts_with_gated_rewards_and_metrics():
    """Scripted policy resolves every test task; G-RA gives 1 + 2 x 0.1 per trajectory."""
    n = len(SWEEnv(split="test").tasks)
    trajs = await run_groups(lambda: agentgym.make("agentgym/SWE-v0", split="test"),
                             ScriptedPolicy(), list(range(n)), RolloutConfig(concurrency=3))
    assert [t.status for t in trajs] == ["terminated"] * n
    assert {t.task_id for t in trajs} == {t.instance_id for t in SWEEnv(split="test").tasks}
    assert swe_metrics(trajs) == {"completion_rate": 1.0, "modification_rate": 1.0,
                                  "resolve_rate": 1.0}
    groups = rescore_groups(Group.from_trajectories(trajs), swe_components(), "gated")
    assert [t.outcome_reward for g in groups for t in g.trajectories] == pytest.approx([1.2] * n)


async def test_turn_limit_means_no_submit():
    env = agentgym.make("agentgym/SWE-v0", max_turns=2)
    trajs = await run_groups(lambda: agentgym.make("agentgym/SWE-v0", max_turns=2),
                             _Looker(), [0], RolloutConfig())
    await env.aclose()
    (traj,) = trajs
    assert traj.status == "truncated" and len(traj.steps) == 2
    assert swe_outcome(traj) == "no_submit" and traj.outcome_reward == 0.0
    assert swe_metrics([traj]) == {"completion_rate": 0.0, "modification_rate": 0.0,
                                   "resolve_rate": 0.0}
    high, low = swe_components()
    assert high.score(traj) == -1.0 and low.score(traj) == [0.1, 0.1]


class _Looker:
    def start(self, prompt, env):
        return self

    async def act(self):
        return _call("bash", command="ls"), None

    def observe(self, observation):
        pass


async def test_a_failing_sandbox_is_an_error_trajectory():
    class Breaks(LocalSandbox):
        async def exec(self, cmd, **kwargs):
            if "tail" in cmd:
                raise SandboxError("container died")
            return await super().exec(cmd, **kwargs)

    make = lambda: agentgym.make("agentgym/SWE-v0", sandbox=lambda task: Breaks())  # noqa: E731

    class Tail(_Looker):
        async def act(self):
            return _call("bash", command="tail -n 3 pager/paginator.py"), None

    (traj,) = await run_groups(make, Tail(), [0], RolloutConfig())
    assert traj.status == "error" and "container died" in traj.error
    assert traj.outcome_reward is None


def test_loader_reads_swebench_records(tmp_path):
    record = {"instance_id": "octo__lib-1", "repo": "octo/lib", "base_commit": "abc",
              "problem_statement": "It breaks.", "patch": "diff", "test_patch": "",
              "FAIL_TO_PASS": json.dumps(["tests/test_a.py::test_x"]), "PASS_TO_PASS": "[]"}
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(record) + "\n\n" + json.dumps({**record, "instance_id": "b-2",
                                                              "image": "own:img"}) + "\n")
    first, second = load_tasks(path, image="sweb.eval.x86_64.{instance_id}")
    assert first.image == "sweb.eval.x86_64.octo__lib-1" and second.image == "own:img"
    assert first.fail_to_pass == ("tests/test_a.py::test_x",) and first.pass_to_pass == ()
    assert first.split is None and first.workdir == "/testbed"
    env = SWEEnv(split="test", tasks=str(path), image="img-{instance_id}")
    assert len(env.tasks) == 2  # tasks without a split are in every split
    assert env.tasks[0].image == "img-octo__lib-1"
    with pytest.raises(ConfigError, match="use sandbox='docker'"):
        import asyncio

        asyncio.run(env.reset(seed=0))


@pytest.mark.parametrize(("record", "message"), [
    ({"problem_statement": "x", "FAIL_TO_PASS": ["a::b"], "image": "i"}, "instance_id"),
    ({"instance_id": "a", "problem_statement": "x", "FAIL_TO_PASS": "[oops",
      "image": "i"}, "FAIL_TO_PASS must be a list"),
    ({"instance_id": "a", "problem_statement": "x", "FAIL_TO_PASS": ["a::b"]},
     "no repository"),
    ({"instance_id": "a", "problem_statement": "x", "FAIL_TO_PASS": [], "image": "i"},
     "no FAIL_TO_PASS"),
    ({"instance_id": "a", "problem_statement": "x", "FAIL_TO_PASS": ["t"], "image": "i",
      "test_cmd": "pytest"}, "{tests}"),
])
def test_loader_errors_name_the_fix(tmp_path, record, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([record]))
    with pytest.raises(SchemaError, match=message.replace("{", r"\{").replace("}", r"\}")):
        load_tasks(path)


def test_bad_arguments_are_caller_errors():
    with pytest.raises(ConfigError, match="split"):
        SWEEnv(split="dev")
    with pytest.raises(ConfigError, match="sandbox"):
        SWEEnv(sandbox="podman")
    with pytest.raises(ConfigError, match="not in split"):
        SWEEnv(split="test", task_ids=[TASK])
    with pytest.raises(ConfigError, match="expert must be 'patch'"):
        SWEEnv(expert="diff")  # type: ignore[arg-type]
    task = shipped_tasks()[0]
    assert isinstance(task, SWETask) and SWEEnv(tasks=[task]).tasks == (task,)


def test_parse_pytest_summary():
    out = ("PASSED tests/a.py::test_one\nFAILED tests/a.py::test_two - assert 1 == 2\n"
           "ERROR tests/a.py::test_three - ValueError: x - y\n"
           "PASSED tests/a.py::test_p[a b-1]\nSKIPPED [1] tests/a.py:3: no\nnoise ::\n")
    assert parse_pytest_summary(out) == {
        "tests/a.py::test_one": "PASSED", "tests/a.py::test_two": "FAILED",
        "tests/a.py::test_three": "ERROR", "tests/a.py::test_p[a b-1]": "PASSED"}


async def test_passes_the_env_checker():
    ran = await agentgym.check_env(agentgym.make("agentgym/SWE-v0"))
    assert "determinism" in ran


async def test_image_task_from_a_swebench_record_with_a_custom_sandbox(tmp_path):
    """A task whose repository is already in the 'image' (here: a sandbox factory that
    provides the checkout), loaded from a SWE-bench record, resolves with its gold patch."""
    shipped = next(t for t in shipped_tasks() if t.instance_id == TASK)
    record = {"instance_id": "acme__pager-7", "problem_statement": shipped.problem_statement,
              "patch": shipped.patch, "test_patch": shipped.test_patch,
              "FAIL_TO_PASS": json.dumps(list(shipped.fail_to_pass)),
              "PASS_TO_PASS": json.dumps(list(shipped.pass_to_pass)),
              "image": "acme/pager:7", "env": {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}}
    path = tmp_path / "instances.json"
    path.write_text(json.dumps([record]))

    async def like_the_image(task):
        assert task.image == "acme/pager:7"
        box = LocalSandbox()
        await box.copy_in(shipped.repo_dir, "/testbed")
        assert (await box.exec("git init -q . && git add -A && git commit -qm base")).ok
        return box

    async with SWEEnv(split="all", tasks=str(path), sandbox=like_the_image) as env:
        _, info = await env.reset(seed=0)
        assert info["task_id"] == "acme__pager-7"
        while not (result := await env.step(env.expert_action())).done:
            pass
    assert result.reward == 1.0 and result.info["fail_to_pass_passed"] == 1
