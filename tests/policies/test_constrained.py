"""The tool-call grammar (agentgym.policies.constrained), compiled by XGrammar itself, and the
checks that keep the option to backends and models it fits."""

import json

import pytest

from agentgym.errors import ConfigError
from agentgym.policies.constrained import check_hermes, check_spec, tool_call_tag
from agentgym.types import ToolSpec

TOOLS = (
    ToolSpec("get_weather", "Weather in a city.",
             {"type": "object",
              "properties": {"city": {"type": "string"},
                             "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                             "days": {"type": "integer"}},
              "required": ["city"]}),
    ToolSpec("add", "Add two numbers.",
             {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
              "required": ["a", "b"]}),
)


def _accepts(text: str) -> bool:
    xgr = pytest.importorskip("xgrammar")
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False).compile_grammar(
        xgr.Grammar.from_structural_tag(json.dumps(tool_call_tag(TOOLS))))
    matcher = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
    return matcher.accept_string(text) and matcher.is_terminated()


def _call(name: str, arguments: dict) -> str:  # as agentgym.prompting writes a call
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


@pytest.mark.parametrize("text", [
    "I cannot help with that.",
    _call("get_weather", {"city": "Oslo"}),
    _call("get_weather", {"city": "Oslo", "unit": "celsius", "days": 3}),
    _call("add", {"a": 1, "b": 2.5}) + _call("add", {"a": 3, "b": 4}),
    "Let me look. " + _call("get_weather", {"city": "Lima", "days": 2}) + " Done.",
])
def test_the_grammar_takes_prose_and_calls_the_tools_allow(text):
    assert _accepts(text)


@pytest.mark.parametrize("text", [
    _call("get_forecast", {"city": "Oslo"}),                        # a tool not offered
    _call("add", {"a": 1}),                                         # a required key left out
    _call("add", {"a": 1, "b": "2"}),                               # a string for a number
    _call("get_weather", {"city": "Oslo", "unit": "kelvin"}),       # outside the enum
    _call("get_weather", {"city": "Oslo", "days": 2.5}),            # a float for an integer
    _call("get_weather", {"city": "Oslo", "country": "Norway"}),    # a key the schema lacks
    '<tool_call>{"name": "add", "arguments": {"a": 5m, "b": 1}}</tool_call>',  # not JSON
])
def test_the_grammar_refuses_calls_their_schemas_do_not_allow(text):
    assert not _accepts(text)


def test_only_vllm_specs_and_hermes_models_can_constrain():
    check_spec("vllm:runs/model")
    for spec in ("hf:runs/model", "smollm2", "openai:http://localhost:8000/v1"):
        with pytest.raises(ConfigError, match="vllm:PATH"):
            check_spec(spec)

    class Template:
        def __init__(self, text):
            self.chat_template = text

    check_hermes(Template("{{ messages }}"))  # no tools in the template: agentgym writes Hermes
    check_hermes(Template("{% for t in tools %}<tool_call>{% endfor %}"))
    with pytest.raises(ConfigError, match="mistral"):
        check_hermes(Template("{% for t in tools %}[TOOL_CALLS]{% endfor %}"))
    with pytest.raises(ConfigError, match="no tools|none were offered"):
        tool_call_tag(())


def test_the_agent_refuses_the_option_on_a_backend_without_grammars():
    from agentgym.policies.base import SamplingParams
    from agentgym.rollout import LMAgent

    class Plain:
        tokenizer = None

        async def generate(self, requests):
            return []

        async def aclose(self):
            pass

    with pytest.raises(ConfigError, match="vllm:PATH"):
        LMAgent(Plain(), sampling=SamplingParams(constrain_tool_calls=True))
    LMAgent(Plain(), sampling=SamplingParams())
