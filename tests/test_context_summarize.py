"""SUPO's ``summarize`` context and rollouts: triggers, dropped turns, exact ids, S and H."""

import pytest

import agentgym
from agentgym import Message
from agentgym.context import (
    CONTINUATION_PROMPT,
    SUMMARY_INSTRUCTION,
    ContextConfig,
    SummarizeConfig,
    SummarizeContext,
    SummaryLimitReached,
)
from agentgym.envs.logsearch.scripted import PlanPolicy
from agentgym.errors import ConfigError
from agentgym.policies.base import Completion, SamplingParams
from agentgym.prompting import render_prompt
from agentgym.rollout import LMAgent, run_episode
from agentgym.types import Trajectory

# Small logs (4 pages a file) keep the reading plan short; no env turn limit in the way.
ENV_KWARGS = {"lines_per_file": 60, "decoys": 10, "max_turns": 500}
PROMPT = [Message("system", "You trace requests."), Message("user", "Find the code.")]


def completion(tok, text):
    ids = (*tok.encode(text, add_special_tokens=False), tok.eos_token_id)
    return Completion(text, (), ids, (-0.5,) * len(ids))


def context(tok, w=200, s=2):
    config = ContextConfig(mode="summarize", summarize=SummarizeConfig(working_tokens=w,
                                                                       max_summaries=s))
    return SummarizeContext(config, tok, PROMPT, [])


def test_summary_drops_the_last_turn_and_continues_the_sampled_ids(smollm2_tokenizer):
    tok = smollm2_tokenizer
    ctx = context(tok)
    first = ctx.request(SamplingParams())
    a0 = completion(tok, "read page one")
    ctx.record(a0, [Message("user", "short page")])
    assert not ctx.needs_summary()
    second = ctx.request(SamplingParams())
    ctx.record(completion(tok, "read page two"), [Message("user", "log line " * 80)])
    assert ctx.context_tokens >= 0.95 * 200 and ctx.needs_summary()

    request = ctx.summary_request(SamplingParams())
    # Turn two (action and its long page) left the context; the instruction was appended.
    assert [m.content for m in request.messages] == [
        "You trace requests.", "Find the code.", "read page one", "short page",
        SUMMARY_INSTRUCTION]
    assert tok.decode(request.prompt_ids) == render_prompt(tok, request.messages)
    # The ids sampled for turn one sit in the summary prompt verbatim.
    n = len(first.prompt_ids)
    assert request.prompt_ids[n:n + len(a0.completion_ids)] == a0.completion_ids
    assert request.prompt_ids[:len(second.prompt_ids) - 3] == second.prompt_ids[:-3]
    assert ctx.rerenders == 0

    continuation, valid = ctx.record_summary(completion(tok, "<summary>page one: no code"
                                                             "</summary>"))
    assert valid and continuation.content == CONTINUATION_PROMPT + "page one: no code"
    nxt = ctx.request(SamplingParams())
    assert [m.content for m in nxt.messages] == ["You trace requests.", "Find the code.",
                                                 continuation.content]
    assert tok.decode(nxt.prompt_ids) == render_prompt(tok, nxt.messages)
    assert ctx.summaries == 1 and not ctx.needs_summary()


def test_a_tool_call_in_the_summary_turn_is_invalid(smollm2_tokenizer):
    tok = smollm2_tokenizer
    ctx = context(tok, w=50)
    ctx.request(SamplingParams())
    ctx.record(completion(tok, "a"), [Message("user", "x " * 60)])
    ctx.summary_request(SamplingParams())
    text = '<summary>s</summary><tool_call>{"name": "read", "arguments": {}}</tool_call>'
    _, valid = ctx.record_summary(completion(tok, text))
    assert not valid
    # A summary without tags is used whole.
    ctx.request(SamplingParams())
    ctx.record(completion(tok, "a"), [Message("user", "x " * 60)])
    ctx.summary_request(SamplingParams())
    message, valid = ctx.record_summary(completion(tok, "plain notes"))
    assert valid and message.content.endswith("plain notes")


def test_summary_limit_and_summary_max_tokens(smollm2_tokenizer):
    tok = smollm2_tokenizer
    config = ContextConfig(mode="summarize", summarize=SummarizeConfig(
        working_tokens=50, max_summaries=1, summary_max_tokens=300))
    ctx = SummarizeContext(config, tok, PROMPT, [])
    ctx.request(SamplingParams(max_tokens=8))
    ctx.record(completion(tok, "a"), [Message("user", "x " * 60)])
    assert ctx.summary_request(SamplingParams(max_tokens=8)).params.max_tokens == 300
    ctx.record_summary(completion(tok, "<summary>s</summary>"))
    ctx.request(SamplingParams())
    ctx.record(completion(tok, "a"), [Message("user", "x " * 60)])
    with pytest.raises(SummaryLimitReached):
        ctx.summary_request(SamplingParams())


def test_config_validation_and_eval_settings():
    with pytest.raises(ConfigError, match="'summarize'"):
        ContextConfig(mode="summary")
    with pytest.raises(ConfigError, match="working_tokens"):
        SummarizeConfig(working_tokens=0)
    with pytest.raises(ConfigError, match="trigger"):
        SummarizeConfig(trigger=1.5)
    with pytest.raises(ConfigError, match="tokenizer"):
        SummarizeContext(ContextConfig(mode="summarize"), None, PROMPT, [])
    s = SummarizeConfig(max_summaries=2, max_calls=10, eval_max_summaries=8)
    assert (s.for_eval().max_summaries, s.for_eval().max_calls) == (8, 10)
    assert ContextConfig(mode="summarize", summarize=s).max_calls == 10
    assert ContextConfig(mode="full").max_calls is None


async def _reader_rollout(tok, w=2048, s=30, h=200, seed=1):
    env = agentgym.make("agentgym/LogSearch-v0", **ENV_KWARGS)
    await env.reset(seed=seed)
    plan = env.reader_plan()
    context = ContextConfig(mode="summarize", summarize=SummarizeConfig(
        working_tokens=w, max_summaries=s, max_calls=h))
    agent = LMAgent(PlanPolicy(tok, lambda _: plan), context)
    return await run_episode(env, agent, seed=seed, group_id="g"), plan


async def test_rollout_records_summary_turns_token_exactly(smollm2_tokenizer):
    tok = smollm2_tokenizer
    traj, plan = await _reader_rollout(tok)
    summaries = [s for s in traj.steps if s.summary]
    assert traj.status == "terminated" and traj.outcome_reward == 1.0
    assert len(summaries) >= 3 and traj.metrics["summaries"] == len(summaries)
    # Every action of the plan reached the env; each dropped turn was played again.
    env_steps = [s for s in traj.steps if not s.summary]
    assert len(env_steps) == len(plan) + len(summaries)
    for step in summaries:
        before, dropped = traj.steps[step.index - 2], traj.steps[step.index - 1]
        assert step.state_key is None and step.valid and step.result.reward is None
        assert step.result.info["dropped_step"] == dropped.index
        text = tok.decode(step.tokens.prompt_ids)
        assert text.endswith(SUMMARY_INSTRUCTION + "<|im_end|>\n<|im_start|>assistant\n")
        # The dropped action is not in the summary prompt; the turn before it is, verbatim.
        assert dropped.action.content not in text
        p, c = len(before.tokens.prompt_ids), before.tokens.completion_ids
        assert step.tokens.prompt_ids[p:p + len(c)] == c
        # Summaries come as soon as the context reaches L, so the dropped turn started below it.
        assert len(dropped.tokens.prompt_ids) < 0.95 * 2048
        # The next working context: the task prompt + the continuation with the summary.
        after = traj.steps[step.index + 1]
        assert tok.decode(after.tokens.prompt_ids) == render_prompt(
            tok, [*traj.prompt, *step.result.observation], traj.tools)
    assert max(len(s.tokens.prompt_ids) for s in traj.steps) < 2048
    back = Trajectory.from_json(traj.to_json())
    assert back == traj and [s.summary for s in back.steps] == [s.summary for s in traj.steps]


async def test_rollout_stops_at_h_and_at_s_as_overlong(smollm2_tokenizer):
    tok = smollm2_tokenizer
    traj, _ = await _reader_rollout(tok, h=7)
    assert len(traj.steps) == 7 and traj.status == "truncated"
    assert traj.metrics["stopped_by_max_calls"] == 1.0 and traj.metrics["overlong"] == 1.0
    traj, _ = await _reader_rollout(tok, s=2)
    assert sum(s.summary for s in traj.steps) == 2 and traj.status == "truncated"
    assert traj.metrics["stopped_by_max_summaries"] == 1.0 and traj.metrics["overlong"] == 1.0
    # Evaluation may raise S: the same task then finishes.
    s = SummarizeConfig(max_summaries=2, eval_max_summaries=30).for_eval().max_summaries
    traj, _ = await _reader_rollout(tok, s=s)
    assert traj.status == "terminated"


async def test_full_context_on_the_same_task_overflows_the_window(smollm2_tokenizer):
    """Without summaries, the prompt grows far past W (why the env needs SUPO)."""
    tok = smollm2_tokenizer
    env = agentgym.make("agentgym/LogSearch-v0", **ENV_KWARGS)
    await env.reset(seed=1)
    plan = env.reader_plan()
    agent = LMAgent(PlanPolicy(tok, lambda _: plan), ContextConfig(max_prompt_tokens=100_000))
    traj = await run_episode(env, agent, seed=1, group_id="g")
    assert traj.outcome_reward == 1.0
    assert len(traj.steps[-1].tokens.prompt_ids) > 5 * 2048


def test_paper_placement_appends_the_summary_to_the_task_prompt(smollm2_tokenizer):
    tok = smollm2_tokenizer
    config = ContextConfig(mode="summarize", summarize=SummarizeConfig(
        working_tokens=50, placement="prompt"))
    ctx = SummarizeContext(config, tok, PROMPT, [])
    ctx.request(SamplingParams())
    ctx.record(completion(tok, "read page one"), [Message("user", "x " * 60)])
    ctx.summary_request(SamplingParams())
    carrier, valid = ctx.record_summary(completion(tok, "<summary>page one: no code</summary>"))
    nxt = ctx.request(SamplingParams())
    # One user message holds the original task, then the continuation text and the summary.
    task = "Find the code.\n\n" + CONTINUATION_PROMPT + "page one: no code"
    assert valid and carrier == Message("user", task)
    assert [(m.role, m.content) for m in nxt.messages] == [
        ("system", "You trace requests."), ("user", task)]
    rendered = tok.decode(nxt.prompt_ids)
    assert rendered == render_prompt(tok, nxt.messages)
    assert rendered.count("<|im_start|>user") == 1 and rendered.rstrip().endswith(
        "page one: no code<|im_end|>\n<|im_start|>assistant")
    # The default keeps the summary in a user turn of its own.
    ctx = context(tok, w=50)
    ctx.request(SamplingParams())
    ctx.record(completion(tok, "read page one"), [Message("user", "x " * 60)])
    ctx.summary_request(SamplingParams())
    ctx.record_summary(completion(tok, "<summary>page one: no code</summary>"))
    assert tok.decode(ctx.request(SamplingParams()).prompt_ids).count("<|im_start|>user") == 2
    with pytest.raises(ConfigError, match="summarize.placement must be"):
        SummarizeConfig(placement="append")
