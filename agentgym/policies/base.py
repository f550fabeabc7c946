"""The policy contract: batched, async generation with exact tokens and log-probs.

A request carries the conversation (``messages`` + ``tools``) and, when the caller built the
prompt token-exactly, its ``prompt_ids``. Token-level backends (transformers, vLLM, an
OpenAI-compatible ``/v1/completions`` server) use ``prompt_ids`` when given and otherwise
render the messages with the tokenizer's chat template; chat-level backends send the
messages. A completion records what was sampled: the text, the exact prompt and completion
token ids and the behaviour log-prob of every sampled token, when the backend can tell.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from agentgym.errors import ConfigError
from agentgym.types import Message, StepTokens, ToolCall, ToolSpec

FinishReason = Literal["stop", "length", "error"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one completion."""

    temperature: float = 1.0
    """Softmax temperature; 0 means greedy."""
    top_p: float = 1.0
    """Nucleus sampling mass, in (0, 1]."""
    max_tokens: int = 256
    """Most tokens to generate."""
    stop: tuple[str, ...] = ()
    """Strings that end the completion (kept in the text, as the tokens were sampled)."""
    seed: int | None = None
    """Seed for this request's sampling, where the backend supports it."""
    top_logprobs: int = 0
    """Likeliest alternatives to report with each sampled token (:class:`SampledToken`), where
    the backend supports it; 0 = none."""
    constrain_tool_calls: bool = False
    """Sample every ``<tool_call>`` block from a grammar of the request's tools (an offered
    name, arguments valid under its schema; :mod:`agentgym.policies.constrained`); text
    outside the blocks stays free. Only backends that say so can (vLLM); for evaluation and
    data collection, not RL."""

    def __post_init__(self) -> None:
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ConfigError(f"temperature must be >= 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ConfigError(f"max_tokens must be a positive int, got {self.max_tokens!r}")
        if not isinstance(self.top_logprobs, int) or not 0 <= self.top_logprobs <= 20:
            raise ConfigError(f"top_logprobs must be an int in [0, 20], got "
                              f"{self.top_logprobs!r}")
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        elif not isinstance(self.stop, tuple):
            object.__setattr__(self, "stop", tuple(self.stop))


@dataclass(frozen=True)
class SampledToken:
    """One token as it is sampled (see :attr:`GenerationRequest.on_token`).

    Attributes:
        prompt_ids: The request's exact prompt tokens.
        token: The sampled id.
        logprob: Its behaviour log-prob.
        top: The ``SamplingParams.top_logprobs`` likeliest ``(id, log-prob)`` of the same
            distribution, likeliest first.
    """

    prompt_ids: tuple[int, ...]
    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt to complete.

    Attributes:
        messages: The conversation so far (used when ``prompt_ids`` is empty, and by chat
            backends).
        tools: Tools offered to the model.
        prompt_ids: The exact prompt tokens, when the caller built them.
        params: Sampling parameters.
        on_token: Told of each token as it is sampled (streaming), from the backend's own
            thread, by backends that can (the transformers backend); others ignore it. It
            must return at once and not raise.
    """

    messages: tuple[Message, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    prompt_ids: tuple[int, ...] = ()
    params: SamplingParams = field(default_factory=SamplingParams)
    on_token: Callable[[SampledToken], None] | None = field(default=None, compare=False,
                                                             repr=False)

    def __post_init__(self) -> None:
        for name in ("messages", "tools", "prompt_ids"):
            value = getattr(self, name)
            if not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        if not self.messages and not self.prompt_ids:
            raise ConfigError("a GenerationRequest needs messages or prompt_ids; both are empty")


@dataclass(frozen=True)
class Completion:
    """What a backend sampled for one request.

    Attributes:
        text: The completion text.
        prompt_ids: Exact prompt token ids (empty when the backend cannot tell).
        completion_ids: Exact sampled token ids (empty when the backend cannot tell).
        logprobs: Behaviour log-prob of each sampled token (empty when unknown).
        finish_reason: ``stop`` (EOS or a stop string), ``length`` (max_tokens) or ``error``.
        tool_calls: Calls the server parsed itself (chat backends); empty otherwise.
        policy_version: Version of the weights that sampled this, when the backend tracks it.
    """

    text: str
    prompt_ids: tuple[int, ...] = ()
    completion_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    finish_reason: FinishReason = "stop"
    tool_calls: tuple[ToolCall, ...] = ()
    policy_version: int | None = None

    def tokens(self) -> StepTokens | None:
        """The exact tokens as a :class:`StepTokens`, or None when they are not known."""
        if not self.completion_ids or not self.prompt_ids:
            return None
        return StepTokens(self.prompt_ids, self.completion_ids, self.logprobs)

    def message(self) -> Message:
        """The completion as the assistant message the env receives."""
        return Message("assistant", self.text, tool_calls=self.tool_calls)


@runtime_checkable
class Policy(Protocol):
    """A generation backend.

    Attributes:
        tokenizer: The Hugging Face tokenizer of the model, when this process has it
            (needed for token-exact prompts); None for chat-only servers.
    """

    tokenizer: Any

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Complete every request; the i-th completion answers the i-th request.

        A backend may batch concurrent calls together. It raises for infrastructure faults
        (server down, out of memory); the rollout engine turns those into error trajectories.
        """
        ...

    async def aclose(self) -> None:
        """Release the model, sessions and servers; idempotent."""
        ...


@runtime_checkable
class TrainablePolicy(Policy, Protocol):
    """A generation backend whose weights the trainer updates in place (RL training).

    Attributes:
        policy_version: Version of the weights it samples with; recorded in every
            :class:`Completion` and bumped by :meth:`update_weights`.
    """

    policy_version: int

    async def update_weights(self, named_tensors: Mapping[str, Any]
                             | Iterable[tuple[str, Any]], *, version: int | None = None) -> int:
        """Load new weights (named as in the model's ``state_dict``) and set the version.

        Args:
            named_tensors: ``{name: tensor}`` or ``(name, tensor)`` pairs; empty when the
                backend already shares the trained weights (then only the version moves).
            version: The new :attr:`policy_version` (default: the current one + 1).

        Returns:
            The new policy version.
        """
        ...
