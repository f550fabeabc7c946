"""Working-context size with SUPO's ``summarize`` context vs the ``full`` history on LogSearch.

Scripted part: a token-level scripted policy (``PlanPolicy``, SmolLM2's tokenizer, no model)
plays each task's page-by-page reading plan (the long way) or the five-call grep path, with
the full history and with ``summarize`` (W = 2048 by default). Model part (``--smollm2 N``):
SmolLM2-135M-Instruct itself, sampled on N tasks with both contexts.

Figures per episode: policy calls, summaries, working-context tokens per call (mean and max
prompt length), total tokens processed (Σ prompt + completion over calls) and success.

    python benchmarks/supo_context.py --tasks 16 --smollm2 2
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence

from results import write_section

import agentgym
from agentgym.context import ContextConfig, SummarizeConfig
from agentgym.envs.logsearch.scripted import PlanPolicy
from agentgym.policies.base import SamplingParams
from agentgym.rollout import LMAgent, RolloutConfig, run_groups
from agentgym.types import Message, Trajectory

ENV = "agentgym/LogSearch-v0"


async def plans(seeds: Sequence[int], kwargs: dict) -> tuple[dict[str, list[Message]],
                                                             dict[str, list[Message]]]:
    """Task prompt -> reader plan, and -> expert (grep) plan."""
    reader, expert = {}, {}
    for seed in seeds:
        env = agentgym.make(ENV, **kwargs)
        obs, _ = await env.reset(seed=seed)
        reader[obs[0].content] = env.reader_plan()
        actions = []
        while True:
            actions.append(env.expert_action())
            if (await env.step(actions[-1])).done:
                break
        expert[obs[0].content] = actions
    return reader, expert


def row(name: str, trajs: list[Trajectory]) -> str:
    """One table row of per-episode figures."""
    ok = [t for t in trajs if t.scorable]
    calls = [s for t in ok for s in t.steps]
    prompts = [len(s.tokens.prompt_ids) for s in calls if s.tokens]
    total = [sum(len(s.tokens.prompt_ids) + len(s.tokens.completion_ids)
                 for s in t.steps if s.tokens) for t in ok]
    n = max(len(ok), 1)
    success = sum((t.outcome_reward or 0) > 0 for t in ok) / n
    return (f"| {name} | {len(calls) / n:.1f} | {sum(s.summary for s in calls) / n:.1f} | "
            f"{statistics.mean(prompts):,.0f} | {max(prompts):,} | "
            f"{statistics.mean(total):,.0f} | {success:.0%} | {len(trajs) - len(ok)} |")


async def run(policy, contexts: dict[str, ContextConfig], seeds: Sequence[int], kwargs: dict,
              sampling: SamplingParams, max_steps: int = 400) -> list[str]:
    """Rows for each context, same tasks (``max_steps`` caps the full history's calls)."""
    rows = []
    for name, context in contexts.items():
        start = time.perf_counter()
        trajs = await run_groups(lambda: agentgym.make(ENV, **kwargs),
                                 LMAgent(policy, context, sampling), list(seeds),
                                 RolloutConfig(group_size=1, concurrency=8, max_steps=max_steps,
                                               step_timeout=None, episode_timeout=None))
        rows.append(row(name, trajs))
        print(rows[-1], f"({time.perf_counter() - start:.1f} s)")
    return rows


HEAD = ("| policy, context | calls / episode | summaries / episode | context tokens / call "
        "(mean) | max prompt tokens | total tokens / episode | success | errors |\n"
        "|---|---|---|---|---|---|---|---|")


async def main(args: argparse.Namespace) -> None:
    """Run both parts and write the section."""
    # The env's own turn limit (80) would cut the long reading episodes short: lift it.
    kwargs = {"split": "test", "lines_per_file": args.lines, "max_turns": 1000}
    seeds = list(range(args.tasks))
    reader, expert = await plans(seeds, kwargs)
    summarize = ContextConfig(mode="summarize", max_prompt_tokens=100_000,
                              summarize=SummarizeConfig(working_tokens=args.window,
                                                        max_summaries=200, max_calls=400))
    full = ContextConfig(mode="full", max_prompt_tokens=100_000)
    from agentgym.policies.hf import TransformersPolicy

    model = TransformersPolicy.load("smollm2")
    rows = []
    for name, plan in [("reader", reader), ("grep expert", expert)]:
        scripted = PlanPolicy(model.tokenizer, lambda prompt, plan=plan: plan[prompt])
        rows += await run(scripted, {f"scripted {name}, full": full,
                                     f"scripted {name}, summarize": summarize},
                          seeds, kwargs, SamplingParams())
    if args.smollm2:
        h = {"max_calls": args.max_calls, "max_summaries": args.max_calls}
        contexts = {
            "SmolLM2, full": ContextConfig(mode="full", max_prompt_tokens=8192),
            "SmolLM2, summarize": ContextConfig(mode="summarize", max_prompt_tokens=8192,
                                                summarize=SummarizeConfig(
                                                    working_tokens=args.model_window, **h,
                                                    summary_max_tokens=192)),
        }
        sampling = SamplingParams(temperature=1.0, max_tokens=96, seed=0)
        rows += await run(model, contexts, seeds[:args.smollm2], kwargs, sampling,
                          max_steps=args.max_calls)
    await model.aclose()
    body = f"""Command: `python benchmarks/supo_context.py --tasks {args.tasks} --smollm2 \
{args.smollm2} --window {args.window} --lines {args.lines}` (LogSearch test split,
`lines_per_file={args.lines}`, one episode per task). W = {args.window} tokens, summaries at
0.95·W. Scripted rows: `PlanPolicy` (SmolLM2's tokenizer, no model) plays the page-by-page
reading plan or the five-call grep path; with `summarize` it writes short summaries and
repeats the turn each summary dropped (S and H unbounded here, so every episode finishes).
SmolLM2 rows ({args.smollm2} tasks): SmolLM2-135M-Instruct sampled at temperature 1, 96
tokens per action, W = {args.model_window}, at most {args.max_calls} policy calls (the
full-history run is capped at the same number of steps).
"Context tokens / call" is the prompt length of a policy call, the working context the model
attends to; "total tokens" sums prompt + completion tokens over the episode's calls (what a
backend without prefix caching processes). Figures taken on a shared 2-core CPU machine
(timings are not reported; token counts do not depend on the machine).

{HEAD}
{chr(10).join(rows)}
"""
    write_section("SUPO working context (LogSearch)", body)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=16, help="tasks for the scripted part")
    parser.add_argument("--smollm2", type=int, default=2, help="tasks for SmolLM2 (0 = skip)")
    parser.add_argument("--window", type=int, default=2048, help="W in tokens")
    parser.add_argument("--lines", type=int, default=200, help="lines per log file")
    parser.add_argument("--max-calls", type=int, default=8, help="H for the SmolLM2 part")
    parser.add_argument("--model-window", type=int, default=1024, help="W for SmolLM2")
    asyncio.run(main(parser.parse_args()))
