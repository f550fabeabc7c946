"""Async training: staleness filter and importance weights by hand, versions recorded per
step across weight updates, and a one-step-off run on a tiny model."""

import math

import pytest

from agentgym.errors import ConfigError
from agentgym.trainers.batching import Sample
from agentgym.trainers.collectors import drop_stale, step_staleness
from agentgym.trainers.config import AsyncConfig
from agentgym.trainers.methods.offpolicy.importance import importance_correct
from agentgym.types import Message, Step, StepResult, StepTokens, Trajectory


def _traj(tid, versions, status="terminated"):
    steps = tuple(Step(i, Message("assistant", "x"), StepResult((), reward=1.0),
                       StepTokens((1, 2), (3,), (-0.5,), policy_version=v))
                  for i, v in enumerate(versions))
    return Trajectory(tid, "t", "g", (), steps, status=status,
                      outcome_reward=None if status == "error" else 1.0)


def test_step_tokens_policy_version_round_trips_and_old_files_still_load():
    tokens = StepTokens((1,), (2,), (-0.1,), policy_version=3)
    assert StepTokens.from_dict(tokens.to_dict()) == tokens
    old = StepTokens((1,), (2,), (-0.1,))
    assert "policy_version" not in old.to_dict()  # files without versions are unchanged
    assert StepTokens.from_dict({"prompt_ids": [1], "completion_ids": [2]}).policy_version is None


def test_drop_stale_keeps_within_bound_and_counts():
    # Current version 5, bound 2: staleness of a trajectory = its oldest step.
    trajs = [_traj("fresh", [5]), _traj("partial", [3, 4]), _traj("old", [2, 5]),
             _traj("unknown", [None]), _traj("err", [1], status="error")]
    kept, metrics = drop_stale(trajs, version=5, max_staleness=2)
    assert [t.id for t in kept] == ["fresh", "partial", "unknown", "err"]
    ages = {(t.id, i): age for t in kept for i, age in enumerate(step_staleness(t, 5))}
    assert ages[("partial", 0)] == 2 and ages[("partial", 1)] == 1 and ages[("fresh", 0)] == 0
    assert metrics["async/dropped_stale"] == 1.0
    # Steps seen (kept only): 0, 2, 1, 0 (unknown), 4 (the error trajectory is not dropped).
    assert metrics["async/staleness_mean"] == pytest.approx((0 + 2 + 1 + 0 + 4) / 5)
    assert metrics["async/staleness_max"] == 4.0


def test_importance_weights_are_truncated_geometric_means():
    def sample(adv, logprobs):
        return Sample("t", "g", 0, (1, 2, 3, 4), 2, adv, tuple(logprobs))

    behaviour = [sample(1.0, [-1.0, -2.0]), sample(-2.0, [-1.0, -1.0])]
    proximal = [sample(1.0, [-0.5, -1.5]), sample(-2.0, [-3.0, -3.0])]
    fixed, stats = importance_correct(behaviour, proximal, max_weight=1.5)
    # w1 = min(exp(0.5), 1.5) = 1.5 (truncated); w2 = exp(-2).
    assert fixed[0].advantage == pytest.approx(1.5)
    assert fixed[1].advantage == pytest.approx(-2.0 * math.exp(-2.0))
    assert fixed[0].completion_logprobs == (-0.5, -1.5)  # π_prox becomes π_old
    assert stats["async/is_truncated_frac"] == 0.5
    assert stats["async/is_weight_max"] == pytest.approx(1.5)
    assert stats["async/is_weight_min"] == pytest.approx(math.exp(-2.0))
    assert stats["async/is_weight_std"] == pytest.approx(abs(1.5 - math.exp(-2.0)) / 2)


def test_async_config_rejects_unstable_settings():
    with pytest.raises(ConfigError, match="max_staleness must be >= 1"):
        AsyncConfig(max_staleness=0)
    with pytest.raises(ConfigError, match="max_importance_weight"):
        AsyncConfig(max_importance_weight=0.5)


async def test_episode_across_weight_updates_records_each_steps_version(tiny_model_dir):
    """A partial rollout resumes with the new weights; every step names its version."""
    import agentgym
    from agentgym.engines.versioned import VersionedAgent
    from agentgym.policies.base import SamplingParams
    from agentgym.policies.hf import TransformersPolicy
    from agentgym.rollout import LMAgent, run_groups

    policy = TransformersPolicy.load(str(tiny_model_dir), seed=0)

    class Updating:  # a weight update lands after every policy call
        tokenizer = policy.tokenizer

        async def generate(self, requests):
            out = await policy.generate(requests)
            await policy.update_weights([])
            return out

        async def aclose(self):
            await policy.aclose()

    agent = VersionedAgent(LMAgent(Updating(), sampling=SamplingParams(max_tokens=3, seed=0)))
    [traj] = await run_groups(lambda: agentgym.make("agentgym/Arithmetic-v0", max_turns=3),
                              agent, [0])
    await policy.aclose()
    assert [s.tokens.policy_version for s in traj.steps] == list(range(len(traj.steps)))
    assert len(traj.steps) == 3


def test_one_step_off_training_on_tiny_model(tmp_path, tiny_model_dir):
    """Rollouts of step k+1 are sampled while step k trains: stale, corrected, trained."""
    import torch

    from agentgym.trainers.config import load_config
    from agentgym.trainers.loop import train
    from agentgym.trainers.metrics import read_metrics

    overrides = [f"run_dir={tmp_path / 'run'}", "steps=3", "save_every=3",
                 f"model.path={tiny_model_dir}", "rollout.tasks_per_step=2",
                 "rollout.group_size=4", "rollout.max_tokens=4", "tensorboard=false",
                 "optim.lr=0.01", "env.id=agentgym/Sokoban-v0", "env.max_turns=2",
                 "async_training.enabled=true", "async_training.max_staleness=1"]
    from safetensors.torch import load_file

    before = load_file(tiny_model_dir / "model.safetensors")
    run = train(load_config(None, overrides))
    rows = read_metrics(run)
    assert [r["policy_version"] for r in rows] == [1.0, 2.0, 3.0]
    assert rows[0]["async/stale_samples"] == 0  # step 0 was collected before any update
    # Step 1's rollouts were launched before update 0 finished: sampled by version 0.
    assert rows[1]["async/staleness_max"] == 1.0 and rows[1]["async/stale_samples"] > 0
    assert rows[1]["async/is_weight_std"] > 0  # the weights moved between the versions
    assert all(r["async/dropped_stale"] == 0 for r in rows)
    after = load_file(run / "checkpoints" / "step-000003" / "model.safetensors")
    assert all(not torch.equal(before[n], after[n]) for n in after)
