"""Tool-call syntax of the main open model families: parsing, fuzzing, template detection,
and the rollout's use of the model's own format and chat template."""

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentgym import Message
from agentgym.context import ContextConfig
from agentgym.errors import ConfigError
from agentgym.parsing import (
    DEFAULT_FORMATS,
    FORMATS,
    detect_tool_format,
    formats_for,
    parse_tool_calls,
)
from agentgym.policies.base import Completion
from agentgym.prompting import render_prompt
from agentgym.rollout import LMAgent
from agentgym.tool_env import ToolEnv
from agentgym.types import ToolCall

CALL = ("get_weather", {"city": "Paris", "days": 3})
GOOD = {  # family -> a reply as that family's models write one call
    "hermes": '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'
              "</tool_call>",
    "qwen3_coder": "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                   "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
    "mistral": '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]',
    "mistral_v11": '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}',
    "deepseek": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
                '```json\n{"city": "Paris", "days": 3}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    "deepseek_v31": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
                    '{"city": "Paris", "days": 3}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    "harmony": "<|channel|>analysis<|message|>The user wants the weather.<|end|><|start|>"
               "assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
               '<|message|>{"city": "Paris", "days": 3}<|call|>',
    "llama3_json": '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", '
                   '"days": 3}}',
    "pythonic": '[get_weather(city="Paris", days=3)]',
    "json": 'Sure. {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}',
}
WINNER = {"qwen3_coder": "hermes", "mistral_v11": "mistral", "deepseek_v31": "deepseek",
          "llama3_json": "json"}  # the default order's reader that finds the marker first
BAD = {  # family -> (a malformed call, a phrase of its error)
    "hermes": ('<tool_call>{"name": "get_weather", "arguments": {</tool_call>', "malformed JSON"),
    "qwen3_coder": ("<function=>\n<parameter=city>\nParis\n</parameter>\n</function>",
                    "does not name a tool"),
    "mistral": ('[TOOL_CALLS]get_weather[ARGS]{"city": ', "malformed JSON arguments"),
    "mistral_v3": ('[TOOL_CALLS][{"name": "get_weather", "arguments": ', "malformed JSON"),
    "deepseek": ("<｜tool▁call▁begin｜>get_weather<｜tool▁call▁end｜>", "without"),
    "harmony": ("<|channel|>commentary to=functions.get_weather<|message|>{city: Paris}<|call|>",
                "malformed JSON arguments"),
    "pythonic": ('[get_weather(city="Paris"), 42]', "expected calls like name(key=value)"),
}


@pytest.mark.parametrize("family", sorted(GOOD))
def test_each_family_parses_by_default_and_on_its_own(family):
    text = GOOD[family]
    parsed = parse_tool_calls(text)
    assert parsed.errors == () and parsed.format == WINNER.get(family, family)
    assert [(c.name, dict(c.arguments)) for c in parsed.calls] == [CALL]
    own = {"mistral_v11": "mistral", "deepseek_v31": "deepseek"}.get(family, family)
    assert parse_tool_calls(text, formats_for(own)).calls == parsed.calls


@pytest.mark.parametrize("family", sorted(BAD))
def test_malformed_calls_are_errors_not_exceptions(family):
    text, phrase = BAD[family]
    parsed = parse_tool_calls(text)
    assert parsed.errors and phrase in parsed.errors[0], parsed
    assert family.split("_v")[0] in (parsed.format or "") or parsed.format == "hermes"


def test_several_calls_in_one_reply():
    mistral = parse_tool_calls('[TOOL_CALLS]a[ARGS]{"x": 1}[TOOL_CALLS]b[CALL_ID]abc123456'
                               '[ARGS]{}')
    assert [(c.name, c.arguments) for c in mistral.calls] == [("a", {"x": 1}), ("b", {})]
    assert [c.id for c in mistral.calls] == ["call_0", "call_1"]
    coder = parse_tool_calls("<tool_call><function=a><parameter=p>[1, 2]</parameter></function>"
                             "</tool_call><tool_call><function=b><parameter=q>two words"
                             "</parameter></function></tool_call>")
    assert [(c.name, c.arguments) for c in coder.calls] == [("a", {"p": [1, 2]}),
                                                            ("b", {"q": "two words"})]
    pythonic = parse_tool_calls('<|python_start|>[a(x=1), b(y="z")]<|python_end|>')
    assert [c.name for c in pythonic.calls] == ["a", "b"]


MARKERS = ["<tool_call>", "</tool_call>", "<function=", "<parameter=", "</parameter>",
           "</function>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "<｜tool▁calls▁begin｜>",
           "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "```json", "```",
           "to=functions.", "<|channel|>", "<|message|>", "<|call|>", "<|python_tag|>",
           "<|python_start|>", "<|python_end|>", "<action>", "{", "}", "[", "]", "(", ")", '"',
           ":", ",", "=", "name", "arguments", "parameters", "get_weather", "\n", " "]
pieces = st.one_of(st.sampled_from(MARKERS), st.text(max_size=8))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(pieces, max_size=40).map("".join), st.sampled_from((None, *FORMATS)))
def test_fuzz_never_raises_and_returns_well_formed_calls(text, family):
    formats = DEFAULT_FORMATS if family is None else formats_for(family)
    parsed = parse_tool_calls(text, formats)
    assert parsed.format is None or parsed.format in FORMATS
    for call in parsed.calls:
        assert isinstance(call.name, str) and call.name
        assert isinstance(call.arguments, dict)
    assert all(isinstance(e, str) and e for e in parsed.errors)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(GOOD)), st.integers(0, 400), st.text(max_size=20))
def test_fuzz_damaged_calls(family, cut, noise):
    text = GOOD[family]
    parse_tool_calls(text[:cut % (len(text) + 1)] + noise)  # cut short, then garbage
    parse_tool_calls(noise + text)


def test_garbage_at_scale_stays_fast():
    import time

    start = time.perf_counter()
    for text in ("to=functions.x " * 20_000, "<|message|>" + "to=functions.x " * 13_000,
                 "[TOOL_CALLS]" * 20_000, "<function=a><parameter=b>" * 10_000,
                 "<function=" * 20_000, "<function=a>" + "<parameter=" * 20_000,
                 "<｜tool▁call▁begin｜>" * 20_000, "[a(" * 30_000, '{"name": ' * 20_000):
        for family in DEFAULT_FORMATS:
            parse_tool_calls(text, formats_for(family))
    # A bound on a hang (quadratic parsing took minutes), not a speed check: about 2 s on an
    # idle 2-core machine, and a loaded one must not fail it
    assert time.perf_counter() - start < 120  # degenerate inputs cannot hang an episode


@pytest.mark.parametrize(("template", "family"), [
    ("{{ '<tool_call>\\n<function=' + name + '>\\n<parameter=' }}", "qwen3_coder"),
    ("{{- '<tool_call>\\n' + tool_call | tojson + '\\n</tool_call>' }}", "hermes"),
    ("{{ '[TOOL_CALLS]' + calls | tojson }}", "mistral"),
    ("{{ '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' }}", "deepseek"),
    ("{{ '<|start|>assistant<|channel|>commentary to=functions.' }}", "harmony"),
    ("{{ '<|python_start|>' }}", "pythonic"),
    ("{{ '<|start_header_id|>ipython<|end_header_id|>' }}", "llama3_json"),
    ("{{ '<|im_start|>' + m.content }}", None),
])
def test_detect_tool_format_from_the_chat_template(template, family):
    assert detect_tool_format(template) == family
    assert detect_tool_format({"default": "plain", "tool_use": template}) == family


MISTRALISH = (
    "{%- if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'user' %}[INST]{{ m.content }}[/INST]"
    "{%- elif m.role == 'assistant' %}{{ m.content }}"
    "{%- if m.tool_calls %}[TOOL_CALLS]{{ m.tool_calls | tojson }}{% endif %}</s>"
    "{%- elif m.role == 'tool' %}[TOOL_RESULTS]{{ m.content }}[/TOOL_RESULTS]"
    "{%- else %}{{ m.content }}{% endif -%}"
    "{%- endfor -%}")


@pytest.fixture
def mistral_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.chat_template = MISTRALISH
    return tok


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b


class OneReply:
    """A policy with a real tokenizer that always answers ``text``."""

    def __init__(self, tokenizer, text):
        self.tokenizer, self.text, self.prompts = tokenizer, text, []

    async def generate(self, requests):
        self.prompts += [r.prompt_ids for r in requests]
        return [Completion(self.text) for _ in requests]


def test_rollout_parses_the_models_own_format_and_renders_with_its_template(mistral_tokenizer):
    env = ToolEnv([{"prompt": "What is 2 + 2?", "answer": 4}], [add], verifier="numeric")
    policy = OneReply(mistral_tokenizer, '[TOOL_CALLS]add[ARGS]{"a": 2, "b": 2}')

    async def one_turn(agent):
        prompt, _ = await env.reset(seed=0)
        episode = agent.start(prompt, env)
        action, _ = await episode.act()
        result = await env.step(action)
        episode.observe(result.observation)
        return action, result, episode

    action, result, episode = asyncio.run(one_turn(LMAgent(policy, ContextConfig())))
    assert action.tool_calls == (ToolCall("call_0", "add", {"a": 2, "b": 2}),)  # "auto"
    assert result.info["valid"] and result.observation[0].content == "4"
    text = mistral_tokenizer.decode(list(episode.context.request(
        LMAgent(policy).sampling).prompt_ids))
    assert "[AVAILABLE_TOOLS]" in text and '"name": "add"' in text  # the template's tools
    assert "[TOOL_RESULTS]4[/TOOL_RESULTS]" in text  # and its tool-result turn
    assert text.count("[TOOL_CALLS]add[ARGS]") == 1  # the call as sampled, not twice
    assert "<tool_response>" not in text  # no fallback rendering

    plain, _, _ = asyncio.run(one_turn(LMAgent(policy, ContextConfig(), tool_format=None)))
    assert plain.tool_calls == ()  # left to the env, which reads it by its marker


def test_a_malformed_call_becomes_an_observation(mistral_tokenizer):
    env = ToolEnv([{"prompt": "What is 2 + 2?", "answer": 4}], [add], verifier="numeric")

    async def main():
        await env.reset(seed=0)
        return await env.step(Message("assistant", '[TOOL_CALLS]add[ARGS]{"a": 2, '))
    result = asyncio.run(main())
    assert result.info["valid"] is False and result.reward is None
    assert "malformed JSON arguments of 'add'" in result.observation[0].content


def test_fallback_prompt_for_templates_without_tools(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)  # SmolLM2: no tools in its template
    text = render_prompt(tok, [Message("user", "hi"), Message("tool", "4")],
                         ToolEnv([{"prompt": "p"}], [add]).tools)
    assert "<tools>" in text and "<tool_response>\n4\n</tool_response>" in text


def test_unknown_tool_format_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown tool-call format 'mistrall'"):
        LMAgent(OneReply(None, ""), tool_format="mistrall")
    with pytest.raises(ValueError, match="choose from"):
        formats_for("gpt")
