"""Prefix-tree attention: per-segment attention gives the dense mask's log-probs and steps."""

import numpy as np
import pytest
import torch

from agentgym.policies.attention import NAME, use_grouped_sdpa
from agentgym.trainers import loss as loss_module
from agentgym.trainers.batching import micro_batches
from agentgym.trainers.config import LossConfig, OptimConfig
from agentgym.trainers.loss import packed_token_logprobs, token_logprobs
from agentgym.trainers.models import checkpoint_activations
from agentgym.trainers.packing import pack_prefix_tree
from agentgym.trainers.tree_attention import TreePlan, runs_tree_attention, tree_plan

from .test_packing import (
    PAD,
    assert_same_step,
    group_samples,
    history_samples,
    sgd_step,
    tiny_llama,
)


def test_plan_segments_see_their_ancestors_only():
    # rows [1,2,3,4], [1,2,5,6], [1,2,3,8], [7]: segments [0,4) [4,6) [6,7) [7,8)
    tree = pack_prefix_tree([[1, 2, 3, 4], [1, 2, 5, 6], [1, 2, 3, 8], [7]])
    plan = tree_plan(tree)
    assert [(s.start, s.end) for s in plan.segments] == [(0, 4), (4, 6), (6, 7), (7, 8)]
    root, five_six, eight, seven = plan.segments
    assert root.keys is None and seven.keys is None  # roots: plain causal attention
    assert five_six.keys.tolist() == [0, 1, 4, 5]  # token 2's path, then its own
    assert eight.keys.tolist() == [0, 1, 2, 6]  # part of the root segment, then its own
    assert (eight.mask == 0).all()  # one own token: it sees every key
    # the dense mask allows exactly the pairs the plan attends
    assert plan.attention_pairs == int(tree.ancestor_mask().sum())


def test_own_tokens_are_causal_within_a_segment():
    tree = pack_prefix_tree([[1, 2, 3], [1, 4, 5, 6]])
    branch = tree_plan(tree).segments[1]
    assert branch.keys.tolist() == [0, 3, 4, 5]
    allowed = (branch.mask == 0).tolist()
    assert allowed == [[True, True, False, False], [True, True, True, False],
                       [True, True, True, True]]


def grouped(model):
    assert use_grouped_sdpa(model) and runs_tree_attention(model)
    return model


@pytest.mark.parametrize("with_entropy", [False, True])
def test_tree_logprobs_equal_unpacked_and_dense(monkeypatch, with_entropy):
    monkeypatch.setattr(loss_module, "BATCH_SHARED_PREFIX", False)  # the tree, every time
    rng = np.random.default_rng(2)
    samples = group_samples(rng, "a") + group_samples(rng, "b", prompt_len=25) \
        + history_samples(rng)
    dense, tree = tiny_llama(), grouped(tiny_llama())
    assert not runs_tree_attention(dense)  # transformers' sdpa: the dense mask
    for mb in micro_batches(samples, 10_000, PAD, pack=True):
        args = (mb.input_ids, mb.attention_mask, 0.7)
        want, want_ent = token_logprobs(dense, *args, with_entropy=with_entropy,
                                        mask=mb.loss_mask)
        masked, _ = packed_token_logprobs(dense, *args, mask=mb.loss_mask)
        got, got_ent = packed_token_logprobs(tree, *args, with_entropy=with_entropy,
                                             mask=mb.loss_mask)
        assert (got[mb.loss_mask == 0] == 0).all()
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
        torch.testing.assert_close(got, masked, atol=1e-5, rtol=0)
        if with_entropy:
            torch.testing.assert_close(got_ent, want_ent, atol=1e-5, rtol=0)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_training_step_with_tree_attention_matches_unpacked(monkeypatch, checkpointing):
    monkeypatch.setattr(loss_module, "BATCH_SHARED_PREFIX", False)
    rng = np.random.default_rng(3)
    samples = group_samples(rng, "a") + group_samples(rng, "b") + history_samples(rng)
    base = tiny_llama()
    optim = OptimConfig(max_tokens_per_micro_batch=150, grad_clip=0.0)

    def prepare(model):
        grouped(model)
        if checkpointing:  # the plan must reach the recomputation in the backward pass too
            checkpoint_activations(model)
            model.train()

    calls = []
    attend = TreePlan.attend
    monkeypatch.setattr(TreePlan, "attend", lambda self, *a, **k: calls.append(1)
                        or attend(self, *a, **k))
    plain = sgd_step(base, samples, OptimConfig(max_tokens_per_micro_batch=150, grad_clip=0.0,
                                                pack_prefixes=False), LossConfig())
    assert not calls
    assert_same_step(plain, sgd_step(base, samples, optim, LossConfig(), prepare))
    passes = len(micro_batches(samples, 150, PAD, pack=True))
    # every layer of every pass attended by plan, again when checkpointing recomputes it
    assert len(calls) == passes * base.config.num_hidden_layers * (2 if checkpointing else 1)


def test_generation_on_the_same_attention_is_unchanged():
    # no plan: the grouped attention is transformers' SDPA, masks and cache as before
    model, ref = grouped(tiny_llama()), tiny_llama()
    assert model.config._attn_implementation == NAME
    ids = torch.tensor([[5, 9, 11, 3, 7]])
    torch.testing.assert_close(model(input_ids=ids).logits, ref(input_ids=ids).logits,
                               atol=1e-5, rtol=0)
    out = model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=PAD)
    assert out.tolist() == ref.generate(ids, max_new_tokens=4, do_sample=False,
                                        pad_token_id=PAD).tolist()


def test_a_window_model_keeps_the_dense_mask():
    model = grouped(tiny_llama())
    model.config.sliding_window = 16
    assert not runs_tree_attention(model)
