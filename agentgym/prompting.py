"""Render a conversation and its tools into a prompt with the tokenizer's chat template.

When the template knows tools (it reads the ``tools`` variable, as Qwen's, Hermes' and
Llama 3.1's do), the tools go through ``apply_chat_template(..., tools=...)`` and the model
sees them the way it was trained to. Otherwise (SmolLM2, older templates) the tool list and
the Hermes call format are written into the system message, and tool results are shown as
user turns wrapped in ``<tool_response>`` tags, which every template can render. Either way
the parser in :mod:`agentgym.parsing` reads the calls the model writes back.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentgym.types import Message, ToolSpec

TOOL_SYSTEM_PROMPT = """You can call these tools:
<tools>
{tools}
</tools>
To call a tool, reply with one JSON object per call inside tags, for example:
<tool_call>{{"name": "{example}", "arguments": {{}}}}</tool_call>
Tool results come back inside <tool_response></tool_response> tags."""


def template_supports_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template reads the ``tools`` variable."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # named templates: "default" and "tool_use"
        return "tool_use" in template or any("tools" in str(t) for t in template.values())
    return isinstance(template, str) and "tools" in template


def tool_system_prompt(tools: Sequence[ToolSpec]) -> str:
    """The system text that describes ``tools`` to a model whose template cannot."""
    lines = "\n".join(json.dumps(t.to_openai(), ensure_ascii=False) for t in tools)
    return TOOL_SYSTEM_PROMPT.format(tools=lines, example=tools[0].name if tools else "name")


def to_chat(messages: Sequence[Message], tools: Sequence[ToolSpec],
            native_tools: bool) -> list[dict[str, Any]]:
    """Chat-template dicts for ``messages``; see the module docstring for the fallback."""
    if native_tools or not tools:
        return [m.to_chat() for m in messages]
    chat: list[dict[str, Any]] = []
    system = tool_system_prompt(tools)
    for m in messages:
        if m.role == "system":
            system = f"{m.content}\n\n{system}"
        elif m.role == "tool":
            block = f"<tool_response>\n{m.content}\n</tool_response>"
            if chat and chat[-1]["role"] == "user" and chat[-1].get("_tool"):
                chat[-1]["content"] += "\n" + block
            else:
                chat.append({"role": "user", "content": block, "_tool": True})
        elif m.role == "assistant" and m.tool_calls:
            calls = "".join(
                "<tool_call>" + json.dumps({"name": c.name, "arguments": dict(c.arguments)},
                                           ensure_ascii=False) + "</tool_call>"
                for c in m.tool_calls)
            content = f"{m.content}\n{calls}" if m.content.strip() else calls
            chat.append({"role": "assistant", "content": content})
        else:
            chat.append({"role": m.role, "content": m.content})
    for turn in chat:
        turn.pop("_tool", None)
    return [{"role": "system", "content": system}, *chat]


def render_prompt(tokenizer: Any, messages: Sequence[Message], tools: Sequence[ToolSpec] = (),
                  add_generation_prompt: bool = True) -> str:
    """The prompt text for ``messages`` and ``tools`` under ``tokenizer``'s chat template.

    Args:
        tokenizer: A Hugging Face tokenizer (anything with ``apply_chat_template``).
        messages: The conversation so far.
        tools: Tools the model may call.
        add_generation_prompt: End with the assistant turn header.

    Returns:
        The rendered text (tokenize it with the same tokenizer).
    """
    native = bool(tools) and template_supports_tools(tokenizer)
    kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": add_generation_prompt}
    if native:
        kwargs["tools"] = [t.to_openai() for t in tools]
    return tokenizer.apply_chat_template(to_chat(messages, tools, native), **kwargs)
