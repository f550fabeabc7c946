import pytest
from bfcl_helpers import make, play_expert, run

from agentgym import Message, ToolCall
from agentgym.checker import check_env
from agentgym.envs.bfcl import SINGLE_TURN, task_ids

# Entries whose own possible answer fails BFCL's own checker (the answer leaves out a
# parameter the function doc requires, or uses one the function does not have): no reply
# can pass them, in BFCL or here.
UNSATISFIABLE = {
    "live_simple_106-63-0": "simple_function_checker:missing_required",
    "live_simple_112-68-0": "simple_function_checker:missing_required",
    "live_multiple_507-149-4": "simple_function_checker:missing_required",
    "live_multiple_862-181-3": "simple_function_checker:unexpected_param",
    "live_multiple_964-207-0": "simple_function_checker:missing_required",
}
SAMPLE = 8  # entries per category in the default run; the sweep takes them all


def replay(category, ids):
    env = make(category)
    failures = {}
    for task_id in ids:
        result, steps = run(play_expert(env, task_id))
        assert steps == 1 and result.terminated
        if result.reward != 1.0:
            failures[task_id] = result.info["bfcl"]["error_type"]
    run(env.aclose())
    return failures


def spread(ids, n):
    return ids[:: max(1, len(ids) // n)][:n]


@pytest.mark.parametrize("category", SINGLE_TURN)
def test_ground_truth_scores_full_marks_on_a_sample(category):
    ids = [i for i in spread(task_ids(category), SAMPLE) if i not in UNSATISFIABLE]
    assert replay(category, ids) == {}


@pytest.mark.sweep
@pytest.mark.parametrize("category", SINGLE_TURN)
def test_ground_truth_scores_full_marks_on_every_entry(category):
    failures = replay(category, task_ids(category))
    assert failures == {i: e for i, e in UNSATISFIABLE.items() if i in task_ids(category)}


def test_the_unsatisfiable_entries_fail_bfcls_checker_on_their_own_answer():
    for task_id, error_type in UNSATISFIABLE.items():
        category = task_id.rsplit("_", 1)[0]
        assert replay(category, [task_id]) == {task_id: error_type}


def test_tools_are_bfcls_function_calling_form():
    env = make("simple_python")
    run(env.reset(options={"task_id": "simple_python_1"}))
    (tool,) = env.tools
    assert tool.name == "math_factorial"  # "." is not allowed in OpenAI tool names
    assert tool.parameters["type"] == "object"
    assert tool.description.endswith("Note that the provided function is in Python 3 syntax.")


def test_irrelevance_and_relevance_follow_bfcl():
    env = make("irrelevance")
    run(env.reset(seed=0))
    declined = run(env.step(Message("assistant", "No function fits this question.")))
    assert declined.reward == 1.0 and declined.info["valid"] is True  # declining is the answer
    run(env.reset(seed=0))
    name = env.tools[0].name
    called = run(env.step(Message("assistant", "", tool_calls=(ToolCall("c", name, {}),))))
    assert called.reward == 0.0
    assert called.info["bfcl"]["error_type"] == "irrelevance_error:decoder_success"
    rel = make("live_relevance")
    run(rel.reset(seed=0))
    assert run(rel.step(Message("assistant", "I won't call anything."))).reward == 0.0


@pytest.mark.parametrize("category", ["irrelevance", "live_irrelevance"])
def test_a_correct_abstention_is_valid_rewarded_and_never_penalised(category):
    from agentgym import Step, Trajectory
    from agentgym.trainers.advantages.base import step_scores

    env = make(category)
    prompt, _ = run(env.reset(seed=3))
    action = Message("assistant", "None of these functions can answer that.")
    result = run(env.step(action))
    assert result.reward == 1.0 and result.info["valid"] is True and result.info["success"]
    assert "note:" not in result.observation[0].content
    traj = Trajectory("t", result.info["task_id"], "g", tuple(prompt),
                      (Step(0, action, result, valid=result.valid),), status="terminated")
    assert step_scores(traj, invalid_penalty=0.5).tolist() == [1.0]


def test_prose_where_a_call_is_due_is_a_valid_wrong_answer():
    env = make("simple_python")
    run(env.reset(options={"task_id": "simple_python_1"}))
    result = run(env.step(Message("assistant", "the answer is 120")))
    assert result.terminated and result.reward == 0.0 and result.info["valid"] is True


@pytest.mark.parametrize("action, problem", [
    (Message("assistant",
             '<tool_call>{"name": "math_factorial", "arguments": {"number": </tool_call>'), ""),
    (Message("assistant", "", tool_calls=(ToolCall("c", "math_factorail", {"number": 5}),)),
     "did you mean 'math_factorial'"),
    (Message("assistant", "", tool_calls=(ToolCall("c", "math_factorial", {"number": "5"}),)),
     "is not of type 'integer'"),
    (Message("assistant", "", tool_calls=(ToolCall("c", "math_factorial", {"n": 5}),)),
     "has no parameter 'n'"),
    (Message("assistant", "", tool_calls=(ToolCall("c", "math_factorial", "5"),)),  # type: ignore[arg-type]
     "must be a JSON object"),
])
def test_malformed_replies_are_invalid_observations_scored_by_bfcl(action, problem):
    env = make("simple_python")
    run(env.reset(options={"task_id": "simple_python_1"}))
    result = run(env.step(action))
    assert result.terminated and result.reward == 0.0 and result.info["valid"] is False
    assert problem in result.observation[0].content


def test_a_correct_structured_call_is_valid_and_scores_one():
    env = make("simple_python")
    run(env.reset(options={"task_id": "simple_python_1"}))
    ok = run(env.step(Message("assistant", "", tool_calls=(
        ToolCall("c", "math_factorial", {"number": 5}),))))
    assert ok.reward == 1.0 and ok.info["valid"] is True and ok.info["success"] is True
    assert ok.info["bfcl_version"]


def test_a_call_written_as_text_is_read_like_a_structured_one():
    env = make("simple_python")
    run(env.reset(options={"task_id": "simple_python_1"}))
    text = '<tool_call>{"name": "math_factorial", "arguments": {"number": 5}}</tool_call>'
    assert run(env.step(Message("assistant", text))).reward == 1.0


@pytest.mark.parametrize("category", SINGLE_TURN)
def test_check_env_is_clean(category):
    run(check_env(make(category), make_env=lambda: make(category)))
