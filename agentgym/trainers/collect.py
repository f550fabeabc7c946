"""Collecting a training step's (or a held-out evaluation's) rollouts from a run's config.

Every collector (:mod:`agentgym.trainers.collectors`) collects through :func:`collect`; they
differ only in the ``runner`` (the embedded :func:`agentgym.rollout.run_groups`, or a
collector's versioned / Ray / APRIL one) and the
policy whose weights sample. A run with several envs (``envs``) collects each env's share
of the tasks with that env's own settings (:mod:`agentgym.trainers.mixture`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

import agentgym
from agentgym.context import ContextConfig
from agentgym.policies.base import Policy, SamplingParams
from agentgym.rollout import LMAgent, RolloutConfig, run_groups
from agentgym.trainers.config import EnvMixEntry, TrainConfig
from agentgym.trainers.heldout import task_outcomes
from agentgym.trainers.metrics import succeeded
from agentgym.trainers.mixture import entry_rollout, label_trajectories, split_seeds
from agentgym.types import Trajectory

Runner = Callable[..., Awaitable[list[Trajectory]]]
"""``run_groups(make_env, agent, seeds, config, *, env_id=...)`` or a collector's equivalent."""


async def collect(config: TrainConfig, policy: Policy, seeds: Sequence[int], group_size: int,
                  temperature: float, seed: int, *, evaluation: bool = False,
                  runner: Runner | None = None, max_turns: int | None = None
                  ) -> list[Trajectory]:
    """``group_size`` rollouts of each seed's task with ``policy``.

    Args:
        config: The run's config (env, context, sampling, concurrency).
        policy: The generation backend to sample from.
        seeds: Task seeds, one group each.
        group_size: Rollouts per task.
        temperature: Sampling temperature (0 = greedy).
        seed: Sampling seed of this collection.
        evaluation: Held-out evaluation: ``env.eval_kwargs`` apply, and SUPO's evaluation
            summary budget.
        runner: How episodes run (default: :func:`agentgym.rollout.run_groups` here).
        max_turns: The horizon schedule's turn cap of this step (None: the env's own limit;
            ignored at evaluation).

    Returns:
        The trajectories, error ones included.
    """
    if config.envs:  # a weighted mix: ``seeds`` are the run's task indices
        parts = split_seeds(config.envs, list(seeds))
        done = await asyncio.gather(*(
            collect(_one_env(config, entry), policy, env_seeds, group_size, temperature, seed,
                    evaluation=evaluation, runner=runner, max_turns=max_turns)
            for entry, env_seeds in parts if env_seeds))
        mine = [entry for entry, env_seeds in parts if env_seeds]
        return [t for entry, trajs in zip(mine, done, strict=True)
                for t in label_trajectories(entry, trajs)]
    env_kwargs: dict[str, Any] = {**config.env.kwargs,
                                  **(config.env.eval_kwargs if evaluation else {})}
    if config.env.max_turns is not None:
        env_kwargs["max_turns"] = config.env.max_turns
    r = config.rollout
    # the engine's step cap: the horizon schedule's in training, else rollout.max_steps
    cap = r.max_steps if max_turns is None or evaluation else max_turns
    rollout = RolloutConfig(group_size=group_size, concurrency=r.concurrency,
                            step_timeout=r.step_timeout, max_steps=cap)
    env_id = config.env.id
    agent = make_agent(config, policy, temperature=temperature, seed=seed,
                       evaluation=evaluation)
    return await (runner or run_groups)(lambda: agentgym.make(env_id, **env_kwargs), agent,
                                        list(seeds), rollout, env_id=env_id)


def make_agent(config: TrainConfig, policy: Policy, *, temperature: float, seed: int,
               evaluation: bool = False, max_tokens: int | None = None) -> LMAgent:
    """The agent a run plays every episode with: training, held-out and suite evaluation.

    One recipe, so that what the trainer evaluates is what it trains: the run's context
    (window K, SUPO's summaries at their evaluation budget when ``evaluation``), tool-call
    format, nucleus and token limits.

    Args:
        config: The run's config (reads ``rollout``).
        policy: The generation backend to sample from.
        temperature: Sampling temperature (0 = greedy).
        seed: Sampling seed.
        evaluation: Evaluation episodes: SUPO's evaluation summary budget.
        max_tokens: Completion tokens per call (default: ``rollout.max_tokens``).
    """
    r = config.rollout
    summarize = r.summarize.for_eval() if evaluation else r.summarize
    context = ContextConfig(mode=r.context, history_length=r.history_length,
                            max_prompt_tokens=r.max_prompt_tokens, summarize=summarize)
    sampling = SamplingParams(temperature=temperature, top_p=r.top_p,
                              max_tokens=max_tokens or r.max_tokens, seed=seed)
    return LMAgent(policy, context, sampling, r.tool_format)


def _one_env(config: TrainConfig, entry: EnvMixEntry) -> TrainConfig:
    """The run's config as if ``entry`` were its only env."""
    return replace(config, env=entry, envs=(), rollout=entry_rollout(entry, config.rollout))


async def evaluate_mix(config: TrainConfig, policy: Policy, runner: Runner | None = None
                       ) -> tuple[dict[str, float], dict[str, float]]:
    """Held-out evaluation of every env of a mix that has ``eval_seeds``.

    Each env at its own ``eval_temperature`` (0 = greedy) and ``eval_draws``.

    Returns:
        ``(metrics, outcomes)``. Metrics: ``env/<label>/eval/success_rate`` and
        ``.../reward_mean`` per env (rewards before ``reward_scale``), and
        ``eval/success_rate``/``eval/reward_mean`` over all of them. Outcomes: each task's
        success (:func:`agentgym.trainers.heldout.task_outcomes`) keyed ``<label>:<seed>``,
        so that tasks of two envs never pair with each other.
    """
    entries = [e for e in config.envs if e.eval_seeds]
    done = await asyncio.gather(*(
        collect(_one_env(config, e), policy,
                range(e.eval_first_seed, e.eval_first_seed + e.eval_seeds), e.eval_draws,
                e.eval_temperature, seed=0,
                evaluation=True, runner=runner) for e in entries))
    out: dict[str, float] = {}
    outcomes: dict[str, float] = {}
    every: list[Trajectory] = []
    for entry, trajs in zip(entries, done, strict=True):
        ok = [t for t in trajs if t.scorable]
        every += ok
        out.update(_held_out(ok, f"env/{entry.label}/eval"))
        outcomes.update(task_outcomes(ok, prefix=f"{entry.label}:"))
    return ({**out, **_held_out(every, "eval")} if entries else out), outcomes


def _held_out(trajs: Sequence[Trajectory], prefix: str) -> dict[str, float]:
    n = max(len(trajs), 1)
    return {f"{prefix}/success_rate": sum(map(succeeded, trajs)) / n,
            f"{prefix}/reward_mean": sum(t.outcome_reward or 0.0 for t in trajs) / n}
