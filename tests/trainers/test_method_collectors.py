"""Every training method × every collector: the config is accepted and the method is used,
or it is refused when read, with a message that names the switch, never trained without
the method (SUPO's summaries were once skipped silently under every driver)."""

import pytest

from agentgym.errors import ConfigError
from agentgym.trainers import methods
from agentgym.trainers.config import load_config

METHODS = {  # the switch that turns each built-in method on
    "gra": ["algorithm.reward_accumulation=gated"],
    "gae": ["algorithm.estimator=gae"],
    "spa": ["algorithm.estimator=spa"],
    "supo": ["rollout.context=summarize"],
    "offpolicy": [],  # on wherever the collector is off-policy
    "recurrence": ["algorithm.estimator=gigpo"],
    "dynamic_sampling": ["methods.dynamic_sampling.max_groups=4"],
    "difficulty_pool": ["methods.difficulty_pool.hard=0.2"],
}
COLLECTORS = {
    "embedded": [],
    "vllm": ["model.generation=vllm"],
    "llamacpp": ["model.generation=llamacpp"],
    "ray": ["engine=ray"],
    "ahead": ["async_training.enabled=true"],
    "april": ["rollout.april.enabled=true"],
}
REFUSED = {("supo", "ray"), ("supo", "ahead"), ("supo", "april"),
           # their extra draws and chosen seeds need a collector that runs the seeds it is
           # given, when it is given them
           ("dynamic_sampling", "ahead"), ("dynamic_sampling", "april"),
           ("difficulty_pool", "ahead"), ("difficulty_pool", "april")}


def test_the_table_covers_every_registered_builtin():
    assert set(METHODS) == {m.name for m in methods.methods()
                            if m.build.__module__.startswith("agentgym.trainers.methods.")}
    assert set(COLLECTORS) == set(methods.COLLECTORS)


@pytest.mark.parametrize("collector", list(COLLECTORS))
@pytest.mark.parametrize("method", list(METHODS))
def test_each_pair_is_trained_or_refused_when_read(method, collector):
    overrides = METHODS[method] + COLLECTORS[collector]
    if (method, collector) in REFUSED:
        with pytest.raises(ConfigError, match=f"{method}.*{COLLECTORS[collector][0]}.*"
                                              "turn that off"):
            load_config(None, overrides)
        return
    config = load_config(None, overrides)
    assert methods.collector_traits(config) == {collector}
    info = {m.name: m for m in methods.methods()}[method]
    if info.active is not None:  # a method that says when it is used is used here
        assert info.active(config) == (method != "offpolicy" or collector in ("ahead",
                                                                              "april"))


def test_step_level_runs_log_their_recurrence(tmp_path, tiny_model_dir):
    """The recurrence plug-in reads the groups the estimator reads and changes none."""
    from agentgym.trainers.loop import train
    from agentgym.trainers.metrics import read_metrics

    common = [f"model.path={tiny_model_dir}", "steps=1", "tensorboard=false",
              "env.id=agentgym/Sokoban-v0", "env.max_turns=2", "rollout.tasks_per_step=1",
              "rollout.group_size=2", "rollout.max_tokens=4"]
    [row] = read_metrics(train(load_config(None, [
        f"run_dir={tmp_path / 'gigpo'}", "algorithm.estimator=gigpo", *common])))
    assert 0.0 <= row["credit/step_group_recurrence"] <= 1.0
    assert row["credit/step_group_recurrence"] > 0  # both rollouts start in the same state
    [row] = read_metrics(train(load_config(None, [f"run_dir={tmp_path / 'grpo'}", *common])))
    assert "credit/step_group_recurrence" not in row
