"""Collecting a training step's (or a held-out evaluation's) rollouts from a run's config.

Every driver collects through :func:`collect`; they differ only in the ``runner`` (the
embedded :func:`agentgym.rollout.run_groups`, or a driver's versioned / Ray one) and the
policy whose weights sample.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import agentgym
from agentgym.context import ContextConfig
from agentgym.policies.base import Policy, SamplingParams
from agentgym.rollout import LMAgent, RolloutConfig, run_groups
from agentgym.trainers.config import TrainConfig
from agentgym.types import Trajectory

Runner = Callable[..., Awaitable[list[Trajectory]]]
"""``run_groups(make_env, agent, seeds, config, *, env_id=...)`` or a driver's equivalent."""


async def collect(config: TrainConfig, policy: Policy, seeds: Sequence[int], group_size: int,
                  temperature: float, seed: int, *, evaluation: bool = False,
                  runner: Runner | None = None) -> list[Trajectory]:
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

    Returns:
        The trajectories, error ones included.
    """
    env_kwargs: dict[str, Any] = {**config.env.kwargs,
                                  **(config.env.eval_kwargs if evaluation else {})}
    if config.env.max_turns is not None:
        env_kwargs["max_turns"] = config.env.max_turns
    r = config.rollout
    summarize = r.summarize.for_eval() if evaluation else r.summarize
    context = ContextConfig(mode=r.context, history_length=r.history_length,
                            max_prompt_tokens=r.max_prompt_tokens, summarize=summarize)
    sampling = SamplingParams(temperature=temperature, top_p=r.top_p, max_tokens=r.max_tokens,
                              seed=seed)
    rollout = RolloutConfig(group_size=group_size, concurrency=r.concurrency,
                            step_timeout=r.step_timeout)
    env_id = config.env.id
    return await (runner or run_groups)(lambda: agentgym.make(env_id, **env_kwargs),
                                        LMAgent(policy, context, sampling), list(seeds), rollout,
                                        env_id=env_id)
