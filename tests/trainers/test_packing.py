"""Shared-prefix packing gives the unpacked log-probs, losses and gradients on fewer tokens."""

import copy

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from agentgym.trainers import loss as loss_module
from agentgym.trainers.batching import Sample, micro_batches
from agentgym.trainers.config import LossConfig, OptimConfig
from agentgym.trainers.loss import packed_token_logprobs, token_logprobs
from agentgym.trainers.packing import pack_prefix_tree, packed_order
from agentgym.trainers.update import Learner, UpdateConfig, ppo_update

PAD = 0


def tiny_llama(seed=0):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=211, hidden_size=48, intermediate_size=96,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, pad_token_id=PAD)
    return LlamaForCausalLM(config).float()


def tokens(rng, n):
    return [int(x) for x in rng.integers(1, 211, n)]


def group_samples(rng, group="g0", prompt_len=40, size=4):
    """A group: ``size`` completions of different lengths after one shared prompt."""
    prompt = tokens(rng, prompt_len)
    out = []
    for i in range(size):
        completion = tokens(rng, 5 + 3 * i)
        out.append(Sample(f"{group}-{i}", group, 0, tuple(prompt + completion), prompt_len,
                          float(rng.normal()), tuple(rng.normal(-2, 0.1, len(completion)))))
    return out


def history_samples(rng, turns=4):
    """A full-history episode: each prompt is the previous turn's sequence + an observation."""
    context, out = tokens(rng, 20), []
    for t in range(turns):
        completion = tokens(rng, 6)
        out.append(Sample("h", "gh", t, tuple(context + completion), len(context),
                          float(rng.normal()), tuple(rng.normal(-2, 0.1, len(completion)))))
        context = context + completion + tokens(rng, 7)  # the observation
    return out


def test_prefix_tree_stores_each_shared_prefix_once():
    rng = np.random.default_rng(0)
    group, history = group_samples(rng), history_samples(rng)
    tree = pack_prefix_tree([s.input_ids for s in group])
    assert len(tree.tokens) == 40 + sum(s.num_completion_tokens for s in group)
    assert all([tree.tokens[i] for i in path] == list(s.input_ids)
               for path, s in zip(tree.paths, group, strict=True))
    assert all(list(tree.positions[i] for i in path) == list(range(len(path)))
               for path in tree.paths)
    chain = pack_prefix_tree([s.input_ids for s in history])
    assert len(chain.tokens) == history[-1].length  # T turns in the last turn's sequence
    mask = tree.ancestor_mask()
    first_a, first_b = tree.paths[0][40], tree.paths[1][40]  # two completions' first tokens
    assert mask[first_a, :40].all() and not mask[first_a, first_b] and not mask[first_b, first_a]


def test_packed_budget_counts_shared_prefixes_once():
    rng = np.random.default_rng(1)
    samples = group_samples(rng, "a") + history_samples(rng) + group_samples(rng, "b")
    packs = packed_order([s.input_ids for s in samples], max_tokens=200)
    for pack in packs:
        rows = [samples[i].input_ids for i in pack]
        assert len(pack) == 1 or len(pack_prefix_tree(rows).tokens) <= 200
    assert sorted(i for p in packs for i in p) == list(range(len(samples)))
    assert len(packs) < len(micro_batches(samples, 200, PAD))  # unpacked needs more passes


@pytest.mark.parametrize("with_entropy", [False, True])
def test_packed_logprobs_equal_unpacked(with_entropy):
    rng = np.random.default_rng(2)
    samples = group_samples(rng, "a") + group_samples(rng, "b", prompt_len=25) \
        + history_samples(rng)
    model = tiny_llama()
    for mb in micro_batches(samples, 10_000, PAD, pack=True):
        assert len(mb.sample_indices) == len(samples)  # one micro-batch: groups + history
        want, want_ent = token_logprobs(model, mb.input_ids, mb.attention_mask, 0.7,
                                        with_entropy=with_entropy, mask=mb.loss_mask)
        got, got_ent = packed_token_logprobs(model, mb.input_ids, mb.attention_mask, 0.7,
                                             with_entropy=with_entropy, mask=mb.loss_mask)
        assert (got[mb.loss_mask == 0] == 0).all()
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
        if with_entropy:
            torch.testing.assert_close(got_ent, want_ent, atol=1e-5, rtol=0)
        # Without a loss mask: every next token of every row, padding excluded.
        full, _ = packed_token_logprobs(model, mb.input_ids, mb.attention_mask)
        plain, _ = token_logprobs(model, mb.input_ids, mb.attention_mask)
        torch.testing.assert_close(full, plain, atol=1e-5, rtol=0)


def sgd_step(base, samples, optim, loss, prepare=None):
    """``(metrics, parameter change)`` of one update of a copy of ``base`` with plain SGD at
    lr 1, so the change is the gradient itself; ``prepare`` may alter the copy first."""
    model = copy.deepcopy(base)
    if prepare is not None:
        prepare(model)
    learner = Learner(model, torch.optim.SGD(model.parameters(), lr=1.0), None,
                      torch.device("cpu"), PAD)
    metrics = ppo_update(learner, samples, UpdateConfig(optim, loss, temperature=1.0, seed=0),
                         step=1)
    return metrics, {n: (p - b).detach() for (n, p), b in
                     zip(model.named_parameters(), base.parameters(), strict=True)}


def assert_same_step(plain, other):
    """Two :func:`sgd_step` results have the same loss and move every weight alike."""
    (m0, d0), (m1, d1) = plain, other
    assert m1["loss"] == pytest.approx(m0["loss"], abs=1e-6)
    assert m1["grad_norm"] == pytest.approx(m0["grad_norm"], rel=1e-5)
    assert max(float(d.abs().max()) for d in d0.values()) > 1e-4  # the step moved weights
    for name in d0:
        torch.testing.assert_close(d1[name], d0[name], atol=1e-6, rtol=1e-4, msg=name)


@pytest.mark.parametrize("entropy_coef", [0.0, 0.01])
def test_training_step_with_packing_matches_without(entropy_coef):
    rng = np.random.default_rng(3)
    samples = group_samples(rng, "a") + group_samples(rng, "b") + history_samples(rng)
    base = tiny_llama()
    results = [sgd_step(base, samples, OptimConfig(max_tokens_per_micro_batch=150,
                                                   grad_clip=0.0, pack_prefixes=pack),
                        LossConfig(entropy_coef=entropy_coef))
               for pack in (False, True)]
    assert_same_step(*results)


def test_no_reference_model_at_kl_weight_zero(tiny_model_dir, tmp_path):
    from agentgym.trainers.config import load_config
    from agentgym.trainers.loop import build

    args = [f"model.path={tiny_model_dir}", "env.id=agentgym/MentalMath-v0",
            "tensorboard=false"]
    lean = build(load_config(None, [f"run_dir={tmp_path / 'a'}", *args]))
    assert lean.config.loss.kl_coef == 0 and lean.learner.reference is None
    kl = build(load_config(None, [f"run_dir={tmp_path / 'b'}", "loss.kl_coef=0.05", *args]))
    assert kl.learner.reference is not None
    assert not any(p.requires_grad for p in kl.learner.reference.parameters())


@pytest.mark.parametrize("with_entropy", [False, True])
def test_a_long_shared_prompt_runs_once_before_a_batch_of_the_rest(monkeypatch, with_entropy):
    """Rows that share a long prompt and little else: the prompt runs once, its keys and
    values are repeated for the rows, whose rest runs as a padded batch (cheaper than the
    tree's dense N × N mask); log-probs and gradients are the unpacked ones."""
    rng = np.random.default_rng(6)
    samples = group_samples(rng, "a", prompt_len=300, size=6)
    prompt = list(samples[0].input_ids[:300])
    for i, extra in enumerate((60, 90)):  # later turns: an observation before the action
        rest = tokens(rng, extra)
        samples.append(Sample(f"a-obs{i}", "a", 1, tuple(prompt + rest + tokens(rng, 4)),
                              300 + extra, 0.5, (-1.0,) * 4))
    long_answer = tokens(rng, 40)  # scored columns reach further back than short rests
    samples.append(Sample("a-long", "a", 0, tuple(prompt + long_answer), 300, 0.1,
                          (-1.0,) * 40))
    rests = [s.length - 299 for s in samples]
    assert len(loss_module._length_buckets(rests)) == 3  # short rests, longer, the answer
    model = tiny_llama()
    calls = []
    batched = loss_module._prefix_batched_logprobs
    monkeypatch.setattr(loss_module, "_prefix_batched_logprobs",
                        lambda *a, **k: calls.append(a[4]) or batched(*a, **k))
    [mb] = micro_batches(samples, 10_000, PAD, pack=True)
    want, want_ent = token_logprobs(model, mb.input_ids, mb.attention_mask, 0.7,
                                    with_entropy=with_entropy, mask=mb.loss_mask)
    got, got_ent = packed_token_logprobs(model, mb.input_ids, mb.attention_mask, 0.7,
                                         with_entropy=with_entropy, mask=mb.loss_mask)
    assert calls == [299]  # the prompt, up to the token that predicts the first completion
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    if with_entropy:
        torch.testing.assert_close(got_ent, want_ent, atol=1e-5, rtol=0)
    params = list(model.parameters())
    g_want = torch.autograd.grad(want.sum(), params)
    g_got = torch.autograd.grad(got.sum(), params)
    for a, b in zip(g_got, g_want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    # Rows with nothing in common beyond a few tokens keep the prefix tree.
    calls.clear()
    mixed = group_samples(rng, "b", prompt_len=300) + history_samples(rng)
    [mb] = micro_batches(mixed, 10_000, PAD, pack=True)
    packed_token_logprobs(model, mb.input_ids, mb.attention_mask, mask=mb.loss_mask)
    assert calls == []
