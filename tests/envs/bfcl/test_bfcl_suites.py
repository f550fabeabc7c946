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
        "Multi Turn Base": {"pass@1": 0.1, "episodes": 200, "errors": 1},
        "overall": {"pass@1": 0.37},
        "agentgym/Sokoban-v0": {"pass@1": 1.0}}}
    acc = bfcl_accuracies(results)
    assert acc == {"Non-Live Python Simple AST": 0.5, "Multi Turn Base": 0.1,
                   MEAN_LABEL: 0.3}  # not the pooled 0.37, and other envs left out
    (tmp_path / "results.json").write_text(json.dumps(results))
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| Multi Turn Base | 10.0% | 200 | 1 |" in out and "30.0%" in out
    assert main([str(tmp_path / "missing")]) == 2
