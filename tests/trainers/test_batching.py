import math

import numpy as np
import pytest
import torch

from agentgym.trainers.batching import (
    MicroBatch,
    Sample,
    TrainingDataError,
    micro_batches,
    samples_from_groups,
)
from agentgym.types import Group, Message, Step, StepResult, StepTokens, Trajectory


def make_step(index, prompt, completion, logprobs=None, tokens=True):
    toks = None
    if tokens:
        lp = tuple(logprobs) if logprobs is not None else tuple(-0.1 * (k + 1)
                                                                 for k in range(len(completion)))
        toks = StepTokens(tuple(prompt), tuple(completion), lp)
    return Step(index, Message("assistant", "x"), StepResult((Message("user", "o"),), 0.0),
                tokens=toks)


def make_traj(tid, steps, status="terminated", group="g0"):
    reward = None if status == "error" else 1.0
    return Trajectory(tid, "task", group, (Message("user", "hi"),), tuple(steps), status, reward)


@pytest.fixture
def groups():
    a = make_traj("a", [make_step(0, [1, 2, 3], [4, 5]), make_step(1, [1, 2, 3, 4, 5, 6], [7])])
    b = make_traj("b", [make_step(0, [1, 2], [8, 9, 10])])
    err = make_traj("err", [make_step(0, [1], [2])], status="error")
    return [Group("task", (a, b, err))]


def test_samples_from_groups_one_per_step_and_skips_errors(groups):
    samples = samples_from_groups(groups, {"a": np.array([0.5, -1.0]), "b": np.array([2.0])})
    assert [(s.traj_id, s.step_index) for s in samples] == [("a", 0), ("a", 1), ("b", 0)]
    s = samples[0]
    assert s.input_ids == (1, 2, 3, 4, 5) and s.prompt_len == 3 and s.group_id == "g0"
    assert s.num_completion_tokens == 2 and s.has_logprobs
    np.testing.assert_array_equal(s.loss_mask, [0, 0, 0, 1, 1])
    np.testing.assert_allclose(s.advantages, [0, 0, 0, 0.5, 0.5])
    np.testing.assert_allclose(s.old_logprobs, [0, 0, 0, -0.1, -0.2], rtol=1e-6)


def test_skip_zero_advantage(groups):
    adv = {"a": np.array([0.0, 1.0]), "b": np.array([0.0])}
    kept = samples_from_groups(groups, adv, skip_zero_advantage=True)
    assert [(s.traj_id, s.step_index) for s in kept] == [("a", 1)]
    assert len(samples_from_groups(groups, adv)) == 3


def test_missing_tokens_raise_naming_the_fix():
    t = make_traj("a", [make_step(0, [1], [2]), make_step(1, [1], [2], tokens=False)])
    with pytest.raises(TrainingDataError, match=r"1 steps .*'a' step 1.*model policy"):
        samples_from_groups([Group("task", (t,))], {"a": np.zeros(2) + 1})
    with pytest.warns(UserWarning, match="skipped"):
        kept = samples_from_groups([Group("task", (t,))], {"a": np.ones(2)},
                                   skip_missing_tokens=True)
    assert [s.step_index for s in kept] == [0]


def test_missing_or_malformed_advantages_raise(groups):
    with pytest.raises(TrainingDataError, match="no entry for scorable trajectory 'b'"):
        samples_from_groups(groups, {"a": np.ones(2)})
    with pytest.raises(TrainingDataError, match=r"need shape \(2,\)"):
        samples_from_groups(groups, {"a": np.ones(3), "b": np.ones(1)})
    with pytest.raises(TrainingDataError, match="not finite"):
        samples_from_groups(groups, {"a": np.array([1.0, np.nan]), "b": np.ones(1)})


def test_unrecorded_logprobs_become_nan_and_empty_completions_are_skipped():
    t = make_traj("a", [make_step(0, [1, 2], [3, 4], logprobs=()), make_step(1, [1, 2], [])])
    (s,) = samples_from_groups([Group("task", (t,))], {"a": np.ones(2)})
    assert not s.has_logprobs and all(math.isnan(x) for x in s.completion_logprobs)
    (mb,) = micro_batches([s], max_tokens=64, pad_id=0)
    assert mb.needs_recompute


def sample(prompt_len, completion_len, adv=1.0, tid="t"):
    ids = tuple(range(1, prompt_len + completion_len + 1))
    lps = tuple(-float(k + 1) for k in range(completion_len))
    return Sample(tid, "g", 0, ids, prompt_len, adv, lps)


def test_micro_batches_respect_budget_and_cover_every_sample_once():
    rng = np.random.default_rng(0)
    samples = [sample(int(rng.integers(1, 20)), int(rng.integers(1, 10)), tid=str(i))
               for i in range(40)]
    mbs = micro_batches(samples, max_tokens=64, pad_id=0)
    assert all(mb.input_ids.numel() <= 64 for mb in mbs)
    seen = sorted(i for mb in mbs for i in mb.sample_indices)
    assert seen == list(range(40))
    # longest first, deterministic
    lengths = [samples[i].length for mb in mbs for i in mb.sample_indices]
    assert lengths == sorted(lengths, reverse=True)
    again = micro_batches(samples, max_tokens=64, pad_id=0)
    assert [mb.sample_indices for mb in again] == [mb.sample_indices for mb in mbs]
    total = sum(s.num_completion_tokens for s in samples)
    assert sum(mb.num_tokens for mb in mbs) == total
    assert all(mb.normalizer("token_mean") == total for mb in mbs)
    assert all(mb.normalizer("seq_mean") == 40 for mb in mbs)
    with pytest.raises(ValueError, match="aggregation"):
        mbs[0].normalizer("sum")


def test_padding_and_target_alignment():
    s1, s2 = sample(3, 2, adv=0.5, tid="long"), sample(1, 1, adv=-2.0, tid="short")
    (mb,) = micro_batches([s2, s1], max_tokens=100, pad_id=99)
    assert mb.sample_indices == (1, 0)  # longest first
    assert mb.input_ids.dtype == torch.long and mb.input_ids.shape == (2, 5)
    assert mb.input_ids.tolist() == [[1, 2, 3, 4, 5], [1, 2, 99, 99, 99]]
    assert mb.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    # column j describes target input_ids[:, j+1]
    assert mb.loss_mask.shape == (2, 4) and mb.loss_mask.dtype == torch.float32
    assert mb.loss_mask.tolist() == [[0, 0, 1, 1], [1, 0, 0, 0]]
    assert mb.advantages.tolist() == [[0, 0, 0.5, 0.5], [-2.0, 0, 0, 0]]
    assert mb.old_logprobs.tolist() == [[0, 0, -1.0, -2.0], [-1.0, 0, 0, 0]]
    for r, s in enumerate((s1, s2)):
        targets = mb.input_ids[r, 1:][mb.loss_mask[r] > 0].tolist()
        assert targets == list(s.input_ids[s.prompt_len:])
    assert not mb.needs_recompute and mb.num_tokens == 3
    moved = mb.to("cpu")
    assert isinstance(moved, MicroBatch) and torch.equal(moved.loss_mask, mb.loss_mask)


def test_oversized_sample_gets_own_micro_batch_with_warning():
    samples = [sample(2, 2), sample(30, 5), sample(1, 2), sample(3, 1)]
    with pytest.warns(UserWarning, match="1 samples are longer than max_tokens=10"):
        mbs = micro_batches(samples, max_tokens=10, pad_id=0)
    assert mbs[0].sample_indices == (1,) and mbs[0].oversized
    assert mbs[0].input_ids.shape == (1, 35)
    assert all(not mb.oversized and mb.input_ids.numel() <= 10 for mb in mbs[1:])
    assert sorted(i for mb in mbs for i in mb.sample_indices) == [0, 1, 2, 3]


def test_empty_and_bad_budget():
    assert micro_batches([], max_tokens=8, pad_id=0) == []
    with pytest.raises(ValueError, match="max_tokens must be >= 1"):
        micro_batches([sample(1, 1)], max_tokens=0, pad_id=0)


def test_skipping_zero_advantage_keeps_the_normalizers():
    rows = [sample(2, 3, adv=0.0), sample(3, 2, adv=1.5), sample(1, 4, adv=0.0)]
    (plain,) = micro_batches(rows, max_tokens=64, pad_id=0)
    (skipped,) = micro_batches(rows, max_tokens=64, pad_id=0, skip_zero_advantage=True)
    assert skipped.sample_indices == (1,) and plain.input_ids.shape[0] == 3
    assert skipped.normalizer("token_mean") == plain.normalizer("token_mean") == 9
    assert skipped.normalizer("seq_mean") == plain.normalizer("seq_mean") == 3
    assert micro_batches([rows[0]], max_tokens=64, pad_id=0, skip_zero_advantage=True) == []
