import json

from typer.testing import CliRunner

from agentgym import Message, Step, StepResult, Trajectory
from agentgym.envs.bfcl import CATEGORIES
from agentgym.envs.bfcl.errors import CORRECT, EPISODE_ERROR, main, verdict
from agentgym.evaluation.metrics import group_id


def episode(task_id, info, status="terminated"):
    steps = () if status == "error" else (
        Step(0, Message("assistant", "x"), StepResult((Message("user", "ok"),), 0.0,
                                                       terminated=True, info=info)),)
    return Trajectory(f"t-{task_id}", task_id, group_id("any", 0), (Message("user", "q"),),
                      steps, status=status, seed=0)


def test_verdict_is_the_checkers_error_type_or_correct_or_an_episode_error():
    wrong = {"category": "parallel", "bfcl": {"passed": False,
                                              "error_type": "parallel:wrong_count"}}
    assert verdict(episode("parallel_3", wrong)) == ("parallel", "parallel:wrong_count")
    right = {"category": "simple_python", "bfcl": {"passed": True, "error_type": None}}
    assert verdict(episode("simple_python_0", right)) == ("simple_python", CORRECT)
    assert verdict(episode("live_multiple_9", {}, status="error")) == \
        ("live_multiple", EPISODE_ERROR)


def test_counts_of_a_real_eval_run_agree_with_its_report(tmp_path, capsys):
    """Random replies on BFCL's own entries: the checker's verdicts, counted per category."""
    from agentgym.cli import app

    out = tmp_path / "bfcl-random"
    result = CliRunner().invoke(app, ["eval", "--suite", "bfcl-single-turn", "--policy",
                                      "random", "--tasks", "3", "--out", str(out)])
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "results.json").read_text())["metrics"]
    assert main([str(out), str(out / "results.jsonl")]) == 0
    rows = [line.strip("|").split(" | ") for line in capsys.readouterr().out.splitlines()[2:]]
    for category in {c for c in CATEGORIES if CATEGORIES[c].kind != "multi_turn"}:
        label = CATEGORIES[category].label
        mine = [r for r in rows if r[0].strip() == label]
        assert sum(int(r[2]) for r in mine) == metrics[label]["episodes"] == 3
        correct = sum(int(r[2]) for r in mine if r[1] == CORRECT)
        assert correct == metrics[label]["successes"]
        assert all(r[2] == r[3].strip() for r in mine)  # the folder and its file: same counts
    assert any(r[1] not in (CORRECT, EPISODE_ERROR) for r in rows)  # the checker's own types
    assert main([str(tmp_path / "missing")]) == 2
