"""ScalingInter-RL horizon schedule: values by step, config errors, the cap applied to training
rollouts only, and short tiny-model runs (embedded and async, two estimators) that log it."""

import pytest

from agentgym.errors import ConfigError
from agentgym.trainers.horizon import HorizonSchedule


def test_stepwise_and_linear_values():
    stepwise = HorizonSchedule("stepwise", (0, 100, 200), (5, 10, 15))
    assert [stepwise.at(t) for t in (0, 99, 100, 199, 200, 10_000)] == [5, 5, 10, 10, 15, 15]
    linear = HorizonSchedule("linear", (0, 4, 6), (2, 6, 7))
    # 2 + 4·t/4 on [0, 4), then 6 + (t − 4)/2 rounded down on [4, 6), then 7.
    assert [linear.at(t) for t in range(9)] == [2, 3, 4, 5, 6, 6, 7, 7, 7]
    off = HorizonSchedule()
    assert off.at(0) is None and not off.enabled


@pytest.mark.parametrize("kwargs, match", [
    ({"steps": (0, 10), "max_turns": (5,)}, "one cap per milestone"),
    ({"steps": (1, 10), "max_turns": (5, 6)}, "start at 0 and increase"),
    ({"steps": (0, 10, 10), "max_turns": (5, 6, 7)}, "start at 0 and increase"),
    ({"steps": (0, 10), "max_turns": (6, 5)}, "never decrease"),
    ({"steps": (0,), "max_turns": (0,)}, "never decrease"),
    ({"steps": (), "max_turns": ()}, "non-empty list of ints"),
])
def test_bad_schedules_name_the_fix(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        HorizonSchedule("stepwise", **kwargs)


def test_schedule_loads_from_overrides():
    from agentgym.trainers.config import load_config

    cfg = load_config(None, ["rollout.horizon_schedule.mode=linear",
                             "rollout.horizon_schedule.steps=[0,10]",
                             "rollout.horizon_schedule.max_turns=[2,6]"])
    assert cfg.rollout.horizon_schedule.at(5) == 4
    with pytest.raises(ConfigError, match="rollout.horizon_schedule.mode"):
        load_config(None, ["rollout.horizon_schedule.mode=exponential"])


async def test_cap_applies_to_training_rollouts_not_evaluation():
    from agentgym.trainers.collect import collect
    from agentgym.trainers.config import load_config

    seen = []

    async def runner(make_env, agent, seeds, config, *, env_id=None):
        seen.append(config.max_steps)
        return []

    cfg = load_config(None, ["env.id=agentgym/Sokoban-v0"])
    await collect(cfg, None, range(1), 2, 1.0, seed=0, runner=runner, max_turns=3)
    await collect(cfg, None, range(1), 1, 0.0, seed=0, runner=runner, max_turns=3,
                  evaluation=True)
    await collect(cfg, None, range(1), 2, 1.0, seed=0, runner=runner)
    assert seen == [3, 100, 100]  # evaluation keeps the env's limit (and the safety cap)


@pytest.mark.parametrize("extra", [
    ["algorithm.estimator=grpo"],
    ["algorithm.estimator=gigpo", "async_training.enabled=true"],
])
def test_run_records_the_cap_per_step_and_episodes_respect_it(tmp_path, tiny_model_dir, extra):
    from agentgym.trainers.config import load_config
    from agentgym.trainers.loop import train
    from agentgym.trainers.metrics import read_metrics

    overrides = [f"run_dir={tmp_path / 'run'}", "steps=3", "save_every=3",
                 f"model.path={tiny_model_dir}", "rollout.tasks_per_step=2",
                 "rollout.group_size=2", "rollout.max_tokens=4", "tensorboard=false",
                 "optim.lr=0.01", "env.id=agentgym/Sokoban-v0", "env.max_turns=4",
                 "rollout.horizon_schedule.mode=stepwise",
                 "rollout.horizon_schedule.steps=[0,2]",
                 "rollout.horizon_schedule.max_turns=[1,3]", *extra]
    rows = read_metrics(train(load_config(None, overrides)))
    assert [r["horizon/max_turns"] for r in rows] == [1.0, 1.0, 3.0]
    for r in rows:
        assert r["steps_per_episode"] <= r["horizon/max_turns"]
    assert rows[0]["steps_per_episode"] == 1.0  # every episode stopped at the cap
    assert rows[2]["steps_per_episode"] > 1.0  # the raised cap let episodes go on
