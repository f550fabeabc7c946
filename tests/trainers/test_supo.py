"""SUPO training split: I+1 sequences per rollout, shared rollout advantages, overlong masking."""

import json
import math
import re

import numpy as np
import pytest

import agentgym
from agentgym import Message, ToolCall
from agentgym.context import ContextConfig, SummarizeConfig
from agentgym.envs.logsearch.scripted import PlanPolicy
from agentgym.envs.swe.rewards import swe_components
from agentgym.errors import ConfigError
from agentgym.rollout import LMAgent, run_episode
from agentgym.trainers.advantages import get_estimator
from agentgym.trainers.batching import micro_batches
from agentgym.trainers.config import TrainConfig, from_dict
from agentgym.trainers.rewards import rescore_groups
from agentgym.trainers.supo import (
    SUPOOptions,
    check_estimator,
    is_overlong,
    supo_metrics,
    supo_samples,
    working_contexts,
)
from agentgym.types import Group, Trajectory

SEED = 1
# Small logs (4 pages a file) keep the reading plan short; no env turn limit in the way.
ENV_KWARGS = {"lines_per_file": 60, "decoys": 10, "max_turns": 500}


async def rollout(tok, plan, max_calls=200):
    env = agentgym.make("agentgym/LogSearch-v0", **ENV_KWARGS)
    context = ContextConfig(mode="summarize", summarize=SummarizeConfig(
        working_tokens=2048, max_summaries=30, max_calls=max_calls))
    traj = await run_episode(env, LMAgent(PlanPolicy(tok, lambda _: plan), context),
                             seed=SEED, group_id="g")
    await env.aclose()
    return traj


@pytest.fixture(scope="module")
def group(smollm2_tokenizer):
    """One task, three rollouts: a reader that summarizes and wins, a quick wrong answer,
    and a reader cut off by H (overlong)."""
    import asyncio

    async def main():
        env = agentgym.make("agentgym/LogSearch-v0", **ENV_KWARGS)
        await env.reset(seed=SEED)
        reader = env.reader_plan()
        wrong = [reader[0], Message("assistant", "", tool_calls=(
            ToolCall("c", "answer", {"code": "E-0000"}),))]
        return Group.from_trajectories([await rollout(smollm2_tokenizer, reader),
                                        await rollout(smollm2_tokenizer, wrong),
                                        await rollout(smollm2_tokenizer, reader, max_calls=7)])

    (g,) = asyncio.run(main())
    return g


def test_each_rollout_becomes_i_plus_1_sequences_with_its_shared_advantage(group):
    win, wrong, cut = group.trajectories
    assert [t.outcome_reward for t in group.trajectories] == [1.0, 0.0, 0.0]
    assert cut.status == "truncated" and cut.metrics["overlong"] == 1.0
    advantages = get_estimator("grpo")([group])
    samples = supo_samples([group], advantages)
    mine = [s for s in samples if s.traj_id == win.id]
    summaries = [s for s in win.steps if s.summary]
    assert len(summaries) >= 3 and len(mine) == len(summaries) + 1
    # GRPO over the 3 rollouts, R = (1, 0, 0): mean 1/3, unbiased std sqrt(1/3).
    a_win, a_lose = (2 / 3) / (math.sqrt(1 / 3) + 1e-6), (-1 / 3) / (math.sqrt(1 / 3) + 1e-6)
    for sample, part in zip(mine, working_contexts(win), strict=True):
        last = part[-1].tokens
        assert sample.input_ids == last.prompt_ids + last.completion_ids
        mask = sample.loss_mask
        trained = [t for t, m in zip(sample.input_ids, mask, strict=True) if m]
        # The policy's own tokens of every turn still in the context, in order; the dropped
        # turn before a summary is not among them.
        kept = part[:-2] + part[-1:] if part[-1].summary else part
        assert trained == [t for s in kept for t in s.tokens.completion_ids]
        assert mask[:sample.prompt_len].sum() == 0
        np.testing.assert_allclose(sample.advantages[mask > 0], a_win, rtol=1e-6)
        np.testing.assert_allclose(sample.old_logprobs[mask > 0], -0.5)
        if part[-1].summary:  # the summary closes the sequence and is trained
            n = len(last.completion_ids)
            assert sample.input_ids[-n:] == last.completion_ids and mask[-n:].all()
    (only,) = [s for s in samples if s.traj_id == wrong.id]
    np.testing.assert_allclose(only.advantages[only.loss_mask > 0], a_lose, rtol=1e-6)


def test_group_statistics_are_over_rollouts_not_sequences(group):
    advantages = get_estimator("grpo")([group])
    samples = supo_samples([group], advantages, SUPOOptions(overlong_mask=False))
    win = group.trajectories[0]
    # Over sequences, the winner's many sequences would pull the mean up: a smaller advantage.
    scores = [t.outcome_reward for t in group.trajectories for s in samples if s.traj_id == t.id]
    over_sequences = (1 - np.mean(scores)) / (np.std(scores, ddof=1) + 1e-6)
    over_rollouts = (2 / 3) / (math.sqrt(1 / 3) + 1e-6)
    got = [s.advantage for s in samples if s.traj_id == win.id]
    assert len(got) > 1 and got == pytest.approx([over_rollouts] * len(got))
    assert abs(over_sequences - over_rollouts) > 0.3


def test_overlong_rollouts_are_masked_but_count_in_the_statistics(group):
    cut = group.trajectories[2]
    advantages = get_estimator("grpo")([group])
    masked = supo_samples([group], advantages)
    assert not [s for s in masked if s.traj_id == cut.id]
    # Still in the statistics: without it the winner's advantage would be (1 - 0.5) / std.
    win = [s for s in masked if s.traj_id == group.trajectories[0].id]
    assert win[0].advantage == pytest.approx((2 / 3) / (math.sqrt(1 / 3) + 1e-6))
    unmasked = supo_samples([group], advantages, SUPOOptions(overlong_mask=False))
    assert [s for s in unmasked if s.traj_id == cut.id]


def test_packed_micro_batches_train_exactly_the_masked_tokens(group):
    samples = supo_samples([group], get_estimator("grpo")([group]))
    total = sum(s.num_completion_tokens for s in samples)
    mbs = micro_batches(samples, max_tokens=8192, pad_id=0)
    assert sum(mb.num_tokens for mb in mbs) == total == mbs[0].global_tokens
    for mb in mbs:
        for row, i in enumerate(mb.sample_indices):
            s = samples[i]
            np.testing.assert_array_equal(mb.loss_mask[row, :s.length - 1].numpy(),
                                          s.loss_mask[1:])
            assert not mb.needs_recompute


def test_step_level_estimators_are_explicit(group):
    with pytest.raises(ConfigError, match="step_level=per_step"):
        check_estimator("gigpo", SUPOOptions())
    check_estimator("rloo", SUPOOptions())
    check_estimator("gigpo", SUPOOptions(step_level="per_step"))
    # per_step: each turn inside a packed sequence keeps its own step advantage.
    advantages = get_estimator("gigpo")([group])
    win = group.trajectories[0]
    samples = supo_samples([group], advantages, SUPOOptions(step_level="per_step"))
    first = next(s for s in samples if s.traj_id == win.id)
    part = working_contexts(win)[0]
    adv = first.advantages
    kept = [part[0], part[-1]]  # the read, then (the dropped read skipped) the summary
    for step in kept:
        p, c = len(step.tokens.prompt_ids), len(step.tokens.completion_ids)
        np.testing.assert_allclose(adv[p:p + c], advantages[win.id][step.index], rtol=1e-6)


def test_metrics(group):
    m = supo_metrics(group.trajectories)
    counts = [sum(s.summary for s in t.steps) for t in group.trajectories]
    assert m["supo/summaries_per_episode"] == pytest.approx(sum(counts) / 3)
    assert m["supo/sequences_per_rollout"] == pytest.approx(sum(counts) / 3 + 1)
    assert m["supo/overlong_fraction"] == pytest.approx(1 / 3)
    steps = [s for t in group.trajectories for s in t.steps]
    assert m["supo/context_tokens_per_call"] == pytest.approx(
        np.mean([len(s.tokens.prompt_ids) for s in steps]))
    assert m["supo/tool_calls_per_episode"] == pytest.approx(
        sum(not s.summary for s in steps) / 3)
    assert 0 < m["supo/context_tokens_per_call"] < 2048


def test_train_loop_with_summarize_logs_supo_metrics(tmp_path, tiny_model_dir):
    from agentgym.trainers.loop import train

    cfg = from_dict(TrainConfig, {
        "run_dir": str(tmp_path / "run"), "steps": 1, "save_every": 1, "tensorboard": False,
        "env": {"id": "agentgym/LogSearch-v0", "kwargs": {"lines_per_file": 60, "decoys": 3}},
        "model": {"path": str(tiny_model_dir)},
        "rollout": {"tasks_per_step": 1, "group_size": 2, "max_tokens": 6,
                    "context": "summarize",
                    "summarize": {"working_tokens": 600, "max_summaries": 2, "max_calls": 6}},
        # Every rollout hits S (overlong); unmasked, the invalid-action penalty gives a signal.
        "algorithm": {"supo": {"overlong_mask": False}},
        "optim": {"lr": 1e-3}})
    run = train(cfg)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    step = rows[-1]
    # The first prompt alone is near W = 600, so every rollout summarizes, up to S = 2.
    assert step["supo/summaries_per_episode"] == 2.0
    assert step["supo/sequences_per_rollout"] == 3.0
    assert step["supo/overlong_fraction"] == 1.0
    assert step["samples"] > 0 and math.isfinite(step["loss"])

    with pytest.raises(ConfigError, match="step-level"):
        from agentgym.trainers.loop import build

        build(from_dict(TrainConfig, {**json.loads(json.dumps({
            "run_dir": str(tmp_path / "run2"), "model": {"path": str(tiny_model_dir)},
            "rollout": {"context": "summarize"}, "algorithm": {"estimator": "gigpo"}}))}))


@pytest.mark.parametrize(("status", "metrics", "overlong"), [
    ("truncated", {"overlong": 1.0}, True),  # H
    ("truncated", {"truncated_by_context": 1.0}, True),  # the context limit
    ("truncated", {}, True),  # the env's turn limit, or the engine's step cap
    ("terminated", {}, False),
    ("error", {"overlong": 1.0}, False),
])
def test_every_truncated_ending_is_overlong(status, metrics, overlong):
    traj = Trajectory("t", "task", "task", (), (), status=status, metrics=metrics,
                      error="boom" if status == "error" else None)
    assert is_overlong(traj) is overlong


def test_rescored_rollouts_that_never_submitted_train_unless_masked(group):
    # G-RA's no-submit penalty is the signal for a rollout cut off without an answer: the
    # default trains it; mask_rescored=True keeps SUPO's overlong mask over it.
    _, _, cut = group.trajectories
    (rescored,) = rescore_groups([group], swe_components(label=lambda t: (
        "no_submit" if t.id == cut.id else "resolved")))
    advantages = get_estimator("grpo", invalid_penalty=0.0)([rescored])
    assert advantages[cut.id][-1] < 0  # the penalty reaches it
    trained = {s.traj_id for s in supo_samples([rescored], advantages)}
    masked = {s.traj_id for s in supo_samples([rescored], advantages,
                                              SUPOOptions(mask_rescored=True))}
    assert cut.id in trained and cut.id not in masked
    assert cut.id not in {s.traj_id for s in supo_samples([group], get_estimator("grpo")(
        [group]))}  # without rewards: masked as before


@pytest.mark.parametrize("switch", ["engine=ray", "async_training.enabled=true",
                                    "rollout.april.enabled=true"])
def test_summarize_is_refused_where_a_driver_would_skip_its_summaries(switch):
    """SUPO's summary turns are taken by the embedded loop's agent only; a driver's versioned
    agent would drop them silently, so such a config is refused when it is read."""
    from agentgym.trainers.config import load_config

    with pytest.raises(ConfigError, match=f"summarize.*{re.escape(switch)}"):
        load_config(None, ["rollout.context=summarize", switch])
