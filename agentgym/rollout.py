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
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeVar, runtime_checkable

from agentgym.context import (
    Context,
    ContextConfig,
    ContextLimitExceeded,
    SummarizeContext,
    SummaryLimitReached,
    make_context,
)
from agentgym.env import Env
from agentgym.errors import ConfigError
from agentgym.parsing import detect_tool_format, formats_for, parse_tool_calls
from agentgym.policies.base import Completion, Policy, SamplingParams
from agentgym.policies.constrained import check_hermes
from agentgym.types import Message, Step, StepResult, StepTokens, Trajectory

logger = logging.getLogger(__name__)


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


@runtime_checkable
class SummarizingEpisode(AgentEpisode, Protocol):
    """An episode that can write SUPO summary turns (:class:`LMAgent`'s episodes).

    The engine asks for one after every env step that does not end the episode.
    """

    async def summarize(self) -> SummaryTurn | None:
        """A summary turn when the working context is full, else None.

        Raises:
            SummaryLimitReached: The context is full and S summaries were made already.
            ContextLimitExceeded: The summary prompt itself does not fit.
        """
        ...


class Agent(Protocol):
    """Starts episodes."""

    def start(self, prompt: Sequence[Message], env: Env) -> AgentEpisode:
        """Begin an episode whose reset returned ``prompt``."""
        ...


@runtime_checkable
class NumberedAgent(Agent, Protocol):
    """An agent whose episodes sample with seeds that follow from their number.

    The engine reserves an episode's number before its env resets, in the order it takes
    the episodes, so a seeded rollout samples the same however long each reset takes (a
    sandbox may start in 0.5 s or 5 s); numbering at ``start``, after the reset, would hand
    the seeds out in the order the envs came up.
    """

    def reserve_episode(self) -> int | None:
        """The next episode's number (None: this agent does not number its episodes)."""
        ...

    def start(self, prompt: Sequence[Message], env: Env, number: int | None = None
              ) -> AgentEpisode:
        """Begin an episode; ``number`` is the one reserved for it (None: the next)."""
        ...


@runtime_checkable
class ContextAgent(Agent, Protocol):
    """An agent whose prompts a :class:`~agentgym.context.ContextConfig` builds.

    The engine enforces the config's H (``max_calls``, SUPO) and records its K (``window``,
    read by HGPO) in the trajectory metrics; agents without a context (random, scripted)
    have neither.
    """

    @property
    def context(self) -> ContextConfig:
        """How this agent's prompts are built."""
        ...


@dataclass(frozen=True)
class RolloutConfig:
    """How episodes are run."""

    group_size: int = 1
    """Rollouts per task (same seed), forming one group."""
    concurrency: int = 64
    """Episodes in flight at once."""
    max_steps: int | None = None
    """Cap on steps per episode (the episode is truncated). None: the env's own turn limit
    (its ``max_turns``: the registry's ``MaxTurns``, or a limit the env declares, such as a
    BabyAI level's ``max_steps``), else :data:`SAFETY_MAX_STEPS` for an env without one. An
    int caps every env at that (training's horizon, for one)."""
    step_timeout: float | None = 300.0
    """Seconds one policy call or one env step may take before the episode is an error."""
    reset_timeout: float | None = None
    """Seconds ``env.reset()`` may take before the episode is an error. None: only the
    episode's own limit bounds it, so a start that is merely slow (many engines, browsers
    or containers starting at once on a busy machine) is not an error; a start that fails
    still ends the episode at once, as the env's own fault."""
    episode_timeout: float | None = 1800.0
    """Seconds an episode may take before it is ended as an error."""
    close_timeout: float = 30.0
    """Seconds ``env.aclose()`` may take; a close that fails or hangs is logged and counted
    in the trajectory's ``metrics["close_failed"]``, never propagated."""

    def __post_init__(self) -> None:
        for name in ("group_size", "concurrency", "max_steps"):
            value = getattr(self, name)
            if name == "max_steps" and value is None:
                continue
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not self.close_timeout > 0:
            raise ValueError(f"close_timeout must be > 0 seconds, got {self.close_timeout!r}")


SAFETY_MAX_STEPS = 100
"""The step cap for an env that declares no turn limit (see ``RolloutConfig.max_steps``)."""


def step_cap(env: Env, config: RolloutConfig) -> int:
    """The most steps an episode of ``env`` may take under ``config``."""
    if config.max_steps is not None:
        return config.max_steps
    limit = getattr(env, "max_turns", None)
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        return limit
    return SAFETY_MAX_STEPS


class StepTimeoutError(TimeoutError):
    """A policy call or an env step ran past the step timeout (or a reset its own limit)."""


T = TypeVar("T")


async def _within(seconds: float | None, what: str, awaitable: Awaitable[T],
                  limit_name: str = "step timeout") -> T:
    """Await ``awaitable`` under ``seconds`` (the step timeout), naming what ran past it.

    A ``TimeoutError`` raised by the awaited call itself (a backend's own HTTP timeout) is
    passed on unchanged, so the trajectory's error blames the right limit.
    """
    limit = asyncio.timeout(seconds)  # asyncio.timeout(None) means no limit
    try:
        async with limit:
            return await awaitable
    except TimeoutError:
        if limit.expired():
            raise StepTimeoutError(f"{what} ran past the {limit_name} ({seconds} s)") from None
        raise


@dataclass
class LMAgent:
    """A policy behind a context manager.

    Attributes:
        policy: The generation backend.
        context: How prompts are built (``full`` or ``window``).
        sampling: Sampling parameters for every call.
        tool_format: The model's tool-call syntax (a name of
            :data:`agentgym.parsing.FORMATS`), ``auto`` to read it from the tokenizer's chat
            template, or None. When it names one, calls in that syntax are parsed here and
            reach the env as structured calls (the prompt history keeps the text as sampled);
            a reply that does not parse cleanly goes to the env as text, whose parser turns
            its errors into observations.
    """

    policy: Policy
    context: ContextConfig = field(default_factory=ContextConfig)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    tool_format: str | None = "auto"
    episodes_started: int = field(default=0, init=False, repr=False)
    """Episodes numbered so far; episode n samples with seeds that follow from
    ``sampling.seed`` and n (an engine that runs episodes elsewhere sets it to keep the
    numbering). The engine numbers episodes in the order it takes them, before their envs
    reset (:class:`NumberedAgent`)."""

    def __post_init__(self) -> None:
        if self.tool_format not in (None, "auto"):
            try:
                formats_for(self.tool_format)
            except ValueError as exc:  # a config mistake: say which setting and the choices
                raise ConfigError(f"tool_format: {exc}") from None
        if self.sampling.constrain_tool_calls:
            if not getattr(self.policy, "constrains_tool_calls", False):
                raise ConfigError(f"constrain_tool_calls needs a backend that samples from a "
                                  f"grammar (vllm:PATH); {type(self.policy).__name__} cannot")
            check_hermes(getattr(self.policy, "tokenizer", None))

    @property
    def parse_formats(self) -> tuple[str, ...] | None:
        """The model's format alone (other syntax stays the env's to read), or None."""
        fmt = self.tool_format
        if fmt == "auto":
            fmt = detect_tool_format(getattr(self.policy, "tokenizer", None))
        return None if fmt is None else (fmt,)

    def reserve_episode(self) -> int:
        """The next episode's number, which seeds its sampling."""
        self.episodes_started += 1
        return self.episodes_started

    def start(self, prompt: Sequence[Message], env: Env, number: int | None = None
              ) -> _LMEpisode:
        """A new episode with its own context (and its own sampling seeds, when seeded).

        ``number``: the one :meth:`reserve_episode` gave it; None takes the next.
        """
        number = self.reserve_episode() if number is None else number
        formats = self.parse_formats if env.tools else None
        return _LMEpisode(self, make_context(self.context, getattr(self.policy, "tokenizer", None),
                                             prompt, env.tools), number, formats)


class _LMEpisode:
    def __init__(self, agent: LMAgent, context: Context, number: int,
                 formats: tuple[str, ...] | None = None) -> None:
        self.agent, self.context, self.number, self.formats = agent, context, number, formats
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
        message = self.last.message()
        if self.formats is not None and not message.tool_calls:
            parsed = parse_tool_calls(message.content, self.formats)
            if parsed.calls and not parsed.errors:
                message = replace(message, tool_calls=parsed.calls)
        return message, tokens

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
                      env_id: str | None = None,
                      pause: Callable[[], Awaitable[None]] | None = None) -> Trajectory:
    """Play one episode; env and policy faults give an error trajectory, never an exception.

    Args:
        env: The env (reset here, not closed).
        agent: The agent.
        seed: Seed for ``reset``.
        group_id: Recorded in the trajectory.
        config: Step cap and timeouts.
        env_id: Recorded in the trajectory.
        pause: Awaited before every policy call, outside the step timeout; the episode
            deadline is pushed back by the time it waits (partial rollouts park episodes
            there between rounds: :mod:`agentgym.engines.april`).
    """
    start = time.perf_counter()
    traj_id, task_id = uuid.uuid4().hex, f"seed-{seed}"
    prompt: tuple[Message, ...] = ()
    steps: list[Step] = []
    status, metrics = "truncated", dict[str, float]()
    episode_limit = asyncio.timeout(config.episode_timeout)
    step_s = config.step_timeout
    context = agent.context if isinstance(agent, ContextAgent) else None
    # numbered before the reset, which may take any time: the engine's order, not the envs'
    numbered = agent if isinstance(agent, NumberedAgent) else None
    number = numbered.reserve_episode() if numbered is not None else None
    try:
        async with episode_limit:
            observation, info = await _within(config.reset_timeout, "env.reset()",
                                              env.reset(seed=seed), "reset timeout")
            task_id = str(info.get("task_id", task_id))
            prompt = tuple(observation)
            episode = (agent.start(prompt, env) if numbered is None or number is None
                       else numbered.start(prompt, env, number))
            key = info.get("state_key")
            # H (SUPO): a cap on policy calls (= steps, summaries included); None outside
            # summarize mode.
            max_calls = context.max_calls if context is not None else None
            for _ in range(step_cap(env, config)):
                if max_calls is not None and len(steps) >= max_calls:
                    metrics.update(overlong=1.0, stopped_by_max_calls=1.0)
                    break
                if pause is not None:
                    await _paused(pause, episode_limit)
                try:
                    action, tokens = await _within(step_s, "the policy call", episode.act())
                except ContextLimitExceeded as exc:
                    metrics.update(truncated_by_context=1.0, context_tokens=float(exc.tokens))
                    break
                result = await _within(step_s, "env.step()", env.step(action))
                steps.append(Step(len(steps), action, result, tokens, key, result.valid))
                key = result.info.get("state_key")
                if result.done:
                    status = "terminated" if result.terminated else "truncated"
                    break
                episode.observe(result.observation)
                if max_calls is not None and len(steps) < max_calls:
                    turn, stop = await _within(step_s, "the summary call",
                                               _summarize(episode, len(steps)))
                    steps += turn
                    if stop:
                        metrics.update(stop)
                        break
            if max_calls is not None:
                metrics["summaries"] = float(sum(s.summary for s in steps))
    except Exception as exc:  # an infrastructure fault: counted, never scored
        if isinstance(exc, TimeoutError) and episode_limit.expired():
            exc = TimeoutError(f"the episode ran past its timeout ({config.episode_timeout} s)")
        return Trajectory(traj_id, task_id, group_id, prompt, tuple(steps), status="error",
                          error=f"{type(exc).__name__}: {exc}", env_id=env_id, seed=seed,
                          tools=tuple(env.tools), metrics={"wall_s": time.perf_counter() - start})
    metrics["wall_s"] = time.perf_counter() - start
    if context is not None and context.window is not None:  # HGPO reads the K of the prompts
        metrics["history_length"] = float(context.window)
    return Trajectory(traj_id, task_id, group_id, prompt, tuple(steps), status=status,
                      env_id=env_id, seed=seed, tools=tuple(env.tools),
                      metrics=metrics).with_outcome()


async def _paused(pause: Callable[[], Awaitable[None]], limit: asyncio.Timeout) -> None:
    """Await ``pause``; time spent parked does not count against the episode timeout."""
    loop = asyncio.get_running_loop()
    start, deadline = loop.time(), limit.when()
    await pause()
    if deadline is not None:
        limit.reschedule(deadline + loop.time() - start)


async def _summarize(episode: AgentEpisode, index: int) -> tuple[list[Step], dict[str, float]]:
    """The episode's summary turn as a step (SUPO), if one is due.

    Returns:
        The summary step (or none), and the metrics that stop the episode when the context
        is full and no summary is left (empty otherwise).
    """
    if not isinstance(episode, SummarizingEpisode):
        return [], {}
    try:
        turn = await episode.summarize()
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


async def close_env(env: Env, seconds: float) -> str | None:
    """Close ``env`` within ``seconds``; the failure as text, or None when it closed.

    A close that raises or hangs must not lose the episodes that already finished, nor hold
    up the batch: it is cancelled after ``seconds`` (and left behind if it ignores that),
    logged, and reported to the caller to count.
    """
    task = asyncio.ensure_future(env.aclose())
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        task.cancel()
        await asyncio.wait({task}, timeout=1.0)  # a close that ignores the cancel is left
        failure = f"aclose() did not finish within {seconds:g} s"
    elif task.cancelled():
        failure = "aclose() was cancelled"
    elif task.exception() is not None:
        exc = task.exception()
        failure = f"aclose() raised {type(exc).__name__}: {exc}"
    else:
        return None
    logger.warning("closing %s failed: %s", type(env).__name__, failure)
    return failure


async def run_in_fresh_env(make_env: Callable[[], Env], agent: Agent, *, seed: int,
                           group_id: str, config: RolloutConfig = RolloutConfig(),
                           env_id: str | None = None,
                           pause: Callable[[], Awaitable[None]] | None = None) -> Trajectory:
    """One episode in a new env from ``make_env``, closed after it whatever happens.

    An env that cannot be built (e.g. a sandbox that could not start) gives an error
    trajectory; a close that fails or hangs is counted in ``metrics["close_failed"]``.
    ``pause`` is :func:`run_episode`'s.
    """
    try:
        env = make_env()
    except Exception as exc:  # e.g. a sandbox that could not start
        return Trajectory(uuid.uuid4().hex, f"seed-{seed}", group_id, (),
                          status="error", error=f"{type(exc).__name__}: {exc}",
                          env_id=env_id, seed=seed)
    try:
        traj = await run_episode(env, agent, seed=seed, group_id=group_id, config=config,
                                 env_id=env_id, pause=pause)
    finally:
        failure = await asyncio.shield(close_env(env, config.close_timeout))
    if failure is not None:
        traj = replace(traj, metrics={**traj.metrics, "close_failed": 1.0})
    return traj


async def run_groups(make_env: Callable[[], Env], agent: Agent, seeds: Iterable[int],
                     config: RolloutConfig = RolloutConfig(), *, env_id: str | None = None,
                     on_done: Callable[[Trajectory], None] | None = None) -> list[Trajectory]:
    """Run ``config.group_size`` episodes for each seed, each in a fresh env.

    Work is taken lazily from ``seeds`` by ``config.concurrency`` workers, so a long (or
    lazy, e.g. ``range``) seed list costs no memory up front. Each env is closed within
    ``config.close_timeout``; a close that fails or hangs is logged and counted in the
    trajectory's ``metrics["close_failed"]``, never raised over finished episodes.

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
    async def one(seed: int, group_id: str) -> Trajectory:
        traj = await run_in_fresh_env(make_env, agent, seed=seed, group_id=group_id,
                                      config=config, env_id=env_id)
        if on_done is not None:
            on_done(traj)
        return traj

    # One shared iterator: each (seed, rollout) is taken by exactly one worker.
    work = enumerate((seed, f"{env_id or 'env'}:{seed}") for seed in seeds
                     for _ in range(config.group_size))
    results: dict[int, Trajectory] = {}

    async def worker() -> None:
        for n, (seed, group_id) in work:
            results[n] = await one(seed, group_id)

    await asyncio.gather(*(worker() for _ in range(config.concurrency)))
    return [results[n] for n in range(len(results))]
