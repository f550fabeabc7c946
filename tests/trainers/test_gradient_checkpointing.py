"""optim.gradient_checkpointing: the same update on less memory, generation untouched."""


import numpy as np
import pytest

from agentgym.trainers.batching import Sample
from agentgym.trainers.config import LossConfig, OptimConfig
from agentgym.trainers.models import checkpoint_activations

from .test_packing import (
    assert_same_step,
    group_samples,
    history_samples,
    sgd_step,
    tiny_llama,
    tokens,
)


def long_prompt_group(rng):
    """Rows sharing a long prompt and little else: the update runs the prompt once and
    repeats its keys and values for a batch of the rests, unless layers are checkpointed."""
    samples = group_samples(rng, "long", prompt_len=300, size=6)
    prompt = list(samples[0].input_ids[:300])
    rest = tokens(rng, 60)
    samples.append(Sample("long-obs", "long", 1, tuple(prompt + rest + tokens(rng, 4)), 360,
                          0.5, (-1.0,) * 4))
    return samples


@pytest.mark.parametrize("case", ["groups_and_history", "long_shared_prompt"])
def test_a_checkpointed_update_moves_the_weights_as_a_plain_one(case):
    rng = np.random.default_rng(11)
    samples = (group_samples(rng, "a") + history_samples(rng) if case == "groups_and_history"
               else long_prompt_group(rng))
    base = tiny_llama()
    optim = OptimConfig(max_tokens_per_micro_batch=10_000, grad_clip=0.0)
    assert_same_step(sgd_step(base, samples, optim, LossConfig()),
                     sgd_step(base, samples, optim, LossConfig(), checkpoint_activations))


def test_the_option_checkpoints_training_passes_and_generation_keeps_its_cache(
        tiny_model_dir, tmp_path):
    import asyncio

    from agentgym.policies.base import GenerationRequest, SamplingParams
    from agentgym.trainers.config import load_config
    from agentgym.trainers.loop import build
    from agentgym.types import Message

    args = [f"model.path={tiny_model_dir}", "env.id=agentgym/MentalMath-v0", "tensorboard=false"]
    plain = build(load_config(None, [f"run_dir={tmp_path / 'a'}", *args]))
    assert not plain.learner.model.is_gradient_checkpointing
    run = build(load_config(None, [f"run_dir={tmp_path / 'b'}",
                                   "optim.gradient_checkpointing=true", *args]))
    assert run.learner.model.is_gradient_checkpointing
    seen = []
    run.learner.model.register_forward_hook(
        lambda module, args, kwargs, out: seen.append(kwargs.get("use_cache")),
        with_kwargs=True)
    request = GenerationRequest((Message("user", "2+2?"),),
                                params=SamplingParams(max_tokens=4, temperature=0.0))
    [done] = asyncio.run(run.policy.generate([request]))
    assert done.completion_ids and seen and all(seen)  # decoded with a KV cache, as without


def test_the_sft_option_is_read(tmp_path):
    from agentgym.trainers.sft_config import load_sft_config

    (tmp_path / "x.jsonl").write_text("")
    path = tmp_path / "sft.yaml"
    path.write_text(f"data: {{paths: [{tmp_path / 'x.jsonl'}]}}\n"
                    "optim: {gradient_checkpointing: true}\n")
    assert load_sft_config(path, []).optim.gradient_checkpointing is True
