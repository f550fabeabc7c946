"""Tools rendered through real chat templates, and read back by the parser."""

from agentgym import Message, ToolCall
from agentgym.envs.arithmetic import ArithmeticEnv
from agentgym.parsing import parse_tool_calls
from agentgym.prompting import render_prompt, template_supports_tools

# A ChatML template that reads `tools`, in the style of Qwen2.5's.
TOOLS_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n"
    "{%- if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n<tools>{% for t in tools %}\n{{ t | tojson }}{% endfor %}\n</tools>"
    "<|im_end|>\n{%- endif %}"
    "{%- for m in messages %}{%- if not (tools and m.role == 'system') %}"
    "{%- if m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n"
    "</tool_response><|im_end|>\n"
    "{%- else %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{%- for c in m.tool_calls or [] %}<tool_call>\n{\"name\": \"{{ c.function.name }}\", "
    "\"arguments\": {{ c.function.arguments | tojson }}}\n</tool_call>{%- endfor %}"
    "<|im_end|>\n{%- endif %}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)


def conversation():
    env = ArithmeticEnv()
    call = ToolCall("call_0", "calculator", {"expression": "6*7"})
    return env.tools, [
        Message("system", "Be exact."),
        Message("user", "What is 6*7?"),
        Message("assistant", "", tool_calls=(call,)),
        Message("tool", "42", tool_call_id="call_0", name="calculator"),
    ]


def test_smollm2_template_gets_tools_in_the_system_prompt(smollm2_tokenizer):
    tools, messages = conversation()
    assert not template_supports_tools(smollm2_tokenizer)
    text = render_prompt(smollm2_tokenizer, messages, tools)
    assert text.startswith("<|im_start|>system\nBe exact.\n\nYou can call these tools:")
    assert '"name": "calculator"' in text and '"name": "answer"' in text
    assert "<tool_response>\n42\n</tool_response>" in text
    assert text.endswith("<|im_start|>assistant\n")
    # The call the model made is shown in the format the parser reads back.
    assistant_turn = text.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    assert parse_tool_calls(assistant_turn).calls[0].arguments == {"expression": "6*7"}


def test_tools_aware_template_renders_tools_natively(smollm2_tokenizer):
    tools, messages = conversation()
    original, smollm2_tokenizer.chat_template = smollm2_tokenizer.chat_template, TOOLS_TEMPLATE
    try:
        assert template_supports_tools(smollm2_tokenizer)
        text = render_prompt(smollm2_tokenizer, messages, tools)
    finally:
        smollm2_tokenizer.chat_template = original
    assert "# Tools\n<tools>" in text and "You can call these tools" not in text
    assert '{"name": "calculator", "arguments": {"expression": "6*7"}}' in text
    calls = parse_tool_calls(text).calls
    assert [c.name for c in calls] == ["calculator"]


def test_no_tools_is_plain_chat(smollm2_tokenizer):
    text = render_prompt(smollm2_tokenizer, [Message("user", "hi")])
    assert "tools" not in text and text.endswith("<|im_start|>assistant\n")
