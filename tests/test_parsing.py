"""Tool-call parsing from model text: formats, errors, and fuzzing (never raises)."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgym import ToolCall
from agentgym.parsing import FORMATS, ParsedCalls, parse_tool_calls


def calls(text: str, formats: tuple[str, ...] = FORMATS) -> list[tuple[str, dict]]:
    return [(c.name, dict(c.arguments)) for c in parse_tool_calls(text, formats).calls]


class TestHermes:
    def test_single(self) -> None:
        out = parse_tool_calls('Let me add.\n<tool_call>\n{"name": "add", "arguments": '
                               '{"a": 1, "b": 2}}\n</tool_call>')
        assert out == ParsedCalls((ToolCall("call_0", "add", {"a": 1, "b": 2}),), (), "hermes")

    def test_multiple(self) -> None:
        text = ('<tool_call>{"name": "a", "arguments": {}}</tool_call> and '
                '<tool_call>{"name": "b", "arguments": {"x": [1, "y"]}}</tool_call>')
        out = parse_tool_calls(text)
        assert [c.id for c in out.calls] == ["call_0", "call_1"]
        assert calls(text) == [("a", {}), ("b", {"x": [1, "y"]})]

    def test_truncated_without_closing_tag(self) -> None:
        out = parse_tool_calls('<tool_call>{"name": "add", "arguments": {"a": 1}}')
        assert out.calls == (ToolCall("call_0", "add", {"a": 1}),) and out.errors == ()

    def test_truncated_mid_json(self) -> None:
        out = parse_tool_calls('<tool_call>{"name": "add", "argum')
        assert out.calls == () and out.format == "hermes"
        assert out.errors[0].startswith("malformed JSON in <tool_call>")
        assert '{"name": "add", "argum' in out.errors[0]

    def test_malformed_beside_good(self) -> None:
        out = parse_tool_calls('<tool_call>{name: add}</tool_call>'
                               '<tool_call>{"name": "ok", "arguments": {}}</tool_call>')
        assert out.calls == (ToolCall("call_0", "ok", {}),)
        assert len(out.errors) == 1
        assert out.errors[0].startswith("malformed JSON in <tool_call> (Expecting property name")

    def test_arguments_as_json_string(self) -> None:
        assert calls('<tool_call>{"name": "f", "arguments": "{\\"x\\": 2}"}</tool_call>') == [
            ("f", {"x": 2})]
        assert calls('<tool_call>{"name": "f", "arguments": ""}</tool_call>') == [("f", {})]
        out = parse_tool_calls('<tool_call>{"name": "f", "arguments": "{x"}</tool_call>')
        assert out.errors == ("the arguments of 'f' are a string that is not valid JSON",)

    def test_parameters_key_and_missing_arguments(self) -> None:
        assert calls('<tool_call>{"name": "f", "parameters": {"q": "s"}}</tool_call>') == [
            ("f", {"q": "s"})]
        assert calls('<tool_call>{"name": "f"}</tool_call>') == [("f", {})]
        assert calls('<tool_call>{"name": "f", "arguments": null}</tool_call>') == [("f", {})]

    def test_openai_shape(self) -> None:
        text = '<tool_call>{"type": "function", "function": {"name": "f", "arguments": ' \
               '{"a": 1}}}</tool_call>'
        assert calls(text) == [("f", {"a": 1})]

    @pytest.mark.parametrize(("body", "error"), [
        ("", "empty <tool_call> block"),
        ("[1, 2]", "must be a JSON object with 'name' and 'arguments', got list"),
        ('{"arguments": {}}', "has no tool name"),
        ('{"name": ""}', "has no tool name"),
        ('{"name": 3}', "has no tool name"),
        ('{"name": "f", "arguments": [1]}', "the arguments of 'f' must be a JSON object, got list"),
        pytest.param('{"name": "f", "arguments": 1' + "0" * 5000 + "}", "a number is too long",
                     id="huge-int"),
        pytest.param("[" * 5000 + "]" * 5000, "too deeply nested", id="deep"),
    ])
    def test_errors(self, body: str, error: str) -> None:
        out = parse_tool_calls(f"<tool_call>{body}</tool_call>")
        assert out.calls == () and out.format == "hermes"
        assert len(out.errors) == 1 and error in out.errors[0]


class TestAction:
    def test_bare_name(self) -> None:
        assert parse_tool_calls("I go <action>up</action>") == ParsedCalls(
            (ToolCall("call_0", "up", {}),), (), "action")
        assert calls("<action> push.left </action>") == [("push.left", {})]

    def test_keyword_call(self) -> None:
        assert calls("<action>move(dir='up', steps=2, ok=True, xs=[1, None])</action>") == [
            ("move", {"dir": "up", "steps": 2, "ok": True, "xs": [1, None]})]
        assert calls("<action>noop()</action>") == [("noop", {})]
        assert calls("<action>calc(expr='(1+2)*3')</action>") == [("calc", {"expr": "(1+2)*3"})]

    def test_json(self) -> None:
        assert calls('<action>{"name": "move", "arguments": {"d": "up"}}</action>') == [
            ("move", {"d": "up"})]

    def test_unclosed(self) -> None:
        assert calls("<action>down") == [("down", {})]

    def test_several(self) -> None:
        assert calls("<action>up</action><action>left</action>") == [("up", {}), ("left", {})]

    @pytest.mark.parametrize(("body", "error"), [
        ("move(1, 2)", "move(...) must use keyword arguments, e.g. move(x=1)"),
        ("move(*xs)", "must use keyword arguments"),
        ("move(**kw)", "cannot take **kwargs"),
        ("move(d=up)", "cannot read the arguments of move(...): ValueError"),
        ("move(d=", "cannot read the action"),
        ("move(d=1), stop(x=2)", "write one call"),
        ("move(s={1, 2})", "must be JSON values"),
        ("move(c=1j)", "must be JSON values"),
        ("go up now", "cannot read the action 'go up now'"),
        ("", "empty <action> block"),
        ('{"name": 1}', "has no tool name"),
        pytest.param("f(x=" + "[" * 300 + "]" * 300 + ")", "cannot read the arguments of f(...)",
                     id="deep"),
    ])
    def test_errors(self, body: str, error: str) -> None:
        out = parse_tool_calls(f"<action>{body}</action>")
        assert out.calls == () and out.format == "action"
        assert len(out.errors) == 1 and error in out.errors[0]


class TestBareJson:
    def test_object(self) -> None:
        out = parse_tool_calls('Calling: {"name": "f", "arguments": {"a": [1, {"b": 2}]}} ok')
        assert out == ParsedCalls((ToolCall("call_0", "f", {"a": [1, {"b": 2}]}),), (), "json")

    def test_list(self) -> None:
        text = '[{"name": "f", "arguments": {}}, {"name": "g", "parameters": {"x": 1}}, 3]'
        assert calls(text) == [("f", {}), ("g", {"x": 1})]

    def test_several_objects_and_noise(self) -> None:
        text = 'x = {1: 2}; {"a": 1} then {"name": "f"} and [1, 2] then {"name": "g", ' \
               '"arguments": {"y": "}"}} {"name": "broken"'
        assert calls(text) == [("f", {}), ("g", {"y": "}"})]

    def test_bad_arguments_reported(self) -> None:
        out = parse_tool_calls('{"name": "f", "arguments": 3}')
        assert out.calls == () and out.format == "json"
        assert out.errors == ("the arguments of 'f' must be a JSON object, got int",)

    def test_objects_without_name_are_not_calls(self) -> None:
        assert parse_tool_calls('{"a": 1} [{"b": 2}]') == ParsedCalls((), (), None)

    def test_nested_lists(self) -> None:
        assert calls('[[{"name": "f", "arguments": {}}]]') == [("f", {})]

    def test_huge_number_does_not_hide_later_calls(self) -> None:
        text = '{"name": "f", "arguments": {"n": 1' + "0" * 5000 + '}} {"name": "g"}'
        assert calls(text) == [("g", {})]


class TestFormats:
    def test_order_first_marker_wins(self) -> None:
        text = ('<action>up</action> <tool_call>{"name": "h", "arguments": {}}</tool_call> '
                '{"name": "j", "arguments": {}}')
        assert parse_tool_calls(text).format == "hermes"
        assert calls(text) == [("h", {})]
        assert calls(text, ("action", "hermes")) == [("up", {})]
        assert calls(text, ("json",)) == [("h", {}), ("j", {})]
        assert parse_tool_calls(text, ("action",)).format == "action"

    def test_marker_with_only_errors_still_wins(self) -> None:
        text = '<tool_call>oops</tool_call> {"name": "j"}'
        out = parse_tool_calls(text)
        assert out.format == "hermes" and out.calls == () and len(out.errors) == 1

    def test_no_call(self) -> None:
        assert parse_tool_calls("The answer is 42.") == ParsedCalls((), (), None)
        assert parse_tool_calls("") == ParsedCalls((), (), None)

    def test_format_subset(self) -> None:
        assert parse_tool_calls("<action>up</action>", ("hermes", "json")) == ParsedCalls(
            (), (), None)

    def test_unknown_format_is_a_caller_mistake(self) -> None:
        with pytest.raises(ValueError, match=r"unknown tool-call formats \['xml'\]"):
            parse_tool_calls("x", ("hermes", "xml"))

    def test_non_text(self) -> None:
        out = parse_tool_calls(None)  # type: ignore[arg-type]
        assert out == ParsedCalls((), ("expected text, got NoneType",), None)


@pytest.mark.parametrize("text", [
    "{" * 200_000, "[" * 200_000, '{"a":' * 40_000, '{"' * 100_000, "[{" * 100_000,
    "[" * 100_000 + '"' + "a" * 100_000, "<tool_call>" * 20_000, "<action>(" * 20_000,
], ids=lambda t: f"{t[:12]!r}x{len(t)}")
def test_degenerate_text_is_fast(text: str) -> None:
    """Degenerate, repetitive replies (common in RL) must not stall the event loop."""
    start = time.perf_counter()
    out = parse_tool_calls(text)
    assert time.perf_counter() - start < 1.5
    assert out.calls == ()


@pytest.mark.parametrize("text", [
    "\r\n" * 100_000, " " * 200_000, "[" + " " * 200_000,
    " " * 100_000 + "[f(x=1)]x" + " " * 100_000,
], ids=lambda t: f"{t[:4]!r}x{len(t)}")
def test_whitespace_walls_are_fast_in_every_format(text: str) -> None:
    """A pattern that opens and closes with competing ``\\s*`` backtracks quadratically on a
    long run of whitespace (minutes for 200,000 characters): every format reads it at once."""
    start = time.perf_counter()
    out = parse_tool_calls(text, FORMATS)
    assert time.perf_counter() - start < 1.5
    assert out.calls == ()


# -- fuzz ----------------------------------------------------------------------------------
FRAGMENTS = ["<tool_call>", "</tool_call>", "<action>", "</action>", "{", "}", "[", "]", "(",
             ")", "=", ":", ",", '"', '"name"', '"arguments"', '"parameters"', '"function"',
             '"f"', "f", "x=", "**", "*", "null", "true", "1", "-0", "1e999", "9" * 30, "'s'",
             " ", "\n", "\\", "\x00", "\udcff", "😀"]
FUZZ = st.one_of(
    st.text(),
    st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=4) | st.integers().map(str),
             max_size=50).map("".join),
)


def _check(out: ParsedCalls) -> None:
    assert isinstance(out, ParsedCalls)
    assert out.format in (None, *FORMATS)
    for i, c in enumerate(out.calls):
        assert isinstance(c, ToolCall)
        assert isinstance(c.name, str) and c.name
        assert isinstance(c.arguments, dict)
        assert all(isinstance(k, str) for k in c.arguments)
        assert c.id == f"call_{i}"
    assert all(isinstance(e, str) and e for e in out.errors)
    if out.format is None:
        assert out.calls == () and out.errors == ()


@settings(max_examples=300, deadline=None)
@given(text=st.text())
def test_fuzz_arbitrary_text(text: str) -> None:
    _check(parse_tool_calls(text))


@settings(max_examples=500, deadline=None)
@given(text=FUZZ, formats=st.permutations(FORMATS))
def test_fuzz_fragments(text: str, formats: list[str]) -> None:
    _check(parse_tool_calls(text, formats))


@settings(max_examples=200, deadline=None)
@given(name=st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True),
       args=st.dictionaries(st.text(min_size=1, max_size=5),
                            st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                            max_size=4),
       prefix=st.text(alphabet="abc \n.", max_size=10))
def test_fuzz_hermes_round_trip(name: str, args: dict, prefix: str) -> None:
    import json

    text = f"{prefix}<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"
    assert calls(text) == [(name, args)]
