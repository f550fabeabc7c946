"""Recomputed π_old log-probs (loss.recompute_logprobs): equal to a plain forward pass."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from agentgym.trainers.batching import Sample  # noqa: E402
from agentgym.trainers.update import proximal_logprobs  # noqa: E402


def test_recomputed_logprobs_match_a_plain_forward_pass(tiny_model_dir):
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_model_dir,
                                                              dtype=torch.float32)
    rng = np.random.default_rng(0)
    samples = []
    for i in range(5):  # mixed lengths: several micro-batches with padding
        length, prompt = int(rng.integers(6, 40)), int(rng.integers(2, 5))
        ids = tuple(int(x) for x in rng.integers(1, 1000, size=length))
        samples.append(Sample(f"t{i}", "g", 0, ids, prompt, 1.0, (0.0,) * (length - prompt)))
    got = proximal_logprobs(model, samples, budget=48, pad_id=0, device="cpu",
                            temperature=0.7)
    for sample, new in zip(samples, got, strict=True):
        ids = torch.tensor([sample.input_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, :-1].float() / 0.7
        want = torch.log_softmax(logits, -1).gather(1, ids[0, 1:, None])[:, 0]
        np.testing.assert_allclose(new.completion_logprobs,
                                   want[sample.prompt_len - 1:].numpy(), atol=1e-5)
        assert new.advantage == sample.advantage and new.input_ids == sample.input_ids
