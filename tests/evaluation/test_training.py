import json

import pytest

from agentgym.errors import ConfigError
from agentgym.evaluation import register_suite, suites
from agentgym.evaluation.report import curve_from_metrics
from agentgym.evaluation.results import load_results
from agentgym.trainers.config import TrainConfig, from_dict


@pytest.fixture
def tiny_suite():
    before = dict(suites._REGISTERED)
    register_suite({"name": "tiny-train", "entries": [
        {"env": "agentgym/Sokoban-v0", "name": "sokoban", "tasks": 5, "seed": 500,
         "max_turns": 2, "rollouts": 3},
        {"env": "agentgym/MentalMath-v0", "name": "mm", "tasks": 1, "split": "test"}]})
    yield "tiny-train"
    suites._REGISTERED.clear()
    suites._REGISTERED.update(before)


def test_trainer_runs_the_suite_every_eval_every_steps(tmp_path, tiny_model_dir, tiny_suite):
    from agentgym.trainers.loop import train

    cfg = from_dict(TrainConfig, {
        "run_dir": str(tmp_path / "run"), "steps": 1, "save_every": 1, "eval_every": 1,
        "tensorboard": False, "env": {"id": "agentgym/Sokoban-v0", "max_turns": 2},
        "model": {"path": str(tiny_model_dir)},
        "rollout": {"tasks_per_step": 1, "group_size": 2, "max_tokens": 6},
        "eval": {"suite": tiny_suite, "tasks": 2}})
    run = train(cfg)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]  # before the first step, after the last
    for r in rows:
        for key in ("eval/tiny-train/success_rate", "eval/tiny-train/sokoban/success_rate",
                    "eval/tiny-train/mm/error_rate", "eval/tiny-train/invalid_action_rate"):
            assert 0.0 <= r[key] <= 1.0, (key, r)
        assert "eval/success_rate" not in r  # no held-out seeds configured
    for step in (0, 1):
        trajs = load_results(run / "eval" / f"step-{step}" / "results.jsonl").trajectories
        # eval.tasks caps the tasks; greedy evaluation runs one rollout per task.
        assert sorted((t.env_id, t.seed) for t in trajs) == [
            ("agentgym/MentalMath-v0", 0), ("agentgym/Sokoban-v0", 500),
            ("agentgym/Sokoban-v0", 501)]
    assert set(curve_from_metrics(rows)) >= {"tiny-train", "tiny-train/sokoban"}


def test_unknown_suite_in_the_training_config_fails_at_load():
    with pytest.raises(ConfigError, match="did you mean 'all-local'"):
        from_dict(TrainConfig, {"eval": {"suite": "all-lokal"}})
    with pytest.raises(ConfigError, match="eval.tasks must be >= 1"):
        from_dict(TrainConfig, {"eval": {"tasks": 0}})
