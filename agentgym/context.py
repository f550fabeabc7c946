"""Context managers: what the policy sees at each step of an episode.

- ``full``: the whole chat history. Token-exact: the next prompt is the previous prompt's
  ids + the ids the policy sampled + the tokens of what the chat template adds after them
  (end of turn, the observation, the next assistant header). Nothing the model generated is
  re-tokenized, so the ids a trajectory records are the ids the model produced. When the
  template re-renders the history differently (it strips or rewrites the assistant text),
  the prompt is rendered afresh and the event is counted in ``rerenders``.
- ``window``: verl-agent's memory window: the task prompt, then the last K (action,
  observation) turns; rendered afresh each step. K (``history_length``) is what HGPO reads.

- ``summarize`` (SUPO, arXiv 2510.06727): a full history inside a working window of W tokens.
  When the context reaches ``trigger``·W after a turn, the text of that last (action,
  observation) turn is dropped (the env keeps its effects), the summary instruction is
  appended, and the policy writes a summary (no tool call allowed). The next context is the
  task prompt + the continuation prompt + that summary, as a user turn of its own
  (``placement="turn"``, the default) or appended to the task's own user message
  (``placement="prompt"``, the paper's form: one message holds the task and the summary).
  At most S summaries; the rollout
  engine also stops at H policy calls (summaries count). The summary request continues the
  token ids of the prompt before the dropped turn, so earlier sampled ids stay verbatim and a
  working context packs into one training sequence ending with its summary.

Either way every step records the exact prompt ids the policy was given, so training on a
step never re-tokenizes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from agentgym.errors import ConfigError
from agentgym.parsing import parse_tool_calls
from agentgym.policies.base import Completion, GenerationRequest, SamplingParams
from agentgym.prompting import render_prompt
from agentgym.types import Message, ToolSpec

SUMMARY_INSTRUCTION = (
    "The conversation history is too long for the context window. Summarize what is needed "
    "to continue solving the task: the goal, what you have done, what you found (exact names, "
    "numbers and ids) and what to do next. Do not call any tool in this turn. Write the "
    "summary inside <summary></summary>.")
"""Default summary instruction (a user turn appended to the working context)."""
CONTINUATION_PROMPT = "We are in the following stage of solving the problem:\n"
"""Default text put before the summary in the next working context."""
_SUMMARY_RE = re.compile(r"<summary>(.*?)(?:</summary>|\Z)", re.DOTALL)


class ContextLimitExceeded(Exception):
    """The next prompt is longer than ``max_prompt_tokens``: the episode is truncated."""

    def __init__(self, tokens: int, limit: int) -> None:
        super().__init__(f"prompt has {tokens} tokens, over max_prompt_tokens={limit}")
        self.tokens, self.limit = tokens, limit


class SummaryLimitReached(Exception):
    """The working context is full and S summaries were made already: the episode stops."""

    def __init__(self, tokens: int, summaries: int) -> None:
        super().__init__(f"working context has {tokens} tokens after {summaries} summaries "
                         "(max_summaries reached)")
        self.tokens, self.summaries = tokens, summaries


@dataclass(frozen=True)
class SummarizeConfig:
    """SUPO's working window (``mode="summarize"``); symbols as in the paper."""

    working_tokens: int = 2048
    """W: the working context size in tokens."""
    trigger: float = 0.95
    """Summarize after a turn that brings the context to >= trigger·W tokens (L = 0.95·W)."""
    max_summaries: int = 4
    """S: most summaries per episode; a full context after S summaries ends the episode."""
    max_calls: int = 64
    """H: most policy calls per episode, summaries included."""
    summary_max_tokens: int | None = None
    """Token cap of a summary call (None = the rollout's max_tokens)."""
    eval_max_summaries: int | None = None
    """S at evaluation (None = max_summaries); may exceed the training value."""
    eval_max_calls: int | None = None
    """H at evaluation (None = max_calls)."""
    instruction: str = SUMMARY_INSTRUCTION
    """The summary instruction (a user turn)."""
    continuation: str = CONTINUATION_PROMPT
    """Text before the summary in the next working context."""
    placement: Literal["turn", "prompt"] = "turn"
    """Where the summary goes in the next working context: a user ``turn`` of its own after
    the task prompt, or appended to the task's last user message (``prompt``, the paper's
    form: the original prompt, a blank line, the continuation text and the summary)."""

    def __post_init__(self) -> None:
        if self.placement not in ("turn", "prompt"):
            raise ConfigError(f"summarize.placement must be 'turn' (a user turn of its own) or "
                              f"'prompt' (appended to the task prompt, the paper's form), got "
                              f"{self.placement!r}")
        for name in ("working_tokens", "max_calls", "eval_max_calls", "summary_max_tokens"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ConfigError(f"summarize.{name} must be a positive int, got {value!r}")
        for name in ("max_summaries", "eval_max_summaries"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 0):
                raise ConfigError(f"summarize.{name} must be an int >= 0, got {value!r}")
        if not 0 < self.trigger <= 1:
            raise ConfigError(f"summarize.trigger must be in (0, 1], got {self.trigger!r}; "
                              "the paper uses 0.95")

    @property
    def trigger_tokens(self) -> float:
        """L = trigger·W."""
        return self.trigger * self.working_tokens

    def for_eval(self) -> SummarizeConfig:
        """The config with the evaluation S and H."""
        return replace(
            self, max_summaries=self.max_summaries if self.eval_max_summaries is None
            else self.eval_max_summaries,
            max_calls=self.max_calls if self.eval_max_calls is None else self.eval_max_calls)


@dataclass(frozen=True)
class ContextConfig:
    """How each step's prompt is built."""

    mode: Literal["full", "window", "summarize"] = "full"
    """``full`` chat history (token-exact continuation), a ``window`` of recent turns, or
    ``summarize`` (SUPO: full history in a working window, summarized when it fills)."""
    history_length: int = 2
    """K: (action, observation) turns kept by ``window`` (HGPO reads the same K)."""
    max_prompt_tokens: int = 8192
    """A longer prompt ends the episode as truncated (when token ids are known)."""
    summarize: SummarizeConfig = field(default_factory=SummarizeConfig)
    """W, S, H and the prompts of ``summarize``."""

    def __post_init__(self) -> None:
        if self.mode not in ("full", "window", "summarize"):
            raise ConfigError(f"context mode must be 'full' or 'window' (or 'summarize' for "
                              f"SUPO), got {self.mode!r}")
        if not isinstance(self.history_length, int) or self.history_length < 0:
            raise ConfigError(f"history_length must be an int >= 0, got {self.history_length!r}")
        if self.max_prompt_tokens < 1:
            raise ConfigError(f"max_prompt_tokens must be >= 1, got {self.max_prompt_tokens!r}")

    @property
    def window(self) -> int | None:
        """K for estimators that need it; None for full history."""
        return self.history_length if self.mode == "window" else None

    @property
    def max_calls(self) -> int | None:
        """H: the policy-call cap of ``summarize``; None for the other modes."""
        return self.summarize.max_calls if self.mode == "summarize" else None


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


class SummarizeContext(FullContext):
    """SUPO's working context; see the module docstring.

    The rollout engine drives it: after each :meth:`record` it asks :meth:`needs_summary`;
    if so it sends :meth:`summary_request` to the policy and gives the completion to
    :meth:`record_summary`, which starts the next working context.
    """

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        if self.tokenizer is None:
            raise ConfigError("context mode 'summarize' measures the window in tokens and needs "
                              "the policy's tokenizer; use a transformers, vLLM or token-level "
                              "OpenAI-compatible policy")
        self.settings = self.config.summarize
        self.summaries = 0
        self._before: tuple[int, tuple[int, ...]] | None = None

    @property
    def context_tokens(self) -> int:
        """Tokens in the current working context (the next prompt)."""
        if self._ids is None:
            self.request(SamplingParams())
        return len(self._ids or ())

    def record(self, completion: Completion, observation: Sequence[Message]) -> None:
        """Remember the context before this turn (a summary drops the turn), then append."""
        if self._ids is None:
            self.request(SamplingParams())
        self._before = (len(self.messages), self._ids or ())
        super().record(completion, observation)

    def needs_summary(self) -> bool:
        """Whether the working context reached L = trigger·W tokens."""
        return self._before is not None and self.context_tokens >= self.settings.trigger_tokens

    def summary_request(self, params: SamplingParams) -> GenerationRequest:
        """The context before the last turn + the summary instruction.

        Raises:
            SummaryLimitReached: S summaries were made already.
            ContextLimitExceeded: The request is over ``max_prompt_tokens``.
        """
        if self.summaries >= self.settings.max_summaries or self._before is None:
            raise SummaryLimitReached(self.context_tokens, self.summaries)
        count, ids = self._before
        messages = [*self.messages[:count], Message("user", self.settings.instruction)]
        ids = self._continue(ids, render_prompt(self.tokenizer, messages, self.tools))
        if self.settings.summary_max_tokens is not None:
            params = replace(params, max_tokens=self.settings.summary_max_tokens)
        return self._checked(messages, ids, params)

    def record_summary(self, completion: Completion) -> tuple[Message, bool]:
        """Start the next working context from the summary.

        Returns:
            The message that now carries the summary (the continuation turn, or the task's
            user message with the summary appended under ``placement="prompt"``) and whether
            the summary turn was valid (a tool call, even a malformed one, makes it invalid;
            it is not run).
        """
        text = completion.text
        parsed = parse_tool_calls(text)
        valid = not (completion.tool_calls or parsed.calls or parsed.errors)
        found = _SUMMARY_RE.search(text)
        summary = (found.group(1) if found else text).strip()
        continuation = Message("user", self.settings.continuation + summary)
        self.messages = [*self.prompt, continuation]
        task = [i for i, m in enumerate(self.prompt) if m.role == "user"]
        if self.settings.placement == "prompt" and task:  # the paper's form
            i = task[-1]
            continuation = replace(self.prompt[i], content=f"{self.prompt[i].content}\n\n"
                                                           f"{continuation.content}")
            self.messages = [*self.prompt[:i], continuation, *self.prompt[i + 1:]]
        self._ids, self._text, self._before = None, "", None
        self.summaries += 1
        return continuation, valid

    def _continue(self, ids: tuple[int, ...], full: str) -> tuple[int, ...]:
        """``ids`` cut back to the longest prefix whose text starts ``full``, then the rest.

        Only the template's tail of the last prompt (the assistant header) differs, so a few
        tokens are cut; the ids the policy sampled earlier stay as they were.
        """
        for cut in range(len(ids), max(len(ids) - 64, 0) - 1, -1):
            head = self.tokenizer.decode(list(ids[:cut]), skip_special_tokens=False,
                                         clean_up_tokenization_spaces=False)
            if full.startswith(head):
                return (*ids[:cut], *self._encode(full[len(head):]))
        self.rerenders += 1
        return self._encode(full)


def make_context(config: ContextConfig, tokenizer: Any, prompt: Sequence[Message],
                 tools: Sequence[ToolSpec]) -> Context:
    """The context for one episode."""
    cls = {"full": FullContext, "window": WindowContext,
           "summarize": SummarizeContext}[config.mode]
    return cls(config, tokenizer, prompt, tools)
