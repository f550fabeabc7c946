"""Several envs in one run: the weighted split, labels, per-env metrics and a two-env run."""

import json

import pytest
import yaml

from agentgym.errors import ConfigError
from agentgym.trainers.config import EnvMixEntry, TrainConfig, from_dict, load_config
from agentgym.trainers.loop import train
from agentgym.trainers.mixture import label_trajectories, split_seeds
from agentgym.types import Group, Message, Step, StepResult, Trajectory


def test_split_follows_the_weights_and_never_repeats_a_seed():
    a, b, c = (EnvMixEntry(name="a", weight=2), EnvMixEntry(name="b", first_seed=100),
               EnvMixEntry(name="c"))
    seen: dict[str, list[int]] = {"a": [], "b": [], "c": []}
    for step in range(40):
        parts = split_seeds([a, b, c], range(step * 4, step * 4 + 4))
        assert sum(len(s) for _, s in parts) == 4
        for entry, seeds in parts:
            seen[entry.label] += seeds
    counts = {k: len(v) for k, v in seen.items()}
    assert counts == {"a": 80, "b": 40, "c": 40}  # 2 : 1 : 1, ties rotated over blocks
    assert all(len(set(v)) == len(v) for v in seen.values())
    assert min(seen["b"]) >= 100  # first_seed + task index


def test_labels_group_ids_and_scales_rewards():
    step = Step(0, Message("assistant", "x"), StepResult((), reward=0.5))
    traj = Trajectory("t", "task", "agentgym/Sokoban-v0:7", (), (step,), outcome_reward=1.0)
    error = Trajectory("e", "task", "agentgym/Sokoban-v0:7", (), status="error", error="boom")
    entry = EnvMixEntry(id="agentgym/Sokoban-v0", name="soko", reward_scale=2.0)
    out, err = label_trajectories(entry, [traj, error])
    assert out.group_id == "soko:7" and out.outcome_reward == 2.0
    assert out.steps[0].result.reward == 1.0
    assert err.group_id == "soko:7" and err.outcome_reward is None


def test_an_entry_rewrites_its_rewards_with_g_ra_then_scales_them():
    from agentgym.envs.swe.rewards import SWERewardConfig, swe_components
    from agentgym.trainers.rewards import rescore_groups

    def episode(i, resolved):
        steps = (Step(0, Message("assistant", "look"), StepResult((), reward=None)),
                 Step(1, Message("assistant", "submit"), StepResult(
                     (), reward=float(resolved), terminated=True,
                     info={"submitted": True, "resolved": resolved, "patch_empty": False})))
        return Trajectory(f"t{i}", "task", "agentgym/SWE-v0:0", (), steps,
                          outcome_reward=float(resolved))

    trajs = [episode(0, True), episode(1, False)]
    entry = EnvMixEntry(id="agentgym/SWE-v0", name="swe", reward_accumulation="gated",
                        reward_options={"valid_turn": 0.2}, reward_scale=0.5)
    out = label_trajectories(entry, trajs)
    (want,) = rescore_groups(Group.from_trajectories(trajs),
                             swe_components(SWERewardConfig(valid_turn=0.2)), "gated")
    assert [t.outcome_reward for t in out] == [0.5 * t.outcome_reward
                                               for t in want.trajectories]
    assert out[0].outcome_reward != 0.5 * trajs[0].outcome_reward  # rewritten, not only scaled
    with pytest.raises(ConfigError, match="'swe': reward_options.*valid_trun"):
        load_config(None, ["envs=[{id: a, name: swe, reward_accumulation: gated, "
                           "reward_options: {valid_trun: 1}}]"])
    with pytest.raises(ConfigError, match="set it in one place"):
        load_config(None, ["algorithm.reward_accumulation=gated",
                           "envs=[{id: a, reward_accumulation: direct}]"])


def test_config_errors_name_the_fix():
    with pytest.raises(ConfigError, match="either env"):
        load_config(None, ["env.id=agentgym/Sokoban-v0", "envs=[{id: agentgym/Arithmetic-v0}]"])
    with pytest.raises(ConfigError, match="share a label"):
        load_config(None, ["envs=[{id: agentgym/Sokoban-v0}, {id: agentgym/Sokoban-v0}]"])
    with pytest.raises(ConfigError, match=r"'envs\[1\].wieght'; did you mean 'weight'"):
        load_config(None, ["envs=[{id: a}, {id: b, wieght: 2}]"])
    with pytest.raises(ConfigError, match="weight must be > 0"):
        load_config(None, ["envs=[{id: a, weight: 0}]"])
    with pytest.raises(ConfigError, match="april"):
        load_config(None, ["rollout.april.enabled=true", "envs=[{id: a}]"])
    with pytest.raises(ConfigError, match="SUPO"):
        load_config(None, ["rollout.context=summarize", "envs=[{id: a}]"])
    with pytest.raises(ConfigError, match="own context"):
        load_config(None, ["algorithm.estimator=hgpo", "rollout.context=window",
                           "envs=[{id: a, context: full}, {id: b}]"])


def test_two_env_training_run_writes_per_env_metrics(tmp_path, tiny_model_dir):
    """A tiny model trains on Sokoban and MentalMath together; metrics come per env."""
    data = {
        "run_dir": str(tmp_path / "run"), "steps": 2, "save_every": 2, "tensorboard": False,
        "envs": [
            {"id": "agentgym/Sokoban-v0", "max_turns": 2, "weight": 1, "eval_seeds": 2},
            {"id": "agentgym/MentalMath-v0", "name": "math", "weight": 1, "max_tokens": 4,
             "reward_scale": 2.0, "eval_seeds": 1, "context": "window"},
        ],
        "model": {"path": str(tiny_model_dir)},
        "rollout": {"tasks_per_step": 2, "group_size": 2, "max_tokens": 6},
        "optim": {"lr": 1e-3},
    }
    cfg = from_dict(TrainConfig, data)
    run = train(cfg)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    for label in ("agentgym/Sokoban-v0", "math"):
        assert rows[0][f"env/{label}/eval/success_rate"] >= 0.0
        for r in rows[1:]:
            assert r[f"env/{label}/groups"] == 1.0  # one task of each env per step
            assert 0.0 <= r[f"env/{label}/success_rate"] <= 1.0
            assert f"env/{label}/reward_mean" in r
    assert "eval/success_rate" in rows[-1] and "loss" in rows[-1]
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert [e["name"] for e in saved["envs"]] == [None, "math"]
    assert from_dict(TrainConfig, saved) == cfg  # the written config reads back the same


def test_seq_sum_length_covers_every_entry():
    from agentgym.trainers.update import UpdateConfig

    cfg = load_config(None, ["rollout.max_tokens=6", "loss.aggregation=seq_sum",
                             "envs=[{id: a, max_tokens: 100}, {id: b}]"])
    assert UpdateConfig.of(cfg).max_tokens == 100
    assert UpdateConfig.of(load_config(None, ["rollout.max_tokens=6"])).max_tokens == 6
