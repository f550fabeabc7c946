"""Tool calls constrained to the offered tools: a grammar over every ``<tool_call>`` block.

With ``SamplingParams.constrain_tool_calls``, a backend that can (vLLM) samples each call
block from a grammar instead of freely. Once the reply writes the trigger ``<tool_call>``,
the block must read

    <tool_call>{"name": N, "arguments": A}</tool_call>,   N one of the offered tools,
                                                         A valid under N's parameter schema

(every required key, each value of its type or enum, no key the schema does not name); text
outside the blocks stays free, so a reply may still answer or decline in prose. The grammar
is a "triggered tags" structural tag of XGrammar (Dong et al., 2024, "XGrammar: Flexible and
Efficient Structured Generation Engine for Large Language Models"), the form vLLM's
structured outputs compile. Only the Hermes call syntax is built, the one
:mod:`agentgym.prompting` writes for a model whose chat template has no tools and the one
Qwen's and Hermes' templates speak.

vLLM masks the logits before it samples, so the log-probs it records are those of the masked
distribution (renormalised over the tokens the grammar allows), while the trainer scores
tokens under the unmasked model: trajectories sampled so are not on-policy for its ratio,
which is why the option is for evaluation and data collection, not RL configs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentgym.errors import ConfigError
from agentgym.parsing import detect_tool_format
from agentgym.prompting import template_supports_tools
from agentgym.types import ToolSpec

TRIGGER = "<tool_call>"


def check_spec(spec: str) -> None:
    """Raise unless the policy spec names a backend that can constrain calls (``vllm:PATH``).

    Raises:
        ConfigError: Another backend, named before any model loads.
    """
    if not spec.startswith("vllm:"):
        raise ConfigError(f"--constrain-tool-calls samples from a grammar, which only the vLLM "
                          f"backend does; use a vllm:PATH policy instead of {spec!r}, or leave "
                          "the flag out")


def check_hermes(tokenizer: Any) -> None:
    """Raise unless the model writes calls in the Hermes syntax the grammar describes.

    Raises:
        ConfigError: The chat template speaks another tool-call syntax.
    """
    if not template_supports_tools(tokenizer):
        return  # agentgym.prompting writes the tools and the Hermes format into the prompt
    fmt = detect_tool_format(tokenizer)
    if fmt != "hermes":
        raise ConfigError(f"constrain_tool_calls builds a grammar for <tool_call> blocks, but "
                          f"this model's chat template speaks {fmt or 'an unknown'} tool-call "
                          "syntax; leave constrain_tool_calls off for it")


def arguments_schema(tool: ToolSpec) -> dict[str, Any]:
    """The tool's parameter schema, closed to keys it does not name unless it says otherwise."""
    schema = dict(tool.parameters) or {"type": "object", "properties": {}}
    schema.setdefault("additionalProperties", False)
    return schema


def tool_call_tag(tools: Sequence[ToolSpec]) -> dict[str, Any]:
    """The structural tag for ``tools`` (JSON-ready; vLLM takes it as a string).

    Example:
        >>> tag = tool_call_tag([ToolSpec("add", "Add.", {"type": "object", "properties": {}})])
        >>> tag["format"]["tags"][0]["begin"]
        '<tool_call>{"name": "add", "arguments": '
    """
    if not tools:
        raise ConfigError("constrain_tool_calls needs the request's tools; none were offered")
    tags = [{"type": "tag",
             "begin": f'{TRIGGER}{{"name": {json.dumps(t.name, ensure_ascii=False)}, '
                      '"arguments": ',
             "content": {"type": "json_schema", "json_schema": arguments_schema(t)},
             "end": "}</tool_call>"} for t in tools]
    return {"type": "structural_tag",
            "format": {"type": "triggered_tags", "triggers": [TRIGGER], "tags": tags}}
