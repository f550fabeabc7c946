"""The rollout engine: many episodes at once against an agent, recorded as trajectories.

An :class:`Agent` starts one :class:`AgentEpisode` per episode; the episode is asked to
``act`` (returning the assistant message and, for a model, its exact tokens) and told what
the env ``observe``-d back. :class:`LMAgent` puts a :class:`~agentgym.policies.base.Policy`
behind a context manager (:mod:`agentgym.context`); the model-free policies in
:mod:`agentgym.policies.simple` are agents too.

With a ``summarize`` context (SUPO), the engine also runs the summary turns the context asks
for after an env step: each is one policy call recorded as a ``Step(summary=True)`` that
never reaches the env, and the episode stops at H policy calls or when the window is full
after S summaries (``metrics["overlong"]``).

Episodes run as asyncio tasks under a concurrency bound; a model backend batches the
concurrent generate calls. Infrastructure faults (the env or the policy raising, a step or
episode timeout) end that episode as a ``status="error"`` trajectory and the others go on.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from agentgym.context import (
    Context,
    ContextConfig,
    ContextLimitExceeded,
    SummarizeContext,
    SummaryLimitReached,
    make_context,
)
from agentgym.env import Env
from agentgym.policies.base import Completion, Policy, SamplingParams
from agentgym.types import Message, Step, StepResult, StepTokens, Trajectory


class AgentEpisode(Protocol):
    """An agent playing one episode."""

    async def act(self) -> tuple[Message, StepTokens | None]:
        """The next action and, when a model produced it, its exact tokens."""
        ...

    def observe(self, observation: Sequence[Message]) -> None:
        """What the env answered to the last action."""
        ...


@dataclass(frozen=True)
class SummaryTurn:
    """A summary policy call (SUPO): recorded as a step, never sent to the env.

    Attributes:
        action: The summary the policy wrote.
        tokens: Its exact tokens.
        continuation: The user message that opens the next working context.
        valid: False when the summary turn called a tool (it is not run).
    """

    action: Message
    tokens: StepTokens | None
    continuation: Message
    valid: bool


class Agent(Protocol):
    """Starts episodes."""

    def start(self, prompt: Sequence[Message], env: Env) -> AgentEpisode:
        """Begin an episode whose reset returned ``prompt``."""
        ...


@dataclass(frozen=True)
class RolloutConfig:
    """How episodes are run."""

    group_size: int = 1
    """Rollouts per task (same seed), forming one group."""
    concurrency: int = 64
    """Episodes in flight at once."""
    max_steps: int = 100
    """Safety cap on steps for envs without a turn limit (the episode is truncated)."""
    step_timeout: float | None = 300.0
    """Seconds one policy call or one env step may take before the episode is an error."""
    episode_timeout: float | None = 1800.0
    """Seconds an episode may take before it is ended as an error."""

    def __post_init__(self) -> None:
        for name in ("group_size", "concurrency", "max_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")


@dataclass
class LMAgent:
    """A policy behind a context manager.

    Attributes:
        policy: The generation backend.
        context: How prompts are built (``full`` or ``window``).
        sampling: Sampling parameters for every call.
    """

    policy: Policy
    context: ContextConfig = field(default_factory=ContextConfig)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    _started: int = field(default=0, init=False, repr=False)

    def start(self, prompt: Sequence[Message], env: Env) -> _LMEpisode:
        """A new episode with its own context (and its own sampling seeds, when seeded)."""
        self._started += 1
        return _LMEpisode(self, make_context(self.context, getattr(self.policy, "tokenizer", None),
                                             prompt, env.tools), self._started)


class _LMEpisode:
    def __init__(self, agent: LMAgent, context: Context, number: int) -> None:
        self.agent, self.context, self.number = agent, context, number
        self.last: Completion | None = None
        self.calls = 0

    def _params(self) -> SamplingParams:
        # Rollouts of one group share a prompt: each call needs its own seed, or a seeded
        # run would sample the same completion G times. Episodes start in a fixed order.
        base = self.agent.sampling
        if base.seed is None:
            return base
        self.calls += 1
        seed = ((base.seed * 1_000_003 + self.number) * 4099 + self.calls) % (2**63 - 1)
        return replace(base, seed=seed)

    async def act(self) -> tuple[Message, StepTokens | None]:
        request = self.context.request(self._params())
        (self.last,) = await self.agent.policy.generate([request])
        tokens = self.last.tokens()
        if tokens is None and request.prompt_ids and self.last.completion_ids:
            tokens = StepTokens(request.prompt_ids, self.last.completion_ids, self.last.logprobs)
        return self.last.message(), tokens

    def observe(self, observation: Sequence[Message]) -> None:
        assert self.last is not None, "observe() before act()"
        self.context.record(self.last, observation)

    async def summarize(self) -> SummaryTurn | None:
        """A summary call when the working context is full (``summarize`` mode), else None.

        Raises:
            SummaryLimitReached: The context is full and S summaries were made already.
        """
        context = self.context
        if not isinstance(context, SummarizeContext) or not context.needs_summary():
            return None
        request = context.summary_request(self._params())
        (completion,) = await self.agent.policy.generate([request])
        tokens = completion.tokens()
        if tokens is None and request.prompt_ids and completion.completion_ids:
            tokens = StepTokens(request.prompt_ids, completion.completion_ids,
                                completion.logprobs)
        continuation, valid = context.record_summary(completion)
        return SummaryTurn(completion.message(), tokens, continuation, valid)


async def run_episode(env: Env, agent: Agent, *, seed: int | None, group_id: str,
                      config: RolloutConfig = RolloutConfig(),
                      env_id: str | None = None) -> Trajectory:
    """Play one episode; env and policy faults give an error trajectory, never an exception.

    Args:
        env: The env (reset here, not closed).
        agent: The agent.
        seed: Seed for ``reset``.
        group_id: Recorded in the trajectory.
        config: Step cap and timeouts.
        env_id: Recorded in the trajectory.
    """
    start = time.perf_counter()
    traj_id, task_id = uuid.uuid4().hex, f"seed-{seed}"
    prompt: tuple[Message, ...] = ()
    steps: list[Step] = []
    status, metrics = "truncated", dict[str, float]()
    step_limit = asyncio.timeout  # asyncio.timeout(None) means no limit
    try:
        async with asyncio.timeout(config.episode_timeout):
            async with step_limit(config.step_timeout):
                observation, info = await env.reset(seed=seed)
            task_id = str(info.get("task_id", task_id))
            prompt = tuple(observation)
            episode, key = agent.start(prompt, env), info.get("state_key")
            # H (SUPO): a cap on policy calls (= steps, summaries included); None outside
            # summarize mode.
            max_calls = getattr(getattr(agent, "context", None), "max_calls", None)
            for _ in range(config.max_steps):
                if max_calls is not None and len(steps) >= max_calls:
                    metrics.update(overlong=1.0, stopped_by_max_calls=1.0)
                    break
                try:
                    async with step_limit(config.step_timeout):
                        action, tokens = await episode.act()
                except ContextLimitExceeded as exc:
                    metrics.update(truncated_by_context=1.0, context_tokens=float(exc.tokens))
                    break
                async with step_limit(config.step_timeout):
                    result = await env.step(action)
                steps.append(Step(len(steps), action, result, tokens, key, result.valid))
                key = result.info.get("state_key")
                if result.done:
                    status = "terminated" if result.terminated else "truncated"
                    break
                episode.observe(result.observation)
                if max_calls is not None and len(steps) < max_calls:
                    async with step_limit(config.step_timeout):
                        turn, stop = await _summarize(episode, len(steps))
                    steps += turn
                    if stop:
                        metrics.update(stop)
                        break
            if max_calls is not None:
                metrics["summaries"] = float(sum(s.summary for s in steps))
    except Exception as exc:  # an infrastructure fault: counted, never scored
        if isinstance(exc, TimeoutError):
            exc = TimeoutError(f"a step or the episode ran past its timeout (step "
                               f"{config.step_timeout} s, episode {config.episode_timeout} s)")
        return Trajectory(traj_id, task_id, group_id, prompt, tuple(steps), status="error",
                          error=f"{type(exc).__name__}: {exc}", env_id=env_id, seed=seed,
                          tools=tuple(env.tools), metrics={"wall_s": time.perf_counter() - start})
    metrics["wall_s"] = time.perf_counter() - start
    window = getattr(getattr(agent, "context", None), "window", None)
    if window is not None:  # HGPO reads the K the prompts were built with
        metrics["history_length"] = float(window)
    return Trajectory(traj_id, task_id, group_id, prompt, tuple(steps), status=status,
                      env_id=env_id, seed=seed, tools=tuple(env.tools),
                      metrics=metrics).with_outcome()


async def _summarize(episode: AgentEpisode, index: int) -> tuple[list[Step], dict[str, float]]:
    """The episode's summary turn as a step (SUPO), if one is due.

    Returns:
        The summary step (or none), and the metrics that stop the episode when the context
        is full and no summary is left (empty otherwise).
    """
    summarize = getattr(episode, "summarize", None)
    try:
        turn = await summarize() if summarize is not None else None
    except (SummaryLimitReached, ContextLimitExceeded) as exc:
        reason = "stopped_by_max_summaries" if isinstance(exc, SummaryLimitReached) \
            else "truncated_by_context"
        return [], {"overlong": 1.0, reason: 1.0, "context_tokens": float(exc.tokens)}
    if turn is None:
        return [], {}
    # No env step: the env state is unchanged, and its key is left out (None) so that
    # state-keyed estimators never anchor a summary with the env actions of that state.
    result = StepResult((turn.continuation,), None,
                        info={"valid": turn.valid, "summary": True, "dropped_step": index - 1})
    return [Step(index, turn.action, result, turn.tokens, None, turn.valid, summary=True)], {}


async def run_groups(make_env: Callable[[], Env], agent: Agent, seeds: Sequence[int],
                     config: RolloutConfig = RolloutConfig(), *, env_id: str | None = None,
                     on_done: Callable[[Trajectory], None] | None = None) -> list[Trajectory]:
    """Run ``config.group_size`` episodes for each seed, each in a fresh env.

    Args:
        make_env: Builds one env per episode (closed after it, whatever happens).
        agent: The agent.
        seeds: One task per seed.
        config: Group size, concurrency, limits.
        env_id: Recorded in the trajectories.
        on_done: Called with each trajectory as it finishes (streaming, progress).

    Returns:
        The trajectories, ordered by seed then rollout index.
    """
    gate = asyncio.Semaphore(config.concurrency)

    async def one(seed: int, group_id: str) -> Trajectory:
        async with gate:
            try:
                env = make_env()
            except Exception as exc:  # e.g. a sandbox that could not start
                traj = Trajectory(uuid.uuid4().hex, f"seed-{seed}", group_id, (),
                                  status="error", error=f"{type(exc).__name__}: {exc}",
                                  env_id=env_id, seed=seed)
            else:
                try:
                    traj = await run_episode(env, agent, seed=seed, group_id=group_id,
                                             config=config, env_id=env_id)
                finally:
                    await env.aclose()
        if on_done is not None:
            on_done(traj)
        return traj

    jobs = [one(seed, f"{env_id or 'env'}:{seed}") for seed in seeds
            for _ in range(config.group_size)]
    return list(await asyncio.gather(*jobs))
