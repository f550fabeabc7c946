"""RFT: the successful rollouts are imitated, the others are not; the loop trains with it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agentgym.errors import ConfigError
from agentgym.trainers.advantages import get_estimator
from agentgym.trainers.config import TrainConfig, from_dict
from agentgym.trainers.loop import train
from agentgym.types import Group, Message, Step, StepResult, Trajectory


def traj(tid: str, reward: float, success: bool | None, valid=(True, True)) -> Trajectory:
    info = {} if success is None else {"success": success}
    steps = tuple(Step(i, Message("assistant", "x"), StepResult((), 0.0, i == len(valid) - 1,
                                                                False, info if i == len(valid) - 1
                                                                else {}), None, None, v)
                  for i, v in enumerate(valid))
    return Trajectory(tid, "t", "g", (), steps, "terminated", reward)


def test_rft_weights_are_one_on_the_valid_steps_of_successful_rollouts():
    group = Group("t", (traj("win", 1.0, True, valid=(True, False, True)),
                        traj("lose", 0.5, False), traj("plain", 2.0, None),
                        traj("zero", 0.0, None)))
    adv = get_estimator("rft")([group])
    assert adv["win"].tolist() == [1.0, 0.0, 1.0]  # the malformed step is not imitated
    assert adv["lose"].tolist() == [0.0, 0.0]  # success flag wins over a positive reward
    assert adv["plain"].tolist() == [1.0, 1.0]  # no flag: positive reward
    assert adv["zero"].tolist() == [0.0, 0.0]
    by_reward = get_estimator("rft", min_reward=1.0)([group])
    assert [by_reward[k].sum() for k in ("win", "lose", "plain", "zero")] == [2.0, 0.0, 2.0, 0.0]
    single = get_estimator("rft")([Group("t", (traj("only", 1.0, True),))])
    np.testing.assert_array_equal(single["only"], [1.0, 1.0])  # no group baseline needed


def test_train_with_rft_runs_with_groups_of_one(tmp_path, tiny_model_dir):
    cfg = from_dict(TrainConfig, {
        "run_dir": str(tmp_path / "run"), "steps": 1, "tensorboard": False,
        "env": {"id": "agentgym/Sokoban-v0", "max_turns": 2},
        "model": {"path": str(tiny_model_dir)},
        "rollout": {"tasks_per_step": 2, "group_size": 1, "max_tokens": 4},
        "algorithm": {"estimator": "rft", "options": {"min_reward": -10.0}}})
    run = train(cfg)
    (row,) = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert row["groups_trained"] == 2 and row["samples"] > 0 and np.isfinite(row["loss"])
    with pytest.raises(ConfigError, match="group_size"):
        from_dict(TrainConfig, {"rollout": {"group_size": 1}, "algorithm": {"estimator": "grpo"}})
