"""The shared core of the differential harnesses (agentgym.fidelity): what is a difference."""

from __future__ import annotations

import pytest

from agentgym import Message
from agentgym.fidelity import (
    StepRecord,
    compare,
    records_from_trajectory,
    summarize,
    summary_line,
    table,
)
from agentgym.types import Step, StepResult, ToolCall, Trajectory

REF = (StepRecord("open door", "The door is open.", 0.0, 10.0, False, False),
       StepRecord("focus on x", "You focus on x.", 90.0, 100.0, True, False))


def _with(i: int, **change: object) -> list[StepRecord]:
    steps = list(REF)
    steps[i] = StepRecord(**{**steps[i].to_dict(), **change})  # type: ignore[arg-type]
    return steps


def _compare(ours, **kw):
    return compare("sw", "boil", "variation 0", REF, ours, success=lambda s: s >= 100, **kw)


def test_identical_plays_agree():
    c = _compare(list(REF))
    assert c.agree and c.reference_success and c.agentgym_success
    assert c.reference_score == c.agentgym_score == 100.0


@pytest.mark.parametrize("field, value", [
    ("action", "focus on y"), ("observation", "You focus on y."), ("reward", 80.0),
    ("terminated", False), ("truncated", True)])
def test_each_step_field_is_compared(field, value):
    c = _compare(_with(1, **{field: value}))
    assert [(m.step, m.field) for m in c.mismatches] == [(1, field)]


def test_a_different_score_is_a_step_and_a_final_and_a_success_mismatch():
    c = _compare(_with(1, score=90.0))
    assert [(m.step, m.field) for m in c.mismatches] == [
        (1, "score"), (-1, "final_score"), (-1, "success")]
    assert not c.agentgym_success and "reference 100.0 != agentgym 90.0" in str(c.mismatches[0])


def test_length_differences_are_named_and_the_common_prefix_compared():
    c = _compare(list(REF[:1]))
    assert [(m.step, m.field) for m in c.mismatches][0] == (-1, "steps")
    assert c.mismatches[0].reference == 2 and c.mismatches[0].agentgym == 1


def test_normalize_and_tolerance_absorb_documented_differences():
    ours = _with(0, observation="  the door is open.\n", reward=1e-12)
    assert not _compare(ours).agree
    assert _compare(ours, normalize=lambda t: t.strip().lower()).agree


def test_given_verdicts_win_and_a_missing_rule_is_a_clear_error():
    c = compare("x", "t", "e", REF, list(REF), reference_success=True, agentgym_success=False)
    assert [(m.step, m.field) for m in c.mismatches] == [(-1, "success")]
    with pytest.raises(ValueError, match="pass success="):
        compare("x", "t", "e", REF, list(REF))


def test_records_from_a_trajectory_skip_summaries_and_read_tool_calls():
    call = Message("assistant", "", tool_calls=(ToolCall("c", "turn_left", {}),))
    steps = (
        Step(0, Message("assistant", "<action>look</action>"),
             StepResult((Message("user", "a room"),), 0.0, info={"score": 5})),
        Step(1, Message("assistant", "summary"), StepResult((Message("user", "ctx"),), None),
             summary=True),
        Step(2, call, StepResult((Message("tool", "ok", tool_call_id="c"),), 1.0,
                                 terminated=True)),
    )
    traj = Trajectory("id", "t", "g", (), steps, status="terminated")
    records = records_from_trajectory(traj)
    assert records == [StepRecord("<action>look</action>", "a room", 0.0, 5.0, False, False),
                       StepRecord("turn_left()", "ok", 1.0, None, True, False)]


def test_summary_rows_line_and_table():
    good = _compare(list(REF))
    bad = compare("sw", "melt", "variation 1", REF, _with(0, observation="x"),
                  success=lambda s: s >= 100)
    rows = summarize([good, bad, good])
    assert [(r.task, r.episodes, r.agree, r.reference_success) for r in rows] == [
        ("boil", 2, 2, 2), ("melt", 1, 0, 1)]
    line = summary_line("sw", [good, bad])
    assert line.startswith("sw: 2 episodes over 2 task types: 1 agree, 1 differ (melt: 1)")
    assert "| melt | 1 | 0 | 1 | 1 |" in table(rows)
    assert bad.to_dict()["mismatches"] == ["step 0 observation: reference 'The door is open.' "
                                           "!= agentgym 'x'"]
