"""Held-out outcomes per task, and the paired interval of the gain before → after."""

import json

import pytest

from agentgym.trainers.heldout import gain_metrics, paired_gain, read_outcomes, run_gain
from agentgym.trainers.train_cli import held_out_line


def test_paired_gain_of_a_clear_improvement_excludes_zero():
    before = [0.0] * 60 + [1.0] * 40
    after = [1.0] * 30 + [0.0] * 30 + [1.0] * 40  # 30 tasks fixed, none broken
    gain, low, high = paired_gain(before, after)
    assert gain == pytest.approx(0.30)
    assert 0.2 < low < 0.3 < high < 0.4
    assert paired_gain(before, after) == (gain, low, high)  # seeded: the same every run


def test_no_change_has_an_interval_around_zero():
    before = [0.0, 1.0] * 50
    after = [1.0, 0.0] * 50  # as many fixed as broken
    gain, low, high = paired_gain(before, after)
    assert gain == 0.0 and low < 0 < high


def test_gain_pairs_only_tasks_scored_in_both():
    before = {"1": False, "2": True, "3": False}
    after = {"1": True, "2": True, "4": True}  # task 3 errored after, task 4 before
    m = gain_metrics(before, after)
    assert m["heldout/tasks"] == 2.0
    assert (m["heldout/success_before"], m["heldout/success_after"]) == (0.5, 1.0)
    with pytest.raises(ValueError, match="same tasks"):
        paired_gain([1.0], [])


def test_a_run_folder_gives_the_gain_line(tmp_path):
    (tmp_path / "heldout").mkdir()
    (tmp_path / "heldout" / "step-0.json").write_text(json.dumps({str(i): i < 30
                                                                  for i in range(100)}))
    (tmp_path / "heldout" / "step-5.json").write_text(json.dumps({str(i): i < 60
                                                                  for i in range(100)}))
    assert read_outcomes(tmp_path, 3) is None and run_gain(tmp_path, 3) == {}
    row = {"step": 5, "eval/success_rate": 0.6, **run_gain(tmp_path, 5)}
    line = held_out_line(row)
    assert line is not None
    assert "held-out success before/after: 30.0% → 60.0% (+30.0 points; 95% interval +" in line
    assert "paired bootstrap over 100 held-out tasks" in line


def test_shares_of_several_draws_pair_like_outcomes(tmp_path):
    """Tasks evaluated with several draws (``env.eval_draws``) carry their share of
    successes; older runs' 0/1 outcomes still pair with them."""
    (tmp_path / "heldout").mkdir()
    (tmp_path / "heldout" / "step-0.json").write_text(json.dumps({"1": False, "2": True}))
    (tmp_path / "heldout" / "step-4.json").write_text(json.dumps({"1": 0.5, "2": 0.75}))
    m = run_gain(tmp_path, 4)
    assert (m["heldout/success_before"], m["heldout/success_after"]) == (0.5, 0.625)
    assert m["heldout/gain"] == pytest.approx(0.125)


def test_an_env_mix_records_outcomes_and_gets_the_paired_gain(tiny_model_dir, tmp_path):
    """Each env's held-out tasks are kept under ``<label>:<seed>`` (two envs' seeds never
    pair with each other), and after the first step the gain over all of them comes."""
    import asyncio

    from agentgym.policies.hf import TransformersPolicy
    from agentgym.trainers.config import load_config
    from agentgym.trainers.loop import evaluate_held_out
    from agentgym.trainers.models import load_trained_model

    model, tokenizer = load_trained_model(str(tiny_model_dir), device="cpu", dtype="float32")
    config = load_config(None, [
        f"run_dir={tmp_path}", "rollout.max_tokens=8",
        "envs=[{id: agentgym/MentalMath-v0, name: a, eval_seeds: 2},"
        " {id: agentgym/MentalMath-v0, name: b, eval_seeds: 2}]"])
    policy = TransformersPolicy(model, tokenizer, seed=0)
    before = asyncio.run(evaluate_held_out(config, policy, step=0))
    after = asyncio.run(evaluate_held_out(config, policy, step=1))
    assert sorted(read_outcomes(tmp_path, 0)) == ["a:1000000", "a:1000001",
                                                  "b:1000000", "b:1000001"]
    assert "heldout/gain" not in before  # nothing to compare with yet
    assert after["heldout/tasks"] == 4.0
    assert after["heldout/gain"] == 0.0  # the same weights, greedy: the same outcomes
    assert after["heldout/success_before"] == before["eval/success_rate"]
