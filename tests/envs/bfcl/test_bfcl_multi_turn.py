import json
import warnings

import gymnasium
import pytest
from bfcl_helpers import env_id, make, play_expert, run
from gymnasium.utils.env_checker import check_env as gymnasium_check_env

from agentgym import Message, ToolCall
from agentgym.checker import check_env
from agentgym.envs.bfcl import MULTI_TURN, task_ids
from agentgym.envs.bfcl.multi_turn import ADDED_FUNCTIONS_PROMPT, MAX_STEPS_PER_TURN

SAMPLE = 3  # entries per category in the default run; the sweep takes them all


def replay(category, ids):
    env = make(category)
    failures = {}
    for task_id in ids:
        result, _ = run(play_expert(env, task_id))
        assert result.terminated
        turns = len(env.task.entry["question"])
        assert result.info["turn_results"] == [True] * turns
        if result.reward != 1.0:
            failures[task_id] = result.info["bfcl"]
    run(env.aclose())
    return failures


@pytest.mark.parametrize("category", MULTI_TURN)
def test_ground_truth_scores_full_marks_on_a_sample(category):
    assert replay(category, task_ids(category)[::67][:SAMPLE]) == {}


@pytest.mark.sweep
@pytest.mark.parametrize("category", MULTI_TURN)
def test_ground_truth_scores_full_marks_on_every_entry(category):
    assert replay(category, task_ids(category)) == {}


def call(name, **arguments):
    return Message("assistant", "", tool_calls=(ToolCall(f"id_{name}", name, arguments),))


def test_calls_run_on_live_instances_and_a_reply_without_calls_ends_the_turn():
    env = make("multi_turn_base")
    obs, info = run(env.reset(options={"task_id": "multi_turn_base_0"}))
    assert info["turns"] == len(env.task.entry["question"]) and obs[0].role == "user"
    listed = run(env.step(call("ls", a=True)))
    assert listed.observation[0].role == "tool" and "current_directory_content" in \
        listed.observation[0].content
    assert listed.reward is None and listed.info["valid"] is True
    end = run(env.step(Message("assistant", "Done.")))
    assert end.info["turn_end"] is True and end.info["turn"] == 0
    assert end.info["valid"] is True and "problems" not in end.info  # BFCL's way to end a turn
    assert end.info["turn_results"] == [end.info["turn_passed"]]
    assert end.observation == tuple(Message("user", m["content"])
                                    for m in env.task.entry["question"][1])


def test_call_markup_that_does_not_parse_ends_the_turn_as_a_mistake():
    env = make("multi_turn_base")
    run(env.reset(options={"task_id": "multi_turn_base_0"}))
    broken = run(env.step(Message("assistant", '<tool_call>{"name": "ls", "arguments": {'
                                               '</tool_call>')))
    assert broken.info["turn_end"] is True and broken.info["valid"] is False
    assert broken.info["problems"]


def test_agent_mistakes_and_api_exceptions_are_observations():
    env = make("multi_turn_base")
    run(env.reset(options={"task_id": "multi_turn_base_0"}))
    unknown = run(env.step(call("rm_rf", path="/")))
    assert unknown.info["valid"] is False and unknown.info["executed"] == []
    assert "not defined" in unknown.observation[0].content
    raised = run(env.step(call("cd")))  # missing argument: the API method raises
    assert raised.info["valid"] is False
    assert raised.observation[0].content.startswith("Error during execution:")
    wrong_type = run(env.step(call("cd", folder=5)))
    assert wrong_type.info["valid"] is False and "is not of type 'string'" in \
        wrong_type.info["problems"][0]
    injected = run(env.step(Message("assistant", "", tool_calls=(
        ToolCall("x", "cd", {"folder='a'),__import__('os').system('true'),print(x": 1}),))))
    assert injected.info["valid"] is False and injected.info["executed"] == []
    builtin = run(env.step(call("open", file="/tmp/bfcl-should-not-exist", mode="w")))
    assert builtin.info["executed"] == [] and "not defined" in builtin.observation[0].content


def test_hand_built_calls_with_odd_names_ids_and_arguments_are_observations():
    for category in ("simple_python", "multi_turn_base"):
        env = make(category)
        for name in (None, 5, ["x"], {"a": 1}):
            for arguments in ({"a": 1}, None, [1], {1: 2}, {"a": object()}):
                run(env.reset(seed=1))
                odd = ToolCall(None, name, arguments)  # type: ignore[arg-type]
                result = run(env.step(Message("assistant", "", tool_calls=(odd,))))
                assert result.info["valid"] is False


def test_calls_that_would_compute_for_minutes_are_refused():
    env = make("multi_turn_base")
    with_math = next(i for i in task_ids("multi_turn_base")
                     if "MathAPI" in make_task(i).entry["involved_classes"])
    run(env.reset(options={"task_id": with_math}))
    huge = run(env.step(call("power", base=10, exponent=10**9)))
    assert huge.info["executed"] == [] and "too large" in huge.observation[0].content
    fine = run(env.step(call("power", base=2, exponent=10)))
    assert fine.info["executed"] == ["power(base=2,exponent=10)"]
    assert "1024" in fine.observation[0].content


def make_task(task_id):
    from agentgym.envs.bfcl.data import get_task

    return get_task("multi_turn_base", task_id=task_id)


def test_miss_func_adds_the_held_out_function_at_bfcls_turn():
    env = make("multi_turn_miss_func")
    run(env.reset(options={"task_id": "multi_turn_miss_func_0"}))
    (turn, names), = env.task.entry["missed_function"].items()
    held_out = names[0]["name"]
    assert held_out not in [t.name for t in env.tools]
    early = run(env.step(call(held_out, file_name="final_report.pdf")))
    assert early.info["valid"] is False  # BFCL runs it (the method exists), but it is no tool
    for _ in range(int(turn)):
        result = run(env.step(Message("assistant", "Done.")))
    assert result.observation == (Message("user", ADDED_FUNCTIONS_PROMPT),)
    assert held_out in [t.name for t in env.tools]


def test_too_many_steps_in_one_turn_fail_the_entry_as_bfcl_does():
    env = make("multi_turn_base")
    run(env.reset(options={"task_id": "multi_turn_base_0"}))
    for _ in range(MAX_STEPS_PER_TURN):
        assert not run(env.step(call("pwd"))).done
    last = run(env.step(call("pwd")))
    assert last.terminated and last.reward == 0.0
    assert last.info["bfcl"]["error_type"] == "multi_turn:force_terminated"


def test_state_key_follows_the_api_state_not_the_conversation():
    env = make("multi_turn_base")
    _, info = run(env.reset(options={"task_id": "multi_turn_base_0"}))
    start = info["state_key"]
    assert run(env.step(call("ls"))).info["state_key"] == start  # reading changes nothing
    moved = run(env.step(call("mkdir", dir_name="fresh"))).info["state_key"]
    assert moved != start
    other = make("multi_turn_base")
    _, info2 = run(other.reset(options={"task_id": "multi_turn_base_0"}))
    assert info2["state_key"] == start
    assert run(other.step(call("mkdir", dir_name="fresh"))).info["state_key"] == moved


def test_long_context_results_are_not_cut():
    import agentgym

    assert agentgym.spec("bfcl/MultiTurn-v0").max_observation_chars is None


@pytest.mark.parametrize("category", MULTI_TURN)
def test_check_env_is_clean(category):
    run(check_env(make(category), make_env=lambda: make(category)))


@pytest.mark.parametrize("category", ["simple_python", "live_irrelevance", *MULTI_TURN])
def test_gymnasium_checker_is_clean(category):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gymnasium.make(env_id(category), category=category)
        gymnasium_check_env(env.unwrapped)
        env.close()
    assert [str(w.message) for w in caught] == []


def test_state_key_stays_cheap_when_folders_share_their_contents():
    """BFCL's ``cp`` copies a folder's entries by reference, so a hundred calls make a tree
    with a million paths in a few kilobytes; ``state_key`` reads a bounded number of values
    (without the bound it took minutes)."""
    env = make("multi_turn_base")
    run(env.reset(options={"task_id": "multi_turn_base_0"}))
    calls = [("touch", {"file_name": "f"}), ("mkdir", {"dir_name": "n0"}),
             ("cp", {"source": "f", "destination": "n0"})]
    for i in range(10):  # n{i+1} holds four folders sharing n{i}'s entries: 4**10 paths
        calls += [("mkdir", {"dir_name": f"n{i + 1}"}),
                  ("mv", {"source": f"n{i}", "destination": "c0"})]
        for j in range(4):
            calls += [("cp", {"source": f"c{j}", "destination": f"n{i + 1}"}),
                      ("mv", {"source": f"c{j}", "destination": f"c{j + 1}"})]
        calls.append(("rm", {"file_name": "c4"}))
    action = Message("assistant", "", tool_calls=tuple(
        ToolCall(f"x{i}", name, args) for i, (name, args) in enumerate(calls)))
    result = run(env.step(action))
    assert not [m.content for m in result.observation if "error" in m.content.lower()]
    assert result.info["state_key"]  # about 4**10 paths to the file: the walk stops early
    assert '"..."' in json.dumps(env._executor.state())
