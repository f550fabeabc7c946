"""Held-out evaluation at a sampling temperature: checked input, and a repeatable draw."""

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
