"""Context managers: what the policy sees at each step of an episode.

- ``full``: the whole chat history. Token-exact: the next prompt is the previous prompt's
  ids + the ids the policy sampled + the tokens of what the chat template adds after them
  (end of turn, the observation, the next assistant header). Nothing the model generated is
  re-tokenized, so the ids a trajectory records are the ids the model produced. When the
  template re-renders the history differently (it strips or rewrites the assistant text),
  the prompt is rendered afresh and the event is counted in ``rerenders``.
- ``window``: verl-agent's memory window: the task prompt, then the last K (action,
  observation) turns; rendered afresh each step. K (``history_length``) is what HGPO reads.

Either way every step records the exact prompt ids the policy was given, so training on a
step never re-tokenizes. ``summarize`` (SUPO) plugs in here as another context.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from agentgym.errors import ConfigError
from agentgym.policies.base import Completion, GenerationRequest, SamplingParams
from agentgym.prompting import render_prompt
from agentgym.types import Message, ToolSpec


class ContextLimitExceeded(Exception):
    """The next prompt is longer than ``max_prompt_tokens``: the episode is truncated."""

    def __init__(self, tokens: int, limit: int) -> None:
        super().__init__(f"prompt has {tokens} tokens, over max_prompt_tokens={limit}")
        self.tokens, self.limit = tokens, limit


@dataclass(frozen=True)
class ContextConfig:
    """How each step's prompt is built."""

    mode: Literal["full", "window"] = "full"
    """``full`` chat history (token-exact continuation) or a ``window`` of recent turns."""
    history_length: int = 2
    """K: (action, observation) turns kept by ``window`` (HGPO reads the same K)."""
    max_prompt_tokens: int = 8192
    """A longer prompt ends the episode as truncated (when token ids are known)."""

    def __post_init__(self) -> None:
        if self.mode not in ("full", "window"):
            raise ConfigError(f"context mode must be 'full' or 'window', got {self.mode!r}")
        if not isinstance(self.history_length, int) or self.history_length < 0:
            raise ConfigError(f"history_length must be an int >= 0, got {self.history_length!r}")
        if self.max_prompt_tokens < 1:
            raise ConfigError(f"max_prompt_tokens must be >= 1, got {self.max_prompt_tokens!r}")

    @property
    def window(self) -> int | None:
        """K for estimators that need it; None for full history."""
        return self.history_length if self.mode == "window" else None


class Context(Protocol):
    """One episode's context."""

    def request(self, params: SamplingParams) -> GenerationRequest:
        """The next generation request."""
        ...

    def record(self, completion: Completion, observation: Sequence[Message]) -> None:
        """Add the policy's completion and the env's answer to it."""
        ...


class _Base:
    def __init__(self, config: ContextConfig, tokenizer: Any, prompt: Sequence[Message],
                 tools: Sequence[ToolSpec]) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.prompt = tuple(prompt)
        self.tools = tuple(tools)
        self.rerenders = 0

    def _encode(self, text: str) -> tuple[int, ...]:
        return tuple(self.tokenizer.encode(text, add_special_tokens=False))

    def _checked(self, messages: Sequence[Message], ids: tuple[int, ...],
                 params: SamplingParams) -> GenerationRequest:
        if ids and len(ids) > self.config.max_prompt_tokens:
            raise ContextLimitExceeded(len(ids), self.config.max_prompt_tokens)
        return GenerationRequest(tuple(messages), self.tools, ids, params)


class FullContext(_Base):
    """The whole history, continued token-exactly; see the module docstring."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.messages: list[Message] = list(self.prompt)
        self._ids: tuple[int, ...] | None = None
        self._text = ""

    def request(self, params: SamplingParams) -> GenerationRequest:
        """The whole history (and its token ids when the policy has a tokenizer)."""
        if self.tokenizer is not None and self._ids is None:
            self._text = render_prompt(self.tokenizer, self.messages, self.tools)
            self._ids = self._encode(self._text)
        return self._checked(self.messages, self._ids or (), params)

    def record(self, completion: Completion, observation: Sequence[Message]) -> None:
        """Append the completion ids as sampled, then the template's tokens for the rest."""
        self.messages += [completion.message(), *observation]
        if self.tokenizer is None:
            return
        full = render_prompt(self.tokenizer, self.messages, self.tools)
        if self._ids is not None and completion.completion_ids:
            sampled = self.tokenizer.decode(list(completion.completion_ids),
                                            skip_special_tokens=False)
            prefix = self._text + sampled
            if full.startswith(prefix):
                self._ids = (*self._ids, *completion.completion_ids,
                             *self._encode(full[len(prefix):]))
                self._text = full
                return
        self.rerenders += 1
        self._ids, self._text = self._encode(full), full


class WindowContext(_Base):
    """The task prompt plus the last K (action, observation) turns, rendered afresh."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.turns: list[tuple[Message, ...]] = []

    def request(self, params: SamplingParams) -> GenerationRequest:
        """Task prompt + the window."""
        k, turns = self.config.history_length, self.turns
        # The observation that preceded the window's first action (K + 1 observations in all).
        lead = turns[-k - 1][1:] if len(turns) > k else ()
        recent = turns[len(turns) - k:] if k else []
        messages = [*self.prompt, *lead, *(m for turn in recent for m in turn)]
        ids = self._encode(render_prompt(self.tokenizer, messages, self.tools)) \
            if self.tokenizer is not None else ()
        return self._checked(messages, ids, params)

    def record(self, completion: Completion, observation: Sequence[Message]) -> None:
        """Remember the turn."""
        self.turns.append((completion.message(), *observation))


def make_context(config: ContextConfig, tokenizer: Any, prompt: Sequence[Message],
                 tools: Sequence[ToolSpec]) -> Context:
    """The context for one episode."""
    cls = FullContext if config.mode == "full" else WindowContext
    return cls(config, tokenizer, prompt, tools)
