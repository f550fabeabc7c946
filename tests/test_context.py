"""Context managers: token-exact full history and verl-agent windows, with a real tokenizer."""

import pytest

import agentgym
from agentgym import Message
from agentgym.context import ContextConfig, ContextLimitExceeded, FullContext, WindowContext
from agentgym.errors import ConfigError
from agentgym.policies.base import Completion, SamplingParams
from agentgym.prompting import render_prompt
from agentgym.rollout import LMAgent, RolloutConfig, run_groups


def completion(tokenizer, text, eos=True, prompt_ids=()):
    ids = tokenizer.encode(text, add_special_tokens=False)
    if eos:
        ids.append(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    return Completion(text, tuple(prompt_ids), tuple(ids), tuple([-0.5] * len(ids)))


PROMPT = [Message("user", "Solve it.")]


def test_full_context_continues_the_sampled_ids(smollm2_tokenizer):
    tok = smollm2_tokenizer
    ctx = FullContext(ContextConfig(), tok, PROMPT, [])
    first = ctx.request(SamplingParams())
    assert tok.decode(first.prompt_ids) == render_prompt(tok, PROMPT)
    c1 = completion(tok, "<action>up</action>")
    ctx.record(c1, [Message("user", "grid 1")])
    second = ctx.request(SamplingParams())
    # The sampled ids are kept verbatim, and the whole prompt is what the template renders.
    assert second.prompt_ids[: len(first.prompt_ids) + len(c1.completion_ids)] == (
        first.prompt_ids + c1.completion_ids)
    assert tok.decode(second.prompt_ids) == render_prompt(tok, ctx.messages)
    assert ctx.rerenders == 0


def test_full_context_keeps_odd_tokenizations(smollm2_tokenizer):
    """A completion cut by max_tokens (no EOS) with a rare split is still continued exactly."""
    tok = smollm2_tokenizer
    ctx = FullContext(ContextConfig(), tok, PROMPT, [])
    first = ctx.request(SamplingParams())
    odd = tuple(tok.convert_tokens_to_ids(t) for t in ["u", "p"])  # 'up' as two tokens
    ctx.record(Completion("up", (), odd), [Message("user", "grid 2")])
    second = ctx.request(SamplingParams()).prompt_ids
    assert second[len(first.prompt_ids): len(first.prompt_ids) + 2] == odd
    assert tok.decode(second) == render_prompt(tok, ctx.messages)


def test_full_context_limit(smollm2_tokenizer):
    ctx = FullContext(ContextConfig(max_prompt_tokens=5), smollm2_tokenizer, PROMPT, [])
    with pytest.raises(ContextLimitExceeded):
        ctx.request(SamplingParams())


@pytest.mark.parametrize("k", [0, 1, 2])
def test_window_keeps_task_and_last_k_turns(k):
    ctx = WindowContext(ContextConfig(mode="window", history_length=k), None, PROMPT, [])
    for i in range(4):
        ctx.record(Completion(f"a{i}"), [Message("user", f"o{i + 1}")])
    texts = [m.content for m in ctx.request(SamplingParams()).messages]
    expected = {0: ["Solve it.", "o4"],
                1: ["Solve it.", "o3", "a3", "o4"],
                2: ["Solve it.", "o2", "a2", "o3", "a3", "o4"]}[k]
    assert texts == expected


def test_window_early_steps_have_no_padding():
    ctx = WindowContext(ContextConfig(mode="window", history_length=2), None, PROMPT, [])
    ctx.record(Completion("a0"), [Message("user", "o1")])
    assert [m.content for m in ctx.request(SamplingParams()).messages] == ["Solve it.", "a0", "o1"]


def test_config_validation():
    with pytest.raises(ConfigError, match="'full' or 'window'"):
        ContextConfig(mode="summary")
    with pytest.raises(ConfigError, match="history_length"):
        ContextConfig(history_length=-1)
    assert ContextConfig(mode="window", history_length=3).window == 3
    assert ContextConfig().window is None


class _Canned:
    """A policy that plays Sokoban's expert moves as text, with real token ids."""

    def __init__(self, tokenizer, fail_on_call=None):
        self.tokenizer, self.calls, self.fail_on_call = tokenizer, 0, fail_on_call

    async def generate(self, requests):
        self.calls += 1
        if self.calls == self.fail_on_call:
            raise ConnectionError("server went away")
        return [completion(self.tokenizer, "<action>left</action>", prompt_ids=r.prompt_ids)
                for r in requests]

    async def aclose(self):
        pass


async def test_lm_agent_records_exact_tokens_through_the_engine(smollm2_tokenizer):
    policy = _Canned(smollm2_tokenizer)
    agent = LMAgent(policy, ContextConfig(), SamplingParams(max_tokens=16))
    trajs = await run_groups(lambda: agentgym.make("agentgym/Sokoban-v0", max_turns=3), agent,
                             seeds=[0, 1], config=RolloutConfig(group_size=2))
    assert len(trajs) == 4
    for t in trajs:
        assert t.status in ("terminated", "truncated")
        for prev, step in zip(t.steps, t.steps[1:], strict=False):
            assert step.tokens.prompt_ids[: len(prev.tokens.prompt_ids)] == prev.tokens.prompt_ids
        assert all(len(s.tokens.logprobs) == len(s.tokens.completion_ids) for s in t.steps)


async def test_policy_fault_is_an_error_trajectory(smollm2_tokenizer):
    agent = LMAgent(_Canned(smollm2_tokenizer, fail_on_call=2))
    trajs = await run_groups(lambda: agentgym.make("agentgym/Sokoban-v0"), agent, seeds=[0, 1],
                             config=RolloutConfig(concurrency=1))
    statuses = sorted(t.status for t in trajs)
    assert "error" in statuses and any(s != "error" for s in statuses)
    bad = next(t for t in trajs if t.status == "error")
    assert "ConnectionError: server went away" in bad.error and bad.outcome_reward is None
