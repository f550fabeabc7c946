"""Tools: schemas that match transformers' get_json_schema, and a ToolBox that never raises."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal, Optional, Union

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgym import ConfigError, Message, Tool, ToolBox, ToolCall, tool
from agentgym.tools import ToolOutcome, function_schema


# -- a dozen representative functions, compared with get_json_schema ------------------------
def scalars(a: int, b: float, c: str, d: bool) -> int:
    """Take one of each scalar type.

    Args:
        a: An integer.
        b: A float.
        c: A string.
        d: A boolean.
    """
    return a


def containers(xs: list[int], counts: dict[str, int], pair: tuple[int, str],
               anything: Any, raw_list: list, raw_dict: dict,
               nested: dict[str, list[float]]) -> None:
    """Containers of several kinds.

    Args:
        xs: Some integers.
        counts: Word counts.
        pair: An int and a str.
        anything: Whatever.
        raw_list: A list of anything.
        raw_dict: A mapping of anything.
        nested: Lists of floats by name.
    """


def literals(mode: Literal["fast", "slow"], level: Literal[1, 2, 3],
             mixed: Literal["auto", 0], maybe: Literal["on", None],
             flag: Literal[True, False] = True) -> str:
    """Choose modes.

    Args:
        mode: How fast.
        level: Level of detail.
        mixed: A string or zero.
        maybe: On or nothing.
        flag: A literal bool.
    """
    return mode


def optionals(a: Optional[int], b: str | None = None, c: list[str] | None = None,  # noqa: UP045
              d: Literal["x", "y"] | None = None) -> Optional[str]:  # noqa: UP045
    """Optional arguments.

    Args:
        a: Maybe an int.
        b: Maybe a string.
        c: Maybe strings.
        d: Maybe a choice.
    """
    return b


def unions(a: int | str, b: str | int, c: float | int, d: Union[int, str, None] = None,  # noqa: UP007
           e: list[int] | str = "", f: int | dict[str, int] = 0, g: bool | int = 1) -> str:
    """Union types.

    Args:
        a: Int or str.
        b: Str or int (sorted like get_json_schema does).
        c: Float or int.
        d: Int, str or None.
        e: A list or a string.
        f: An int or a mapping.
        g: Bool or int.
    """
    return str(a)


def defaults(query: str, limit: int = 10, exact: bool = False, scale: float = 1.5,
             tags: list[str] | None = None) -> list[str]:
    """Search the index.

    Args:
        query: What to look for.
        limit: How many results.
        exact: Whole words only.
        scale: Score scale.
        tags: Filter by tags.

    Returns:
        The matching documents.
    """
    return []


def multiline(path: str, content: str, mode: str = "w") -> str:
    """Write a file in the sandbox.

    The summary continues over
    a second and third line.

    Args:
        path: Where to write. Relative paths are resolved
            against the working directory, and parent
            directories are created.
        content: The text: written as UTF-8, with a trailing
            newline added when missing.

        mode: "w" to overwrite or "a" to append.

    Returns:
        A confirmation naming the path
        and the number of bytes written.

    Raises:
        OSError: The sandbox refused the write.
    """
    return path


def no_args() -> str:
    """Return the current board."""
    return "board"


def returns_none(x: int) -> None:
    """Do something for its side effect.

    Args:
        x: A value.
    """


class Board:
    """Not expressible as JSON schema."""


def custom_return(x: int) -> Board:
    """Return a custom object, which the schema leaves out.

    Args:
        x: A value.
    """
    return Board()


def choices(drink: str, size: int = 1) -> str:
    """Order a drink.

    Args:
        drink: The drink to order (choices: ["tea", "coffee"])
        size: Cup size (choices: [1, 2, 3])
    """
    return drink


def returns_section(text: str) -> dict[str, int]:
    """Count words.

    Args:
        text: The text to count.

    Returns:
        A mapping from word to count.
    """
    return {}


SCHEMA_FUNCTIONS = [scalars, containers, literals, optionals, unions, defaults, multiline,
                    no_args, returns_none, custom_return, choices, returns_section]


@pytest.mark.parametrize("func", SCHEMA_FUNCTIONS, ids=lambda f: f.__name__)
def test_function_schema_matches_transformers(func: Any) -> None:
    get_json_schema = pytest.importorskip("transformers.utils").get_json_schema
    want = get_json_schema(func)
    if func is custom_return and want["function"].get("return") == {"type": "object"}:
        # transformers < 5.20 (the one vLLM's CPU build pins) describes a class's instance as
        # an object; later versions, and agentgym, leave an inexpressible return out
        want["function"].pop("return")
    assert function_schema(func) == want


def test_function_schema_concrete_values() -> None:
    """Pin the dialect itself, so a change in both libraries would still be noticed."""
    fn = function_schema(unions)["function"]
    props = fn["parameters"]["properties"]
    assert props["a"] == {"type": ["integer", "string"], "description": "Int or str."}
    assert props["b"]["type"] == ["integer", "string"]
    assert props["c"]["type"] == ["integer", "number"]
    assert props["d"] == {"type": ["integer", "string"], "nullable": True,
                          "description": "Int, str or None."}
    assert props["e"]["anyOf"] == [{"type": "array", "items": {"type": "integer"}},
                                   {"type": "string"}]
    assert fn["parameters"]["required"] == ["a", "b", "c"]
    lit = function_schema(literals)["function"]["parameters"]["properties"]
    assert lit["mixed"] == {"type": ["string", "integer"], "enum": ["auto", 0],
                            "description": "A string or zero."}
    assert lit["maybe"]["type"] == ["string", "null"]
    ml = function_schema(multiline)["function"]
    assert ml["description"] == ("Write a file in the sandbox.\n\nThe summary continues over\n"
                                 "a second and third line.")
    assert ml["parameters"]["properties"]["path"]["description"] == (
        "Where to write. Relative paths are resolved against the working directory, and "
        "parent directories are created.")
    assert ml["parameters"]["properties"]["mode"]["description"] == '"w" to overwrite or "a" ' \
        "to append."
    assert ml["return"] == {"type": "string", "description": "A confirmation naming the path\n"
                                                            "    and the number of bytes written."}
    ch = function_schema(choices)["function"]["parameters"]["properties"]
    assert ch["drink"] == {"type": "string", "enum": ["tea", "coffee"],
                           "description": "The drink to order"}
    assert function_schema(no_args)["function"] == {
        "name": "no_args", "description": "Return the current board.",
        "parameters": {"type": "object", "properties": {}}, "return": {"type": "string"}}
    assert "return" not in function_schema(custom_return)["function"]
    assert function_schema(returns_none)["function"]["return"] == {"type": "null"}


def test_function_schema_errors() -> None:
    def undocumented(x: int) -> int:
        return x

    def untyped(x) -> int:  # noqa: ANN001
        """Doc.

        Args:
            x: X.
        """
        return x

    def custom_arg(b: Board) -> int:
        """Doc.

        Args:
            b: A board.
        """
        return 0

    with pytest.raises(ConfigError, match="has no docstring"):
        function_schema(undocumented)
    with pytest.raises(ConfigError, match="parameter 'x' has no type hint"):
        function_schema(untyped)
    with pytest.raises(ConfigError, match="cannot express the type hint"):
        function_schema(custom_arg)


# -- tools used by the ToolBox tests -------------------------------------------------------
@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b


@tool
async def fetch(url: str) -> str:
    """Fetch a page.

    Args:
        url: The address.
    """
    await asyncio.sleep(0)
    return f"<html>{url}</html>"


@tool
def remember(key: str, state: dict) -> str:
    """Remember a key for this episode.

    Args:
        key: The key.
    """
    state.setdefault("keys", []).append(key)
    return f"remembered {len(state['keys'])}"


@tool
def boom(reason: str = "bad") -> str:
    """Fail on purpose.

    Args:
        reason: Why.
    """
    raise ValueError(reason)


@tool(timeout=0.05)
async def slow(seconds: float) -> str:
    """Sleep.

    Args:
        seconds: How long.
    """
    await asyncio.sleep(seconds)
    return "woke"


@tool
def huge(n: int) -> str:
    """Return n characters.

    Args:
        n: How many.
    """
    return "z" * n


@tool
def choose(mode: Literal["a", "b"], note: str | None = None) -> dict[str, Any]:
    """Choose a mode.

    Args:
        mode: The mode.
        note: An optional note.
    """
    return {"mode": mode, "note": note, "list": [1, 2]}


def plain(nullable: int) -> int:
    """A plain function whose parameter is named like a schema keyword.

    Args:
        nullable: A number.
    """
    return nullable * 2


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


@tool
def odd_result(kind: str) -> Any:
    """Return something awkward to print.

    Args:
        kind: Which.
    """
    if kind == "cycle":
        x: list[Any] = []
        x.append(x)
        return x
    if kind == "unprintable":
        return Unprintable()
    return {1, 2} if kind == "set" else b"bytes"


ALL = [add, fetch, remember, boom, slow, huge, choose, plain, odd_result]


def box(**kwargs: Any) -> ToolBox:
    return ToolBox(ALL, **kwargs)


def call(name: str, **arguments: Any) -> Message:
    return Message("assistant", "", tool_calls=(ToolCall(f"id_{name}", name, arguments),))


def hermes(*calls: tuple[str, dict[str, Any]]) -> Message:
    text = "".join(f'<tool_call>{json.dumps({"name": n, "arguments": a})}</tool_call>'
                   for n, a in calls)
    return Message("assistant", text)


class TestToolSpec:
    def test_tool_decorator(self) -> None:
        assert isinstance(add, Tool) and add.name == "add"
        assert add.spec.description == "Add two integers."
        assert add.spec.parameters == {
            "type": "object", "required": ["a", "b"],
            "properties": {"a": {"type": "integer", "description": "The first."},
                           "b": {"type": "integer", "description": "The second."}}}
        assert add(2, 3) == 5
        assert slow.timeout == 0.05 and add.timeout == 30.0

    def test_state_is_hidden(self) -> None:
        params = remember.spec.parameters
        assert list(params["properties"]) == ["key"] and params["required"] == ["key"]

    def test_rename(self) -> None:
        renamed = tool(plain, name="double")
        assert renamed.name == "double" and renamed.spec.description.startswith("A plain")

    def test_specs_and_plain_functions(self) -> None:
        tb = box()
        assert [s.name for s in tb.specs] == ["add", "fetch", "remember", "boom", "slow",
                                              "huge", "choose", "plain", "odd_result"]

    def test_duplicate_names(self) -> None:
        with pytest.raises(ConfigError, match="two tools are named 'add'"):
            ToolBox([add, tool(plain, name="add")])

    def test_unknown_parser_format(self) -> None:
        with pytest.raises(ConfigError, match=r"unknown tool-call formats \['xml'\]"):
            ToolBox([add], parser=("hermes", "xml"))


class TestToolBox:
    async def test_sync_tool(self) -> None:
        out = await box().run(call("add", a=2, b=3))
        assert isinstance(out, ToolOutcome)
        assert out.valid and out.results == (5,)
        assert out.messages == (Message("tool", "5", tool_call_id="id_add", name="add"),)
        assert out.calls == (ToolCall("id_add", "add", {"a": 2, "b": 3}),)

    async def test_async_tool_from_text(self) -> None:
        out = await box().run(hermes(("fetch", {"url": "a.b"})))
        assert out.valid
        assert out.messages == (Message("tool", "<html>a.b</html>", tool_call_id="call_0",
                                        name="fetch"),)

    async def test_several_calls(self) -> None:
        out = await box().run(hermes(("add", {"a": 1, "b": 1}), ("add", {"a": 2, "b": 2})))
        assert [m.content for m in out.messages] == ["2", "4"]
        assert [m.tool_call_id for m in out.messages] == ["call_0", "call_1"]

    async def test_state_injection(self) -> None:
        state: dict[str, Any] = {}
        tb = box()
        assert (await tb.run(call("remember", key="k1"), state=state)).messages[0].content == \
            "remembered 1"
        out = await tb.run(call("remember", key="k2"), state=state)
        assert out.messages[0].content == "remembered 2"
        assert state == {"keys": ["k1", "k2"]}

    async def test_state_cannot_be_passed_by_the_model(self) -> None:
        out = await box().run(call("remember", key="k", state={"keys": []}))
        assert not out.valid
        assert "'state' was unexpected" in out.messages[0].content

    async def test_missing_required(self) -> None:
        out = await box().run(call("add", a=1))
        assert not out.valid and out.results == (None,)
        assert out.messages[0].content == "error: bad arguments for add: 'b' is a required " \
                                          "property"
        assert out.messages[0].role == "tool" and out.messages[0].tool_call_id == "id_add"

    async def test_wrong_type(self) -> None:
        out = await box().run(call("add", a="1", b=2.5))
        text = out.messages[0].content
        assert not out.valid
        assert "a: '1' is not of type 'integer'" in text
        assert "b: 2.5 is not of type 'integer'" in text

    async def test_bool_is_not_an_integer(self) -> None:
        out = await box().run(call("add", a=True, b=1))
        assert not out.valid and "True is not of type 'integer'" in out.messages[0].content

    async def test_unknown_extra_arg(self) -> None:
        out = await box().run(call("add", a=1, b=2, c=3))
        assert not out.valid
        assert "('c' was unexpected)" in out.messages[0].content

    async def test_literal_and_nullable(self) -> None:
        tb = box()
        ok = await tb.run(call("choose", mode="a", note=None))
        assert ok.valid and json.loads(ok.messages[0].content) == {"mode": "a", "note": None,
                                                                   "list": [1, 2]}
        bad = await tb.run(call("choose", mode="c"))
        assert not bad.valid and "'c' is not one of ['a', 'b']" in bad.messages[0].content

    async def test_parameter_named_nullable(self) -> None:
        tb = box()
        assert (await tb.run(call("plain", nullable=4))).messages[0].content == "8"
        out = await tb.run(call("plain", nullable="x"))
        assert not out.valid and "'x' is not of type 'integer'" in out.messages[0].content

    async def test_unknown_tool(self) -> None:
        out = await box().run(call("ad", a=1, b=2))
        assert not out.valid
        assert out.messages[0].content.startswith("error: unknown tool 'ad'; did you mean 'add'?")
        assert "Available tools: ['add', 'boom'" in out.messages[0].content
        far = await box().run(call("zzzzzz"))
        assert far.messages[0].content.startswith("error: unknown tool 'zzzzzz'. Available")

    async def test_tool_raising(self) -> None:
        out = await box().run(call("boom", reason="kaput"))
        assert not out.valid
        assert out.messages[0].content == "error: boom raised ValueError: kaput"

    async def test_timeout(self) -> None:
        out = await box().run(call("slow", seconds=10))
        assert not out.valid
        assert out.messages[0].content == "error: slow timed out after 0.05 s"
        fast = await box().run(call("slow", seconds=0))
        assert fast.valid and fast.messages[0].content == "woke"

    async def test_enormous_output_is_capped(self) -> None:
        out = await box(max_output_chars=1000).run(call("huge", n=5_000_000))
        text = out.messages[0].content
        assert out.valid
        assert text == "z" * 1000 + "\n…[truncated 4999000 characters]"
        assert out.results == ("z" * 5_000_000,)

    @pytest.mark.parametrize(("kind", "expected"), [
        ("cycle", "[[...]]"), ("unprintable", "<Unprintable object>"),
        ("set", '"{1, 2}"'), ("bytes", "\"b'bytes'\"")])
    async def test_awkward_results_are_rendered(self, kind: str, expected: str) -> None:
        out = await box().run(call("odd_result", kind=kind))
        assert out.valid and out.messages[0].content == expected

    async def test_max_calls(self) -> None:
        msg = hermes(*[("add", {"a": i, "b": 0}) for i in range(4)])
        out = await box(max_calls=2).run(msg)
        assert not out.valid
        assert [m.content for m in out.messages[:2]] == ["0", "1"]
        assert out.messages[2].content == ("error: at most 2 tool calls per turn; this one was "
                                           "not run")
        assert len(out.messages) == 4 and out.results == (0, 1, None, None)

    async def test_no_tool_call(self) -> None:
        out = await box().run(Message("assistant", "I think the answer is 4."))
        assert not out.valid and out.calls == ()
        assert len(out.messages) == 1 and out.messages[0].role == "user"
        assert out.messages[0].content.startswith(
            "error: no tool call found in the reply. Call one of the tools ['add', 'boom'")

    async def test_parse_error_only(self) -> None:
        out = await box().run(Message("assistant", "<tool_call>{not json</tool_call>"))
        assert not out.valid and out.calls == ()
        assert out.messages[0].content.startswith("error: malformed JSON in <tool_call>")

    async def test_parse_error_beside_a_good_call_is_reported(self) -> None:
        text = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>' \
               "<tool_call>{oops</tool_call>"
        out = await box().run(Message("assistant", text))
        assert not out.valid
        assert out.messages[0].content == "3" and out.messages[0].role == "tool"
        assert out.messages[1].role == "user"
        assert out.messages[1].content.startswith("error: malformed JSON in <tool_call>")

    async def test_structured_calls_win_over_text(self) -> None:
        msg = Message("assistant", '<tool_call>{"name": "boom"}</tool_call>',
                      tool_calls=(ToolCall("c9", "add", {"a": 1, "b": 1}),))
        out = await box().run(msg)
        assert out.valid and out.messages[0].content == "2"

    async def test_arguments_that_are_not_an_object(self) -> None:
        msg = Message("assistant", "", tool_calls=(ToolCall("c", "add", '{"a": 1}'),))  # type: ignore[arg-type]
        out = await box().run(msg)
        assert not out.valid
        assert out.messages[0].content == "error: the arguments of add must be a JSON object, " \
                                          "got str"

    async def test_action_format(self) -> None:
        out = await box().run(Message("assistant", "<action>add(a=2, b=5)</action>"))
        assert out.valid and out.messages[0].content == "7"


# -- fuzz: ToolBox.run never raises --------------------------------------------------------
FRAGMENTS = ["<tool_call>", "</tool_call>", "<action>", "</action>", "{", "}", "[", "]", "(",
             ")", "=", ":", ",", '"', '"name"', '"arguments"', '"parameters"', '"add"',
             '"fetch"', '"huge"', '"boom"', "add", "huge", '"a"', '"b"', '"n"', "null", "true",
             "1", "-2", "1e400", "0.5", " ", "\n", "\x00", "\udcff", "a=1", "n=3"]
fuzz_text = st.one_of(st.text(), st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=3),
                                          max_size=40).map("".join))


@settings(max_examples=300, deadline=None)
@given(text=fuzz_text)
def test_fuzz_toolbox_run_never_raises(text: str) -> None:
    tb = ToolBox([add, fetch, huge, boom], max_output_chars=200)
    out = asyncio.run(tb.run(Message("assistant", text)))
    assert len(out.messages) >= 1
    assert all(isinstance(m.content, str) for m in out.messages)
    assert all(len(m.content) < 2_000 for m in out.messages if m.role == "tool")
    assert isinstance(out.valid, bool)
    assert len(out.results) == len(out.calls)
