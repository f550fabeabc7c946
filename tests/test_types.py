"""Core records: exact JSON round trips, schema checks, outcome rule, grouping."""

from __future__ import annotations

import json

import pytest

from agentgym import (
    SCHEMA_VERSION,
    Group,
    Message,
    SchemaError,
    Step,
    StepResult,
    StepTokens,
    ToolCall,
    ToolSpec,
    Trajectory,
)

ADD_SPEC = ToolSpec(
    "add", "Add two integers.",
    {"type": "object",
     "properties": {"a": {"type": "integer", "description": "First."},
                    "b": {"type": "integer", "description": "Second."}},
     "required": ["a", "b"]},
)


def make_traj(**over: object) -> Trajectory:
    call = ToolCall("call_0", "add", {"a": 1, "b": [2, {"c": None}]})
    steps = (
        Step(
            index=0,
            action=Message("assistant", "<tool_call>…</tool_call>", tool_calls=(call,)),
            result=StepResult(
                (Message("tool", "3", tool_call_id="call_0", name="add"),),
                reward=None, info={"valid": True, "state_key": "s1", "nested": {"x": [1, 2]}},
            ),
            tokens=StepTokens((1, 2, 3), (4, 5), (-0.1, -2.5e-7)),
            state_key="s0",
        ),
        Step(
            index=1,
            action=Message("assistant", "done ✓ — ünïcödé"),
            result=StepResult((Message("user", "bye"),), reward=0.75, terminated=True,
                              info={"outcome_reward": 1.0}),
            tokens=StepTokens((1, 2, 3, 4, 5, 6), (7,), ()),
            state_key="s1",
            valid=False,
        ),
    )
    fields: dict[str, object] = dict(
        id="t-1", task_id="task-7", group_id="g-1",
        prompt=(Message("system", "You add."), Message("user", "1+2?")),
        steps=steps, status="terminated", outcome_reward=1.0,
        metrics={"wall_s": 1.25, "tokens": 17}, env_id="demo/Add-v0", seed=3,
        tools=(ADD_SPEC,),
    )
    fields.update(over)
    return Trajectory(**fields)  # type: ignore[arg-type]


class TestRoundTrip:
    def test_full_trajectory_is_exact(self) -> None:
        traj = make_traj()
        line = traj.to_json()
        assert "\n" not in line
        back = Trajectory.from_json(line)
        assert back == traj
        assert back.to_json() == line
        assert back.steps[0].tokens == StepTokens((1, 2, 3), (4, 5), (-0.1, -2.5e-7))
        assert back.steps[0].action.tool_calls[0].arguments == {"a": 1, "b": [2, {"c": None}]}
        assert back.steps[1].valid is False
        assert back.tools == (ADD_SPEC,)
        assert back.metrics == {"wall_s": 1.25, "tokens": 17}
        assert back.seed == 3 and back.env_id == "demo/Add-v0"

    def test_error_trajectory(self) -> None:
        traj = make_traj(status="error", outcome_reward=None,
                         error="RuntimeError('container died')", steps=())
        back = Trajectory.from_json(traj.to_json())
        assert back == traj
        assert back.status == "error" and back.outcome_reward is None
        assert back.error == "RuntimeError('container died')"
        assert not back.scorable

    def test_line_holds_schema_version_and_is_json(self) -> None:
        data = json.loads(make_traj().to_json())
        assert data["schema_version"] == SCHEMA_VERSION == 1
        assert data["steps"][0]["tokens"] == {"prompt_ids": [1, 2, 3], "completion_ids": [4, 5],
                                              "logprobs": [-0.1, -2.5e-7]}
        assert data["steps"][1]["result"]["reward"] == 0.75

    def test_lone_surrogates_still_give_a_utf8_line(self) -> None:
        bad = b"\xff\xfe".decode("utf-8", "surrogateescape")
        traj = make_traj(prompt=(Message("user", f"raw {bad} ünï"),))
        line = traj.to_json()
        line.encode("utf-8")  # a JSONL writer can store it
        assert Trajectory.from_json(line) == traj
        assert "ünï" in make_traj().to_json()  # readable when nothing needs escaping

    def test_minimal_trajectory(self) -> None:
        traj = Trajectory("a", "b", "c", [Message("user", "hi")])
        assert traj.prompt == (Message("user", "hi"),)  # lists become tuples
        assert Trajectory.from_json(traj.to_json()) == traj

    def test_message_optional_fields_omitted(self) -> None:
        assert Message("user", "x").to_dict() == {"role": "user", "content": "x"}
        msg = Message("tool", "3", tool_call_id="c1", name="add")
        assert Message.from_dict(msg.to_dict()) == msg
        assert Message.from_dict({"role": "assistant", "content": None}).content == ""

    def test_toolspec_accepts_openai_form(self) -> None:
        assert ToolSpec.from_dict(ADD_SPEC.to_openai()) == ADD_SPEC
        assert ToolSpec.from_dict(ADD_SPEC.to_dict()) == ADD_SPEC
        assert ADD_SPEC.to_openai() == {"type": "function", "function": ADD_SPEC.to_dict()}

    def test_numpy_values_in_info_become_json(self) -> None:
        np = pytest.importorskip("numpy")
        result = StepResult((), reward=1.0, info={"n": np.int64(3), "x": np.float32(0.5),
                                                  "t": (1, 2)})
        data = json.loads(json.dumps(result.to_dict()))
        assert data["info"] == {"n": 3, "x": 0.5, "t": [1, 2]}


class TestSchemaErrors:
    def test_version_mismatch(self) -> None:
        data = make_traj().to_dict()
        data["schema_version"] = 99
        with pytest.raises(SchemaError) as info:
            Trajectory.from_json(json.dumps(data))
        msg = str(info.value)
        assert "99" in msg and f"version {SCHEMA_VERSION}" in msg
        assert "matching agentgym version" in msg

    def test_missing_version(self) -> None:
        data = make_traj().to_dict()
        del data["schema_version"]
        with pytest.raises(SchemaError, match="missing the field 'schema_version'"):
            Trajectory.from_dict(data)

    def test_missing_field_names_it(self) -> None:
        data = make_traj().to_dict()
        del data["task_id"]
        with pytest.raises(SchemaError, match="Trajectory is missing the field 'task_id'"):
            Trajectory.from_dict(data)

    def test_not_json(self) -> None:
        with pytest.raises(SchemaError, match="not a JSON trajectory line"):
            Trajectory.from_json("{not json")

    def test_not_an_object(self) -> None:
        with pytest.raises(SchemaError, match="expected a JSON object for Trajectory, got list"):
            Trajectory.from_json("[1, 2]")

    def test_schema_error_is_value_error(self) -> None:
        assert issubclass(SchemaError, ValueError)


class TestValidation:
    def test_error_trajectory_must_have_no_outcome(self) -> None:
        with pytest.raises(ValueError, match="outcome_reward must be None, got 0.0"):
            make_traj(status="error", outcome_reward=0.0)

    def test_error_trajectory_from_json_with_outcome_rejected(self) -> None:
        data = make_traj(status="error", outcome_reward=None).to_dict()
        data["outcome_reward"] = 0.0
        with pytest.raises(ValueError, match="unscorable"):
            Trajectory.from_dict(data)

    def test_bad_status(self) -> None:
        with pytest.raises(ValueError, match="status must be one of"):
            make_traj(status="done")

    def test_bad_role(self) -> None:
        with pytest.raises(ValueError, match="role must be one of"):
            Message("bot", "x")  # type: ignore[arg-type]

    def test_content_must_be_str(self) -> None:
        with pytest.raises(TypeError, match="content must be str, got int"):
            Message("user", 3)  # type: ignore[arg-type]

    @pytest.mark.parametrize("reward", [float("nan"), float("inf"), -float("inf")])
    def test_non_finite_reward(self, reward: float) -> None:
        with pytest.raises(ValueError, match="finite float or None"):
            StepResult((), reward=reward)

    def test_none_reward_allowed(self) -> None:
        assert StepResult(()).reward is None

    def test_logprobs_length(self) -> None:
        with pytest.raises(ValueError, match="logprobs has 1 entries but completion_ids has 2"):
            StepTokens((1,), (2, 3), (-0.5,))

    def test_logprobs_may_be_absent(self) -> None:
        tokens = StepTokens([1], [2, 3])
        assert tokens.logprobs == () and tokens.prompt_ids == (1,)

    def test_step_result_flags(self) -> None:
        assert StepResult((), truncated=True).done
        assert not StepResult(()).done
        assert StepResult((), info={"valid": False}).valid is False
        assert StepResult(()).valid is True


def _traj(rewards: list[float | None], *, info: dict | None = None, **over: object) -> Trajectory:
    steps = [
        Step(i, Message("assistant", str(i)),
             StepResult((), reward=r, terminated=i == len(rewards) - 1,
                        info=(info or {}) if i == len(rewards) - 1 else {}))
        for i, r in enumerate(rewards)
    ]
    fields: dict[str, object] = dict(id="t", task_id="k", group_id="g", prompt=(), steps=steps)
    fields.update(over)
    return Trajectory(**fields)  # type: ignore[arg-type]


class TestWithOutcome:
    def test_sum_counts_none_as_zero(self) -> None:
        assert _traj([0.5, None, 0.25]).with_outcome().outcome_reward == 0.75

    def test_reported_outcome_wins(self) -> None:
        traj = _traj([0.5, None, 0.25], info={"outcome_reward": 3})
        out = traj.with_outcome()
        assert out.outcome_reward == 3.0 and isinstance(out.outcome_reward, float)

    def test_reported_zero_wins_over_sum(self) -> None:
        assert _traj([1.0, 1.0], info={"outcome_reward": 0.0}).with_outcome().outcome_reward == 0.0

    def test_all_none(self) -> None:
        assert _traj([None, None]).with_outcome().outcome_reward == 0.0

    def test_no_steps(self) -> None:
        assert _traj([]).with_outcome().outcome_reward == 0.0

    def test_existing_outcome_kept(self) -> None:
        traj = _traj([1.0], outcome_reward=-2.0)
        assert traj.with_outcome() is traj

    def test_error_stays_unscored(self) -> None:
        traj = _traj([1.0], status="error")
        assert traj.with_outcome().outcome_reward is None

    def test_step_rewards(self) -> None:
        assert _traj([0.5, None]).step_rewards == (0.5, None)


class TestGroup:
    def test_from_trajectories_groups_by_group_id(self) -> None:
        trajs = [
            _traj([1.0], id="a1", task_id="A", group_id="gA"),
            _traj([0.0], id="b1", task_id="B", group_id="gB"),
            _traj([0.5], id="a2", task_id="A", group_id="gA"),
            _traj([0.5], id="a3", task_id="A", group_id="gA2"),
            _traj([0.0], id="b2", task_id="B", group_id="gB", status="error"),
        ]
        groups = Group.from_trajectories(trajs)
        assert [g.task_id for g in groups] == ["A", "B", "A"]
        assert [[t.id for t in g.trajectories] for g in groups] == [["a1", "a2"], ["b1", "b2"],
                                                                     ["a3"]]
        assert [t.id for t in groups[1].scorable] == ["b1"]

    def test_empty(self) -> None:
        assert Group.from_trajectories([]) == []

    def test_mixed_task_ids_rejected(self) -> None:
        with pytest.raises(ValueError, match="must share its task_id"):
            Group("A", (_traj([1.0], task_id="A"), _traj([1.0], task_id="B")))


class TestToChat:
    def test_assistant_with_tool_calls(self) -> None:
        msg = Message("assistant", "", tool_calls=[ToolCall("c1", "add", {"a": 1, "b": 2})])
        assert msg.tool_calls == (ToolCall("c1", "add", {"a": 1, "b": 2}),)
        assert msg.to_chat() == {
            "role": "assistant", "content": "",
            "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}],
        }

    def test_tool_and_plain_messages(self) -> None:
        assert Message("tool", "3", tool_call_id="c1", name="add").to_chat() == {
            "role": "tool", "content": "3", "tool_call_id": "c1", "name": "add"}
        assert Message("user", "hi").to_chat() == {"role": "user", "content": "hi"}

    def test_renders_with_a_hf_chat_template(self) -> None:
        """The chat form goes through transformers' renderer with a Hermes/Qwen-style template."""
        pytest.importorskip("jinja2")
        cu = pytest.importorskip("transformers.utils.chat_template_utils")
        template = (
            "{%- if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>\n"
            "{%- endif %}"
            "{%- for m in messages %}<|{{ m.role }}|>"
            "{%- if m.content %}{{ m.content }}{% endif %}"
            "{%- for tc in m.tool_calls or [] %}"
            "<tool_call>{\"name\": \"{{ tc.function.name }}\", \"arguments\": "
            "{{ tc.function.arguments | tojson }}}</tool_call>"
            "{%- endfor %}"
            "{%- if m.role == 'tool' %}[{{ m.tool_call_id }}]{% endif %}\n"
            "{%- endfor %}"
        )
        messages = [
            Message("user", "1+2?"),
            Message("assistant", "", tool_calls=(ToolCall("c1", "add", {"a": 1, "b": 2}),)),
            Message("tool", "3", tool_call_id="c1", name="add"),
        ]
        rendered, _ = cu.render_jinja_template(
            conversations=[[m.to_chat() for m in messages]], tools=[ADD_SPEC.to_openai()],
            chat_template=template,
        )
        text = rendered[0]
        call = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
        assert f"<|assistant|>{call}" in text
        assert "<|tool|>3[c1]" in text
        assert '"name": "add"' in text.split("</tools>")[0]
