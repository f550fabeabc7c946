"""A token-level scripted policy: plays a fixed plan of actions and writes its own summaries.

:class:`PlanPolicy` satisfies :class:`agentgym.policies.base.Policy` with a real tokenizer and
no model: each completion is the tokenized text of the next planned tool call (Hermes
``<tool_call>`` form) plus the end-of-turn token, with a fixed behaviour log-prob. The
rollout engine, the context managers (``summarize`` included) and the training split see
exactly what a model backend gives them, so long-context behaviour can be measured and
tested without sampling a model.

It keeps no per-episode state: its position in the plan is read from the context it is
given (the ``done=N`` of the last summary plus the assistant turns after it). On a summary
request (the last message is the summary instruction) it writes ``<summary>done=N; ...
</summary>``, where N counts the turns still in the context, so the turn that the summary
dropped is played again: its result never reached the summary.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from agentgym.context import SUMMARY_INSTRUCTION
from agentgym.policies.base import Completion, GenerationRequest
from agentgym.types import Message

_DONE_RE = re.compile(r"done=(\d+)")


def call_text(action: Message) -> str:
    """The Hermes text of an action's tool calls (or its content when it has none)."""
    if not action.tool_calls:
        return action.content
    return "".join("<tool_call>" + json.dumps({"name": c.name, "arguments": dict(c.arguments)})
                   + "</tool_call>" for c in action.tool_calls)


def describe(action: Message) -> str:
    """Plain words for an action (a summary must not hold tool-call markup)."""
    return "; ".join(f"{c.name} " + " ".join(f"{k} {v}" for k, v in c.arguments.items())
                     for c in action.tool_calls) or action.content


class PlanPolicy:
    """Plays ``plan(task_prompt)`` turn by turn; see the module docstring.

    Args:
        tokenizer: A Hugging Face tokenizer (prompts and completions are its ids).
        plan: Task prompt text (the first message of the episode) -> the actions to play.
        instruction: The summary instruction the context manager uses.
        logprob: Behaviour log-prob recorded for every completion token.
        summary_text: Extra text written into each summary (e.g. to make it long).
    """

    def __init__(self, tokenizer: Any, plan: Callable[[str], Sequence[Message]], *,
                 instruction: str = SUMMARY_INSTRUCTION, logprob: float = -0.5,
                 summary_text: str = "") -> None:
        self.tokenizer = tokenizer
        self.plan = plan
        self.instruction = instruction
        self.logprob = logprob
        self.summary_text = summary_text
        self.policy_version = 0

    def position(self, messages: Sequence[Message]) -> int:
        """Actions whose results are in this context: the last summary's N + turns since."""
        done = 0
        for m in messages:
            found = _DONE_RE.search(m.content) if m.role == "user" else None
            if found:
                done = int(found.group(1))
        start = max((i for i, m in enumerate(messages) if _DONE_RE.search(m.content)
                     and m.role == "user"), default=0)
        return done + sum(m.role == "assistant" for m in messages[start:])

    def next_text(self, request: GenerationRequest) -> str:
        """The completion text for ``request``."""
        messages = request.messages
        plan = self.plan(messages[0].content)
        done = self.position(messages)
        if messages[-1].role == "user" and messages[-1].content == self.instruction:
            upcoming = describe(plan[done]) if done < len(plan) else "nothing"
            return (f"<summary>done={done}; the task is in the first message; next action: "
                    f"{upcoming}{self.summary_text}</summary>")
        if done >= len(plan):
            return "I have nothing left to do."
        return call_text(plan[done])

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """One scripted completion per request."""
        eos = self.tokenizer.eos_token_id
        out = []
        for request in requests:
            text = self.next_text(request)
            ids = (*self.tokenizer.encode(text, add_special_tokens=False), eos)
            out.append(Completion(text, request.prompt_ids, ids, (self.logprob,) * len(ids),
                                  policy_version=self.policy_version))
        return out

    async def aclose(self) -> None:
        """Nothing to release."""
