"""A crash while checkpoint 2 is written, then ``--resume``: each step is in metrics.jsonl once.

``kill -9`` during ``checkpoint.save`` of step 2 leaves what the test builds: step 2's
metrics row already logged (the loop logs, then saves), the temporary folder
``checkpoints/.tmp-step-000002`` half written, no ``step-000002``, and possibly a last
metrics line cut short. The resumed run goes on from checkpoint 1 and logs step 2 again.
"""

from __future__ import annotations

import json
import shutil

import pytest

from agentgym.errors import SchemaError
from agentgym.trainers.config import load_config, save_config
from agentgym.trainers.loop import train
from agentgym.trainers.metrics import keep_logged_steps, read_metrics


def test_resume_after_a_crash_mid_checkpoint_logs_each_step_once(tmp_path, tiny_model_dir):
    run = tmp_path / "run"
    overrides = [f"run_dir={run}", "save_every=1", f"model.path={tiny_model_dir}",
                 "rollout.tasks_per_step=1", "rollout.group_size=2", "rollout.max_tokens=2",
                 "tensorboard=false", "env.id=agentgym/MentalMath-v0", "env.eval_seeds=1",
                 "resumable_checkpoints=true", "algorithm.options.invalid_penalty=0.1"]
    train(load_config(None, [*overrides, "steps=2"]))
    checkpoints = run / "checkpoints"
    # the state kill -9 leaves mid-write of checkpoint 2 (module docstring)
    shutil.move(checkpoints / "step-000002", checkpoints / ".tmp-step-000002")
    (checkpoints / ".tmp-step-000002" / "state.json").unlink()
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 3, "loss"')  # a row cut short
    train(load_config(None, [*overrides, "steps=3"]), resume=True)
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 3]
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-000002", "step-000003"]


def test_a_fresh_start_in_a_run_folder_drops_the_rows_of_the_attempt_before(tmp_path):
    """A run that died before its first checkpoint starts over: its old rows go."""
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0, "eval/success_rate": 0.5}\n{"step": 1, "loss": 2}\n')
    keep_logged_steps(path, 0)
    assert path.read_text() == ""
    path.write_text('{"step": 0}\n{"step": 1}\n{"step": 2}\n{"step": 2, "lo')
    keep_logged_steps(path, 1)
    assert [r["step"] for r in read_metrics(tmp_path)] == [0, 1]


def test_reading_metrics_skips_a_cut_last_line_and_names_a_damaged_one(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2, "lo')
    assert read_metrics(tmp_path) == [{"step": 1}]
    path.write_text('{"step": 1}\nnot json\n{"step": 3}\n')
    with pytest.raises(SchemaError, match=r"metrics.jsonl:2: not a metrics row"):
        read_metrics(tmp_path)


def test_a_run_config_starts_with_the_header_that_marks_a_run_folder(tmp_path):
    from agentgym.trainers.checkpoint import check_run_dir
    from agentgym.trainers.config import CONFIG_HEADER

    save_config(load_config(None, [f"run_dir={tmp_path}"]), tmp_path / "config.yaml")
    assert (tmp_path / "config.yaml").read_text().splitlines()[0] == CONFIG_HEADER
    assert load_config(tmp_path / "config.yaml").run_dir == str(tmp_path)
    check_run_dir(tmp_path)  # a run's own folder: usable
