"""A new estimator is one file: the example plug-in trains without touching the trainer."""

import importlib.util
from pathlib import Path

import pytest

from agentgym.errors import ConfigError
from agentgym.trainers.advantages import estimator_info, estimator_names, get_estimator
from agentgym.trainers.config import TrainConfig, from_dict
from agentgym.trainers.supo import SUPOOptions, check_estimator
from agentgym.types import Group, Message, Step, StepResult, Trajectory

PLUGIN = Path(__file__).parent / "plugins" / "median_baseline.py"


def _load_plugin():
    """Import the plug-in file as a user's package would (importing registers it)."""
    spec = importlib.util.spec_from_file_location("median_baseline_plugin", PLUGIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_load_plugin()


def _traj(i, reward, valid=True):
    step = Step(0, Message("assistant", "a"), StepResult((), reward), valid=valid)
    return Trajectory(f"t{i}", "task", "task", (), (step,), "terminated", reward)


def test_registered_with_its_metadata():
    info = estimator_info("median_baseline")
    assert "median_baseline" in estimator_names()
    assert (info.level, info.group_baseline, info.needs) == ("trajectory", True, ())


def test_hand_computed_group():
    group = Group("task", (_traj(0, 0.0), _traj(1, 1.0), _traj(2, 5.0, valid=False)))
    out = get_estimator("median_baseline", invalid_penalty=0.5)([group])
    assert {k: v.tolist() for k, v in out.items()} == {"t0": [-1.0], "t1": [0.0],
                                                       "t2": [3.5]}


def test_the_trainer_reads_the_metadata_not_a_list_of_names(tiny_model_dir):
    base = {"model": {"path": str(tiny_model_dir)},
            "algorithm": {"estimator": "median_baseline"}}
    with pytest.raises(ConfigError, match="group_size must be >= 2"):  # group_baseline=True
        from_dict(TrainConfig, {**base, "rollout": {"group_size": 1}})
    check_estimator("median_baseline", SUPOOptions())  # trajectory level: SUPO may share it
    with pytest.raises(ConfigError, match="median_baseline"):  # the step-level error lists it
        check_estimator("gigpo", SUPOOptions())


def test_registering_it_again_from_the_same_file_is_allowed():
    _load_plugin()  # a re-import (same module path and class) is not a clash
    assert estimator_info("median_baseline").options.__name__ == "MedianOptions"


def test_trains_a_step(tmp_path, tiny_model_dir):
    from agentgym.trainers.loop import train
    from agentgym.trainers.metrics import read_metrics

    config = from_dict(TrainConfig, {
        "run_dir": str(tmp_path / "run"), "steps": 1, "tensorboard": False,
        "env": {"id": "agentgym/Sokoban-v0", "max_turns": 2},
        "model": {"path": str(tiny_model_dir)},
        "rollout": {"tasks_per_step": 2, "group_size": 2, "max_tokens": 6},
        "algorithm": {"estimator": "median_baseline"}, "optim": {"lr": 1e-3}})
    [metrics] = read_metrics(train(config))
    # The random tiny model's invalid actions give nonzero advantages: samples were trained.
    assert metrics["samples"] > 0 and metrics["grad_norm"] > 0
