"""Held-out outcomes per task, and the paired interval of the gain before → after."""

import json

import pytest

from agentgym.cli import held_out_line
from agentgym.trainers.heldout import gain_metrics, paired_gain, read_outcomes, run_gain


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
