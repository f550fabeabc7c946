"""Every evaluation a run makes plays the agent it trains: one recipe (``collect.make_agent``).

Suite evaluation during training used to build its own agent and lost the run's context
(SUPO's summaries) and tool-call format on the way.
"""

import asyncio
from types import SimpleNamespace

from agentgym.trainers.checkpoint import TrainState
from agentgym.trainers.config import load_config


def test_suite_evaluation_plays_the_run_context_and_format(monkeypatch, tmp_path):
    from agentgym.evaluation import training
    from agentgym.trainers import loop

    cfg = load_config(None, [
        f"run_dir={tmp_path}", "eval.suite=arithmetic", "eval.tasks=1", "eval.max_tokens=24",
        "rollout.context=summarize", "rollout.summarize.working_tokens=700",
        "rollout.summarize.max_summaries=3", "rollout.summarize.eval_max_summaries=5",
        "rollout.tool_format=hermes", "rollout.max_prompt_tokens=3000"])
    seen = []

    async def run_suite(suite, agent, out_dir, **_):
        seen.append(agent)
        return []

    monkeypatch.setattr(training, "run_suite", run_suite)
    policy = object()  # the agent only holds it here: no episode runs
    run = SimpleNamespace(config=cfg, policy=policy, state=TrainState(0, 0),
                          collector=SimpleNamespace(runner=None))
    asyncio.run(loop.evaluate(run))  # no held-out seeds: the suite only
    [agent] = seen
    assert agent.policy is policy
    assert agent.context.mode == "summarize"
    assert agent.context.summarize == cfg.rollout.summarize.for_eval()  # SUPO's eval budget
    assert agent.context.summarize.max_summaries == 5
    assert agent.context.max_prompt_tokens == 3000
    assert agent.tool_format == "hermes"
    assert agent.sampling.temperature == 0.0 and agent.sampling.max_tokens == 24


def test_held_out_and_suite_evaluation_build_the_same_agent(tmp_path):
    from agentgym.trainers.collect import make_agent

    cfg = load_config(None, [f"run_dir={tmp_path}", "rollout.context=window",
                             "rollout.history_length=3", "rollout.max_tokens=40"])
    policy = object()
    train = make_agent(cfg, policy, temperature=1.0, seed=7)
    held_out = make_agent(cfg, policy, temperature=0.0, seed=0, evaluation=True)
    assert train.context == held_out.context and train.tool_format == held_out.tool_format
    assert (train.sampling.temperature, held_out.sampling.temperature) == (1.0, 0.0)
    assert train.sampling.max_tokens == held_out.sampling.max_tokens == 40
