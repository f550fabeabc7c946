import json

from agentgym.envs.bfcl import CATEGORIES, MULTI_TURN, task_ids
from agentgym.envs.bfcl.leaderboard import MEAN_LABEL, bfcl_accuracies, main
from agentgym.evaluation.suites import get_suite


def test_bfcl_suite_has_every_category_under_its_leaderboard_name_with_every_entry():
    suite = get_suite("bfcl")
    assert [e.name for e in suite.entries] == [c.label for c in CATEGORIES.values()]
    for entry in suite.entries:
        category = entry.kwargs["category"]
        assert CATEGORIES[category].label == entry.name
        assert entry.seeds == tuple(range(len(task_ids(category))))
        assert entry.env == ("bfcl/MultiTurn-v0" if category in MULTI_TURN
                             else "bfcl/SingleTurn-v0")
    multi = get_suite("bfcl-multi-turn")
    assert [e.kwargs["category"] for e in multi.entries] == list(MULTI_TURN)


def test_leaderboard_table_gives_each_category_and_the_unweighted_mean(tmp_path, capsys):
    results = {"metrics": {
        "Non-Live Python Simple AST": {"pass@1": 0.5, "episodes": 400, "errors": 0},
        "Multi Turn Base": {"pass@1": 0.1, "episodes": 201, "errors": 1, "successes": 20},
        "overall": {"pass@1": 0.37},
        "agentgym/Sokoban-v0": {"pass@1": 1.0}}}
    acc = bfcl_accuracies(results)
    assert acc == {"Non-Live Python Simple AST": 0.5, "Multi Turn Base": 0.1,
                   MEAN_LABEL: 0.3}  # not the pooled 0.37, and other envs left out
    (tmp_path / "results.json").write_text(json.dumps(results))
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| Multi Turn Base | 10.0% | 7% to 15% | 201 | 1 |" in out and "30.0%" in out
    assert "| Non-Live Python Simple AST | 50.0% |  | 400 | 0 |" in out  # no counts: no interval
    assert main([str(tmp_path / "missing")]) == 2


def test_leaderboard_reads_the_episodes_of_a_run_stopped_before_its_report(tmp_path, capsys):
    from agentgym import Message, Step, StepResult, Trajectory
    from agentgym.evaluation.metrics import group_id

    lines = []
    for i, reward in enumerate([1.0, 0.0, 1.0]):
        result = StepResult((Message("user", "ok"),), reward, terminated=True)
        step = Step(0, Message("assistant", "x"), result)
        traj = Trajectory(f"t{i}", f"multi_turn_base_{i}", group_id("Multi Turn Base", i),
                          (Message("user", "q"),), (step,), status="terminated",
                          seed=i).with_outcome()
        lines.append(traj.to_json())
    (tmp_path / "results.jsonl").write_text("\n".join(lines) + "\n")
    assert main([str(tmp_path)]) == 0
    assert "| Multi Turn Base | 66.7% | 21% to 94% | 3 | 0 |" in capsys.readouterr().out



def test_eval_report_gives_each_category_by_leaderboard_name_and_the_unweighted_mean(tmp_path):
    from typer.testing import CliRunner

    from agentgym.cli import app
    from agentgym.evaluation.metrics import MEAN_OF_ENTRIES

    out = tmp_path / "bfcl-expert"
    result = CliRunner().invoke(app, ["eval", "--suite", "bfcl", "--policy", "expert",
                                      "--tasks", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "unweighted mean over the 15 entries" in result.output
    report = (out / "report.md").read_text()
    results = json.loads((out / "results.json").read_text())
    labels = [c.label for c in CATEGORIES.values()]
    rows = [line.split(" | ")[0].lstrip("| ").strip("*") for line in report.splitlines()
            if line.startswith("| ")][1:]
    assert rows == [*labels, MEAN_OF_ENTRIES, "overall"]  # every category, then the mean
    per_category = [results["metrics"][label]["pass@1"] for label in labels]
    mean = sum(per_category) / len(per_category)
    assert mean == bfcl_accuracies(results)[MEAN_LABEL]
    assert f"| **{MEAN_OF_ENTRIES}** | - | {100 * mean:.1f}% |" in report
    assert f"unweighted mean over the {len(labels)} entries" in report and \
        f"pass@1 {100 * mean:.1f}%" in report
