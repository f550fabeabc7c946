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


def test_under_autocast_old_logprobs_are_recomputed_unless_the_config_says_otherwise():
    from agentgym.trainers.config import LossConfig, OptimConfig
    from agentgym.trainers.update import UpdateConfig

    def recomputes(autocast, recompute):
        return UpdateConfig(OptimConfig(autocast=autocast), LossConfig(
            recompute_logprobs=recompute), temperature=1.0, seed=0).recomputes_old_logprobs

    assert recomputes("bfloat16", None) and not recomputes("none", None)
    assert not recomputes("bfloat16", False) and recomputes("none", True)


def test_the_recompute_scores_only_the_samples_the_loss_reads():
    """A sample whose advantages are all 0 runs no forward pass, so its π_old (here NaN: not
    recorded) is neither read nor recomputed; the others' are, in the update's precision."""
    from agentgym.trainers.config import LossConfig, OptimConfig
    from agentgym.trainers.update import UpdateConfig, ppo_update

    from .test_packing import group_samples

    rng = np.random.default_rng(2)
    samples = group_samples(rng, "a")
    zero = [i for i in range(0, len(samples), 2)]
    for i in zero:  # no behaviour log-probs and no advantage
        s = samples[i]
        samples[i] = Sample(s.traj_id, s.group_id, s.step_index, s.input_ids, s.prompt_len, 0.0,
                            (float("nan"),) * (s.length - s.prompt_len))
    seen, learner = [], tiny_learner()
    config = UpdateConfig(OptimConfig(autocast="bfloat16", max_tokens_per_micro_batch=10_000),
                          LossConfig(), temperature=1.0, seed=0)
    metrics = ppo_update(learner, samples, config, step=1, sharding=recording(seen))
    assert seen == [[s.traj_id for i, s in enumerate(samples) if i not in zero]]
    assert np.isfinite(metrics["loss"]) and metrics["ratio_mean"] == pytest.approx(1.0, abs=0.05)


def test_only_samples_missing_a_behaviour_log_prob_are_scored_when_the_generator_left_one_out():
    """``recompute_missing`` (llama.cpp generation, on-policy): the update scores π_old of the
    samples with a NaN among their trained tokens' log-probs, and no other; without it the
    loss refuses them."""
    from agentgym.trainers.batching import TrainingDataError
    from agentgym.trainers.config import LossConfig, OptimConfig
    from agentgym.trainers.update import UpdateConfig, ppo_update

    from .test_packing import group_samples

    samples = group_samples(np.random.default_rng(3), "a")
    s = samples[1]
    lacking = list(s.completion_logprobs)
    lacking[len(lacking) // 2] = float("nan")  # one token ended inside a character
    samples[1] = Sample(s.traj_id, s.group_id, s.step_index, s.input_ids, s.prompt_len,
                        s.advantage or 1.0, tuple(lacking))
    seen, learner = [], tiny_learner()
    optim = OptimConfig(max_tokens_per_micro_batch=10_000)
    config = UpdateConfig(optim, LossConfig(), temperature=1.0, seed=0, recompute_missing=True)
    metrics = ppo_update(learner, samples, config, step=1, sharding=recording(seen))
    assert seen == [[samples[1].traj_id]] and np.isfinite(metrics["loss"])
    with pytest.raises(TrainingDataError, match="recompute"):
        ppo_update(learner, samples, UpdateConfig(optim, LossConfig(), temperature=1.0,
                                                  seed=0), step=2, sharding=recording([]))


def recording(seen):
    """The one-process update, noting which samples' π_old each recompute scores."""
    from agentgym.trainers.update import ONE_PROCESS

    class Recording(type(ONE_PROCESS)):
        def recompute(self, learner, batch, config):
            seen.append([s.traj_id for s in batch])
            return super().recompute(learner, batch, config)

    return Recording()


def tiny_learner():
    from agentgym.trainers.update import Learner

    from .test_packing import tiny_llama

    model = tiny_llama()
    return Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), None,
                   torch.device("cpu"), 0)
