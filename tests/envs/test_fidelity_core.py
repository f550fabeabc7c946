"""The shared core of the differential harnesses (agentgym.fidelity): what is a difference."""

from __future__ import annotations

import json
import re

import pytest

from agentgym import Message
from agentgym.fidelity import (
    StepRecord,
    compare,
    records_from_trajectory,
    run_cli,
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


def _cli(argv, batch=None):
    """The shared command line over a fake family: episode i differs when i is in --bad."""
    played, bad = [], set()

    def arguments(parser):
        parser.add_argument("--episodes", type=int, default=3)
        parser.add_argument("--bad", type=int, nargs="*", default=[])

    async def play(cases):
        played.append(list(cases))
        return [_compare(_with(1, reward=1.0) if i in bad else list(REF)) for i in cases]

    def cases(args):
        bad.update(args.bad)
        return list(range(args.seed, args.seed + args.episodes))

    status = run_cli(family="sw", module="agentgym.envs.sw.fidelity", doc="One line.\n\nMore.",
                     arguments=arguments, cases=cases, play=play, batch=batch, argv=argv)
    return status, played


def test_the_shared_command_line_batches_reports_and_writes(tmp_path, capsys):
    out = tmp_path / "c.jsonl"
    status, played = _cli(["--episodes", "5", "--seed", "10", "--bad", "12", "--batch", "2",
                           "--out", str(out)], batch=30)
    assert status == 1 and played == [[10, 11], [12, 13], [14]]
    lines = capsys.readouterr().out.splitlines()
    assert [re.sub(r"\(\d+ s\)", "(T)", ln) for ln in lines if ln.startswith("after")] == [
        "after 2 of 5: sw: 2 episodes over 1 task types: 2 agree, 0 differ; success "
        "reference 2/2, agentgym 2/2 (T)",
        "after 4 of 5: sw: 4 episodes over 1 task types: 3 agree, 1 differ (boil: 1); "
        "success reference 4/4, agentgym 4/4 (T)",
        "after 5 of 5: sw: 5 episodes over 1 task types: 4 agree, 1 differ (boil: 1); "
        "success reference 5/5, agentgym 5/5 (T)"]
    assert "| boil | 5 | 4 | 5 | 5 |" in lines
    assert "boil variation 0: step 1 reward: reference 90.0 != agentgym 1.0" in lines
    assert re.fullmatch(r"sw: 5 episodes .* agentgym 5/5 \(\d+ s\)", lines[-1])
    assert [json.loads(ln)["agree"] for ln in out.read_text().splitlines()] == [
        True, True, False, True, True]


def test_without_batches_one_play_and_only_the_summary(capsys):
    status, played = _cli(["--episodes", "3"])
    assert status == 0 and played == [[0, 1, 2]]
    lines = capsys.readouterr().out.splitlines()
    assert not any(ln.startswith("after") for ln in lines)
    assert lines[-1].startswith("sw: 3 episodes over 1 task types: 3 agree, 0 differ")
    with pytest.raises(SystemExit):
        _cli(["--batch", "2"])  # no --batch where the family plays all at once
    assert "unrecognized arguments: --batch 2" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _cli(["--help"], batch=30)
    usage = capsys.readouterr().out
    assert usage.startswith("usage: python -m agentgym.envs.sw.fidelity") and "One line." in usage
    assert re.findall(r"\[(--[a-z]+)", usage) == [
        "--episodes", "--bad", "--seed", "--batch", "--out"]
