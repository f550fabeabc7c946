"""Eval reports count errors in the headline, keep real wall time, resume without redoing
finished episodes, and check for the plotting extra before any episode runs."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentgym.errors import MissingExtraError
from agentgym.evaluation import EvalConfig, evaluate, run_suite
from agentgym.evaluation import report as report_module
from agentgym.evaluation import runner as runner_module
from agentgym.evaluation.suites import register_suite

from .test_runner import CoinEnv, Guesser, clean_registry, coin_suite  # noqa: F401


def results_with_errors() -> dict:
    overall = {"episodes": 40, "errors": 20, "successes": 12, "success_rate": 0.6}
    return {"suite_tag": "s@1", "policy": "p", "metrics": {"overall": overall}, "wall_s": 61.0}


def test_headline_gives_success_over_all_and_over_scored() -> None:
    line = report_module.headline(results_with_errors())
    assert line == ("success 12/40 = 30.0% of all episodes (the 20 errors count as failures); "
                    "12/20 = 60.0% of the 20 scored; wall time 61.0 s")
    clean = {**results_with_errors(), "metrics": {"overall": {
        "episodes": 4, "errors": 0, "successes": 4, "success_rate": 1.0}}}
    assert report_module.headline(clean) == "success 4/4 = 100.0% of all episodes; wall time 61.0 s"


def test_report_md_leads_with_the_headline(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    results = results_with_errors()
    results["metrics"] = {"a": {**results["metrics"]["overall"], "success_rate": 0.6},
                          "overall": results["metrics"]["overall"]}
    report_module.write_report(results, tmp_path)
    text = (tmp_path / "report.md").read_text()
    assert "30.0% of all episodes" in text.split("|")[0]


def test_a_resumed_eval_keeps_earlier_errors_unless_asked(tmp_path) -> None:
    CoinEnv.attempts.clear()
    suite = coin_suite(broken=(0,))
    asyncio.run(run_suite(suite, Guesser(), tmp_path, retries=0, rerun_errors=False))
    assert CoinEnv.attempts[0] == 4
    again = asyncio.run(run_suite(suite, Guesser(), tmp_path, retries=0, rerun_errors=False))
    assert CoinEnv.attempts[0] == 4 and len(again) == 24  # nothing ran again
    assert sum(not t.scorable for t in again) == 4
    asyncio.run(run_suite(suite, Guesser(), tmp_path, retries=0, rerun_errors=True))
    assert CoinEnv.attempts[0] == 8


def test_wall_time_is_real_and_survives_an_interrupted_run(tmp_path, clean_registry) -> None:  # noqa: F811
    pytest.importorskip("matplotlib")
    register_suite({"name": "walls", "entries": [
        {"env": "agentgym/MentalMath-v0", "tasks": 2, "split": "test", "name": "mm"}]})
    config = EvalConfig(suite="walls", policy="scripted")
    first = evaluate(config, tmp_path, log=lambda m: None)
    assert first["wall_s"] > 0 and json.loads((tmp_path / "timing.json").read_text())["wall_s"] > 0
    # A run that died before its report (no results.json) still counts its time.
    (tmp_path / "results.json").unlink()
    (tmp_path / "timing.json").write_text(json.dumps({"wall_s": 100.0}))
    messages: list[str] = []
    second = evaluate(config, tmp_path, log=messages.append)
    assert second["wall_s"] >= 100.0 and second["metrics"]["overall"]["episodes"] == 2
    assert any("resuming: 2 episodes" in m for m in messages)


def test_a_missing_plotting_extra_fails_before_the_model_loads(tmp_path, monkeypatch,
                                                              clean_registry) -> None:  # noqa: F811
    register_suite({"name": "early", "entries": [
        {"env": "agentgym/MentalMath-v0", "tasks": 1, "split": "test", "name": "mm"}]})

    def no_matplotlib() -> None:
        raise MissingExtraError("matplotlib", "eval", "eval report plots")

    def must_not_load(*args: object) -> None:
        raise AssertionError("the model was loaded before the extras were checked")

    monkeypatch.setattr(report_module, "_pyplot", no_matplotlib)
    monkeypatch.setattr(runner_module, "_make_agent", must_not_load)
    with pytest.raises(MissingExtraError, match=r"pip install 'agentgym\[eval\]'"):
        evaluate(EvalConfig(suite="early", policy="smollm2"), tmp_path, log=lambda m: None)
