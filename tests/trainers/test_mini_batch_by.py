"""``optim.mini_batch_by``: splitting a step into mini-batches by sample, episode or group."""

import copy

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from agentgym.errors import ConfigError
from agentgym.trainers.batching import Sample, mini_batch_parts
from agentgym.trainers.config import LossConfig, OptimConfig, load_config
from agentgym.trainers.packing import pack_prefix_tree
from agentgym.trainers.update import Learner, UpdateConfig, ppo_update


def episodes(groups=4, per_group=2, turns=3, seed=0):
    """Full-history episodes: each turn's prompt is the last turn's prompt, completion and
    observation; a group's episodes share their first prompt."""
    rng = np.random.default_rng(seed)
    ints = lambda n: tuple(int(x) for x in rng.integers(1, 97, n))  # noqa: E731
    out = []
    for g in range(groups):
        prompt = ints(6)
        for e in range(per_group):
            context = prompt
            for t in range(turns):
                completion = ints(3)
                out.append(Sample(f"g{g}e{e}", f"g{g}", t, context + completion, len(context),
                                  float(rng.normal()), tuple(rng.normal(-3, 0.1, 3))))
                context = context + completion + ints(2)
    return out


@pytest.mark.parametrize("by", ["sample", "episode", "group"])
def test_parts_cover_every_sample_once_and_keep_their_units_whole(by):
    rows = episodes()
    parts = mini_batch_parts(rows, 3, np.random.default_rng(1), by=by)
    assert len(parts) == 3
    assert sorted(i for part in parts for i in part) == list(range(len(rows)))
    if by != "sample":
        key = (lambda s: s.traj_id) if by == "episode" else (lambda s: s.group_id)
        homes = {key(rows[i]): n for n, part in enumerate(parts) for i in part}
        assert all(homes[key(rows[i])] == n for n, part in enumerate(parts) for i in part)


def test_by_sample_is_the_plain_shuffle_and_cut():
    rows = episodes()
    perm = np.random.default_rng(5).permutation(len(rows))
    expected = [list(p) for p in np.array_split(perm, 2)]
    assert mini_batch_parts(rows, 2, np.random.default_rng(5)) == expected


def test_fewer_units_than_parts_gives_one_part_a_unit():
    rows = episodes(groups=2)
    assert len(mini_batch_parts(rows, 4, np.random.default_rng(0), by="group")) == 2
    assert len(mini_batch_parts(rows, 4, np.random.default_rng(0), by="episode")) == 4


def test_whole_episodes_collapse_into_their_last_turns():
    rows = episodes()
    last_turns = sum(r.length for r in rows if r.step_index == 2)
    by_episode = mini_batch_parts(rows, 2, np.random.default_rng(0), by="episode")
    by_group = mini_batch_parts(rows, 2, np.random.default_rng(0), by="group")

    def packed(parts):
        return sum(len(pack_prefix_tree([rows[i].input_ids for i in part]).tokens)
                   for part in parts)

    # every turn of an episode lies inside its last turn's sequence
    assert packed(by_episode) <= last_turns
    # a group's episodes also share their first prompt (6 tokens): once per group
    assert packed(by_group) == last_turns - 6 * 4
    by_sample = [packed(mini_batch_parts(rows, 2, np.random.default_rng(s))) for s in range(5)]
    assert min(by_sample) > packed(by_group)


def tiny_llama():
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)).float()


def update(base, rows, by, mini_batches):
    model = copy.deepcopy(base)
    learner = Learner(model, torch.optim.SGD(model.parameters(), lr=1.0), None,
                      torch.device("cpu"), 0)
    config = UpdateConfig(OptimConfig(grad_clip=0.0, mini_batches=mini_batches, mini_batch_by=by,
                                      max_tokens_per_micro_batch=64),
                          LossConfig(), temperature=1.0, seed=0)
    planned = []
    metrics = ppo_update(learner, rows, config, step=0,
                         on_micro_batch=lambda done, total: planned.append(total))
    return metrics, planned[0], [p.detach().clone() for p in model.parameters()]


def test_one_mini_batch_is_the_same_update_whatever_the_unit():
    base, rows = tiny_llama(), episodes()
    _, _, reference = update(base, rows, "sample", 1)
    for by in ("episode", "group"):
        _, _, params = update(base, rows, by, 1)
        for a, b in zip(reference, params, strict=True):
            torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5)


def test_whole_groups_take_fewer_forward_passes():
    base, rows = tiny_llama(), episodes()
    _, n_sample, _ = update(base, rows, "sample", 2)
    m_group, n_group, params = update(base, rows, "group", 2)
    assert np.isfinite(m_group["loss"])
    moved = [float((p - b.detach()).abs().max())
             for p, b in zip(params, base.parameters(), strict=True)]
    assert max(moved) > 1e-5
    assert n_group < n_sample


def test_an_unknown_unit_is_refused_with_the_choices():
    with pytest.raises(ConfigError, match="episode"):
        load_config(None, ["optim.mini_batch_by=turn"])
