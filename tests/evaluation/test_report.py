import json

import pytest
from typer.testing import CliRunner

from agentgym.cli import app
from agentgym.evaluation import register_suite, suites
from agentgym.evaluation.compare import bootstrap_diff, compare, load_run, newcombe
from agentgym.evaluation.report import (
    curve_from_metrics,
    learning_curve_from_run,
    markdown_table,
    wilson,
)

PNG = b"\x89PNG\r\n\x1a\n"


def test_wilson_and_newcombe_match_published_values():
    # Newcombe (1998), Table II example (a): 56/70 - 48/80, method 10: 0.0524 to 0.3339.
    d, lo, hi = newcombe(48, 80, 56, 70)
    assert d == pytest.approx(0.2)
    assert (lo, hi) == (pytest.approx(0.0524, abs=5e-4), pytest.approx(0.3339, abs=5e-4))
    # Wilson (no continuity correction) for 81/263 (Newcombe 1998b): 0.2553 to 0.3662.
    assert wilson(81, 263) == (pytest.approx(0.2553, abs=5e-4), pytest.approx(0.3662, abs=5e-4))
    assert wilson(0, 0) == (0.0, 1.0)


def test_bootstrap_interval_covers_the_difference():
    d, lo, hi = bootstrap_diff([0.0, 1.0] * 20, [1.0] * 40)
    assert d == pytest.approx(0.5) and lo < 0.5 <= hi and lo > 0.2
    d, lo, hi = bootstrap_diff([1.0, 0.0, 1.0], [1.0, 0.0, 1.0])
    assert d == 0.0 and lo <= 0.0 <= hi


@pytest.fixture
def mini_suite():
    """Two built-in family suites (all-local grows with every family: too slow here)."""
    before = dict(suites._REGISTERED)
    register_suite({"name": "report-mini", "includes": ["arithmetic", "sokoban"]})
    yield "report-mini"
    suites._REGISTERED.clear()
    suites._REGISTERED.update(before)


def run_eval(tmp_path, name, policy, *extra):
    out = tmp_path / name
    result = CliRunner().invoke(app, ["eval", "--suite", "report-mini", "--policy", policy,
                                      "--tasks", "2", "--out", str(out), *extra])
    assert result.exit_code == 0, result.output
    return out


def test_eval_compare_and_report_files(tmp_path, mini_suite):
    good = run_eval(tmp_path, "scripted", "scripted")
    bad = run_eval(tmp_path, "random", "random", "-k", "2")
    for out in (good, bad):
        assert (out / "success.png").read_bytes().startswith(PNG)
        assert (out / "results.json").exists() and (out / "results.jsonl").exists()
    report = (good / "report.md").read_text()
    assert "| **overall** |" in report and "success.png" in report
    results = json.loads((bad / "results.json").read_text())
    assert results["k"] == 2 and results["temperature"] == 1.0
    assert results["metrics"]["overall"]["episodes"] == 2 * 2 * len(results["suite"]["entries"])
    assert "pass@2" in markdown_table(results)
    assert {"arithmetic", "mental-math", "sokoban", "overall"} <= set(results["metrics"])

    a, rewards_a = load_run(bad)
    b, rewards_b = load_run(good)
    rows = compare(a, b, rewards_a, rewards_b)
    assert rows["overall"]["success"].diff == pytest.approx(
        b["metrics"]["overall"]["success_rate"] - a["metrics"]["overall"]["success_rate"])
    assert rows["overall"]["success"].significant  # scripted beats random on every env
    result = CliRunner().invoke(app, ["compare", str(bad), str(good)])
    assert result.exit_code == 0, result.output
    assert "Newcombe" in result.output and "overall" in result.output
    assert "warning" in result.output  # different entries (rollouts) are flagged


def test_several_checkpoints_give_a_learning_curve(tmp_path):
    out = tmp_path / "curve"
    result = CliRunner().invoke(app, ["eval", "--suite", "sokoban", "--policy", "random",
                                      "--policy", "scripted", "--tasks", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "learning_curve.png").read_bytes().startswith(PNG)
    assert len(list(out.glob("*/results.json"))) == 2


def test_learning_curve_from_a_training_run(tmp_path):
    rows = [{"step": 0, "eval/success_rate": 0.2, "eval/all-local/success_rate": 0.1,
             "eval/all-local/sokoban/success_rate": 0.0},
            {"step": 1, "loss": 0.3, "reward_mean": 0.1},
            {"step": 2, "eval/success_rate": 0.5, "eval/all-local/success_rate": 0.3,
             "eval/all-local/sokoban/success_rate": 0.25}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    series = curve_from_metrics(rows)
    assert series == {"held-out": [(0.0, 0.2), (2.0, 0.5)], "all-local": [(0.0, 0.1), (2.0, 0.3)],
                      "all-local/sokoban": [(0.0, 0.0), (2.0, 0.25)]}
    path = learning_curve_from_run(tmp_path, tmp_path / "curve.png")
    assert path.read_bytes().startswith(PNG)
    result = CliRunner().invoke(app, ["eval", "--train-run", str(tmp_path), "--out",
                                      str(tmp_path / "report")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report" / "learning_curve.png").read_bytes().startswith(PNG)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 1}) + "\n")
    with pytest.raises(ValueError, match="set env.eval_seeds or eval.suite"):
        learning_curve_from_run(tmp_path / "empty", tmp_path / "x.png")


def test_cli_errors_are_one_clear_line(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "agentgym.cli", "eval", "--suite", "all-locl",
                           "--policy", "random", "--out", str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    assert "did you mean 'all-local'" in proc.stderr and "Traceback" not in proc.stderr
    listing = CliRunner().invoke(app, ["eval", "--list"])
    assert listing.exit_code == 0 and "all-local" in listing.output
