"""Held-out evaluation at a sampling temperature: checked input, a repeatable draw, and
several draws per seed."""

import asyncio

import pytest

from agentgym.errors import ConfigError
from agentgym.trainers.config import EnvConfig, TrainConfig
from agentgym.trainers.config_rollout import EnvMixEntry
from agentgym.trainers.loop import evaluate_held_out


@pytest.mark.parametrize("bad", [-0.5, float("inf"), float("nan")])
def test_a_bad_eval_temperature_names_the_fix(bad):
    with pytest.raises(ConfigError, match="env.eval_temperature must be >= 0"):
        EnvConfig(eval_temperature=bad)
    with pytest.raises(ConfigError, match="eval_temperature"):
        EnvMixEntry(name="a", eval_temperature=bad)


@pytest.mark.parametrize(("draws", "temperature", "match"), [
    (0, 1.0, "env.eval_draws must be a whole number >= 1"),
    (2.5, 1.0, "env.eval_draws must be a whole number >= 1"),
    (4, 0.0, "needs sampling: greedy episodes of one seed are all the same"),
])
def test_bad_eval_draws_name_the_fix(draws, temperature, match):
    with pytest.raises(ConfigError, match=match):
        EnvConfig(eval_draws=draws, eval_temperature=temperature)
    with pytest.raises(ConfigError, match=match):
        EnvMixEntry(name="a", eval_draws=draws, eval_temperature=temperature)


def test_several_draws_per_seed_record_each_task_share(tiny_model_dir, tmp_path):
    from agentgym.policies.hf import TransformersPolicy
    from agentgym.trainers.heldout import read_outcomes
    from agentgym.trainers.models import load_trained_model

    model, tokenizer = load_trained_model(str(tiny_model_dir), device="cpu", dtype="float32")
    config = TrainConfig(run_dir=str(tmp_path), env=EnvConfig(
        id="agentgym/MentalMath-v0", eval_seeds=3, eval_temperature=1.0, eval_draws=4))
    policy = TransformersPolicy(model, tokenizer, seed=0)
    calls: list[int] = []
    original = policy.generate

    async def spy(*args, **kwargs):
        out = await original(*args, **kwargs)
        calls.append(len(out))
        return out

    policy.generate = spy  # type: ignore[method-assign]
    out = asyncio.run(evaluate_held_out(config, policy, step=0))
    outcomes = read_outcomes(tmp_path, 0)
    assert outcomes is not None and sorted(outcomes) == ["1000000", "1000001", "1000002"]
    assert all(v in (0.0, 0.25, 0.5, 0.75, 1.0) for v in outcomes.values())
    assert out["eval/success_rate"] == pytest.approx(sum(outcomes.values()) / 3)
    assert sum(calls) >= 12  # four episodes of each of the three seeds


def test_sampled_evaluation_repeats_and_differs_from_greedy(tiny_model_dir, tmp_path):
    from agentgym.policies.hf import TransformersPolicy
    from agentgym.trainers.models import load_trained_model

    model, tokenizer = load_trained_model(str(tiny_model_dir), device="cpu", dtype="float32")

    def evaluate(temperature: float) -> list[str]:
        config = TrainConfig(run_dir=str(tmp_path / f"t{temperature}"), env=EnvConfig(
            id="agentgym/MentalMath-v0", eval_seeds=6, eval_temperature=temperature))
        policy = TransformersPolicy(model, tokenizer, seed=0)
        seen: list[str] = []
        original = policy.generate

        async def spy(*args, **kwargs):
            out = await original(*args, **kwargs)
            seen.extend(c.text for c in out)
            return out

        policy.generate = spy  # type: ignore[method-assign]
        asyncio.run(evaluate_held_out(config, policy))
        return seen

    greedy, sampled, again = evaluate(0.0), evaluate(1.0), evaluate(1.0)
    assert sampled == again  # one sampling seed: the same draw every evaluation
    assert sampled != greedy
