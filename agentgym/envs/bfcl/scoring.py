"""The bridge to BFCL's own code: tool docs, call strings, the executor and the checkers.

Everything that decides a score runs in ``bfcl_eval``: ``ast_checker`` for the single-turn
categories, ``multi_turn_checker`` (state and response checks after every turn) for the
multi-turn ones, ``execute_multi_turn_func_call`` for running calls against the API classes,
``convert_to_tool`` / ``convert_to_function_call`` for the function-calling (FC) form of the
docs and calls. This module only adapts records and keeps episodes apart.

Two adaptations, both about how BFCL is wired rather than what it checks:

- ``ast_checker`` imports ``MODEL_CONFIG_MAPPING`` from BFCL's model registry, which imports
  every provider SDK (anthropic, cohere, mistralai, ...). The checker reads one flag of it,
  ``underscore_to_dot`` of the model being scored. We score as BFCL's OpenAI FC profile
  (``gpt-4o-2024-11-20-FC``: tools are served with ``.`` in names replaced by ``_``, as the
  OpenAI API requires), and give the checker a one-entry mapping with that flag while it is
  imported, instead of the SDKs. When the real registry is already imported it is used.
- BFCL's executor keeps the API instances of a run in its module globals, named after the
  model and the entry id. Every episode (and every scoring pass) uses its own name and
  removes its instances when done, so episodes of the same entry never share state.
- ``MathAPI`` sets process-wide numeric state: ``logarithm`` writes mpmath's global
  ``mp.dps`` and ``square_root`` the current ``decimal`` context's precision, which later
  episodes (and any other code in the process) would then compute with. Its module sees,
  in place of the ``mpmath`` module, a stand-in whose ``mp`` is a context of the calling
  thread's own, and every execution runs in a fresh ``decimal.localcontext()``; both are
  restored after each call. Results are the same digits (a fresh context has mpmath's
  defaults, and ``logarithm`` sets its precision before computing).
"""

from __future__ import annotations

import ast
import decimal
import functools
import importlib
import inspect
import json
import math
import re
import sys
import threading
import types
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from agentgym.envs.bfcl.data import BFCLTask, bfcl_modules
from agentgym.types import ToolCall, ToolSpec

SCORER_PROFILE = "gpt-4o-2024-11-20-FC"
"""The BFCL model profile the checkers score as (OpenAI function calling)."""
_CONFIG_MODULE = "bfcl_eval.constants.model_config"


@dataclass(frozen=True)
class Verdict:
    """A checker's verdict on one episode (or one turn).

    Attributes:
        passed: BFCL counts it as correct.
        error_type: BFCL's error type when it does not (``type_error:simple``,
            ``multi_turn:instance_state_mismatch``, ...).
        error: BFCL's error message(s), joined.
    """

    passed: bool
    error_type: str | None = None
    error: str | None = None

    def to_info(self) -> dict[str, Any]:
        """JSON-ready form for step infos."""
        return {"passed": self.passed, "error_type": self.error_type, "error": self.error}


_IMPORT_LOCK = threading.Lock()  # episodes run BFCL code in worker threads (see Executor)
MATH_MODULE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.math_api"


class ThreadMpmath:
    """What BFCL's ``math_api`` sees as ``mpmath``: the module, with ``mp`` per thread.

    ``MathAPI.logarithm`` does ``mpmath.mp.dps = precision`` and then ``mpmath.log(...)``;
    on the real module that precision is process-wide. Here ``mp`` (and every name mpmath
    binds to it, such as ``log``) is a context of the calling thread's own.
    """

    def __init__(self, module: Any) -> None:
        self.module = module
        self._local = threading.local()

    @property
    def mp(self) -> Any:
        """This thread's mpmath context (mpmath's defaults when first used)."""
        context = getattr(self._local, "mp", None)
        if context is None:
            context = self._local.mp = self.module.MPContext()
        return context

    def __getattr__(self, name: str) -> Any:
        context = self.mp
        return getattr(context, name) if hasattr(context, name) else getattr(self.module, name)


@contextmanager
def isolated_numerics() -> Iterator[None]:
    """Run BFCL code so that the numeric precision it sets goes no further than the block.

    The ``decimal`` context is a fresh copy for the block, and this thread's mpmath context
    (see :class:`ThreadMpmath`) gets its precision back afterwards.
    """
    mpmath = sys.modules[MATH_MODULE].mpmath
    context = mpmath.mp if isinstance(mpmath, ThreadMpmath) else None
    saved = context.prec if context is not None else None
    try:
        with decimal.localcontext():
            yield
    finally:
        if context is not None:
            context.prec = saved


@functools.cache
def bfcl() -> types.SimpleNamespace:
    """BFCL's functions this family uses, imported once."""
    with _IMPORT_LOCK:
        return _import_bfcl()


def _import_bfcl() -> types.SimpleNamespace:
    bfcl_modules()
    standin = _CONFIG_MODULE not in sys.modules
    if standin:  # see the module docstring: one flag instead of every provider SDK
        module = types.ModuleType(_CONFIG_MODULE)
        module.MODEL_CONFIG_MAPPING = {  # type: ignore[attr-defined]
            SCORER_PROFILE: types.SimpleNamespace(underscore_to_dot=True)}
        sys.modules[_CONFIG_MODULE] = module
    try:
        from bfcl_eval.constants.enums import Language, ModelStyle
        from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
        from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
        from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
        from bfcl_eval.model_handler.utils import convert_to_function_call, convert_to_tool
        from bfcl_eval.utils import is_empty_output, is_function_calling_format_output
    finally:
        if standin:  # the checker holds the mapping; leave the real module importable
            sys.modules.pop(_CONFIG_MODULE, None)
    math_api: Any = importlib.import_module(MATH_MODULE)  # its attributes are BFCL's, by name
    if not isinstance(math_api.mpmath, ThreadMpmath):  # see the module docstring
        math_api.mpmath = ThreadMpmath(math_api.mpmath)
    return types.SimpleNamespace(
        Language=Language, ModelStyle=ModelStyle, GORILLA_TO_OPENAPI=GORILLA_TO_OPENAPI,
        ast_checker=ast_checker, multi_turn_utils=multi_turn_utils,
        multi_turn_checker=multi_turn_checker, convert_to_function_call=convert_to_function_call,
        convert_to_tool=convert_to_tool, is_empty_output=is_empty_output,
        is_function_calling_format_output=is_function_calling_format_output)


def tool_specs(functions: Sequence[Mapping[str, Any]]) -> tuple[ToolSpec, ...]:
    """BFCL function docs as tools, in BFCL's OpenAI function-calling form."""
    b = bfcl()
    tools = b.convert_to_tool(list(functions), b.GORILLA_TO_OPENAPI,
                              b.ModelStyle.OPENAI_COMPLETIONS)
    return tuple(ToolSpec.from_dict(t) for t in tools)


def served_name(name: str) -> str:
    """The tool name a BFCL function is served under (``math.factorial`` -> ``math_factorial``)."""
    return re.sub(r"\.", "_", name)


# -- single turn ---------------------------------------------------------------------------

def score_single(task: BFCLTask, calls: list[dict[str, Any]] | None) -> Verdict:
    """BFCL's verdict on a single-turn answer.

    Args:
        task: The entry.
        calls: The model's calls as ``[{name: {param: value}}]``; ``None`` when BFCL's
            decoder would fail (no tool call in the reply, or arguments that are not JSON).
    """
    b = bfcl()
    kind = task.category.kind
    if kind in ("irrelevance", "relevance"):
        called = calls is not None and not b.is_empty_output(calls)
        if kind == "irrelevance":
            return Verdict(True) if not called else Verdict(
                False, "irrelevance_error:decoder_success",
                "Valid syntax. Successfully decode AST when it should not.")
        return Verdict(True) if called else Verdict(
            False, "relevance_error:decoder_failed",
            "Invalid syntax. Failed to decode AST when it should have.")
    if calls is None:
        return Verdict(False, "ast_decoder:decoder_failed",
                       "Invalid syntax. Failed to decode AST.")
    if not b.is_function_calling_format_output(calls):
        return Verdict(False, "ast_decoder:decoder_wrong_output_format",
                       "Did not output in the specified format.")
    try:
        result = b.ast_checker(task.entry["function"], calls, task.ground_truth,
                               b.Language.PYTHON, task.category.name, SCORER_PROFILE)
    except Exception as exc:  # values the checker cannot compare (it would crash BFCL too)
        return Verdict(False, "ast_checker:exception", f"{type(exc).__name__}: {exc}")
    if result["valid"]:
        return Verdict(True)
    return Verdict(False, result.get("error_type"), "; ".join(map(str, result.get("error", []))))


def _pick(options: Sequence[Any], spec: Mapping[str, Any], required: bool = False
          ) -> tuple[bool, Any]:
    """The first accepted value of a possible-answer list; (False, None) if it may be left out.

    ``""`` among the options means BFCL accepts the parameter's absence: then we leave it out
    (a value could be one the function doc does not even list), unless the doc requires it.
    """
    if "" in options and not required:
        return False, None
    for option in options:
        if option == "":
            continue
        kind = spec.get("type")
        if kind == "dict" and isinstance(option, Mapping):
            return True, _pick_dict(option, spec.get("properties", {}))
        items = spec.get("items") or {}
        if kind in ("array", "tuple") and items.get("type") == "dict" and isinstance(option, list):
            return True, [_pick_dict(d, items.get("properties", {})) for d in option]
        return True, option
    return False, None


def _pick_dict(answer: Mapping[str, Any], props: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for key, options in answer.items():
        present, value = _pick(options if isinstance(options, list) else [options],
                               props.get(key, {}))
        if present:
            out[key] = value
    return out


def gold_single(task: BFCLTask) -> tuple[ToolCall, ...]:
    """The ground-truth calls of a single-turn entry, as the model would send them.

    For relevance entries (BFCL ships no answer: any call is right) this calls the first
    function with its required parameters set from their defaults or simple placeholders.
    """
    docs = {f["name"]: f for f in task.entry["function"]}
    if task.category.kind == "irrelevance":
        return ()
    if task.category.kind == "relevance":
        doc = task.entry["function"][0]
        props = doc["parameters"].get("properties", {})
        args = {p: props.get(p, {}).get("default", _placeholder(props.get(p, {})))
                for p in doc["parameters"].get("required", [])}
        return (ToolCall("call_0", served_name(doc["name"]), args),)
    calls = []
    for i, call in enumerate(task.ground_truth):
        (name, params), = call.items()
        props = docs[name]["parameters"].get("properties", {})
        required = docs[name]["parameters"].get("required", [])
        args = {}
        for param, options in params.items():
            present, value = _pick(options, props.get(param, {}), param in required)
            if present:
                args[param] = value
        calls.append(ToolCall(f"call_{i}", served_name(name), args))
    return tuple(calls)


def _placeholder(spec: Mapping[str, Any]) -> Any:
    if spec.get("enum"):
        return spec["enum"][0]
    return {"integer": 1, "float": 1.0, "number": 1.0, "boolean": True, "array": [],
            "tuple": [], "dict": {}}.get(str(spec.get("type")), "example")


# -- multi turn ----------------------------------------------------------------------------

def is_json_value(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is plain JSON data (safe to write as a Python literal with repr)."""
    if depth > 50:
        return False
    if value is None or isinstance(value, bool | int | str):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list | tuple):
        return all(is_json_value(v, depth + 1) for v in value)
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and is_json_value(v, depth + 1) for k, v in value.items())
    return False


def call_string(name: str, arguments: Mapping[str, Any]) -> str:
    """A call in BFCL's executable form, ``name(param=value,...)``, via BFCL's converter."""
    return bfcl().convert_to_function_call([{name: dict(arguments)}])[0]


class Executor:
    """Live instances of an entry's API classes, driven by BFCL's executor.

    Every method runs BFCL code synchronously (the envs call them from a worker thread, so
    that a step timeout can fire meanwhile) under :func:`isolated_numerics`.

    Args:
        task: A multi-turn entry.
    """

    def __init__(self, task: BFCLTask) -> None:
        self.task = task
        self.long_context = "long_context" in task.category.name
        self._name = f"agentgym_{uuid.uuid4().hex}"
        _, self.instances = self._execute([], self._name)
        self.methods: dict[str, inspect.Signature] = {}
        for instance in self.instances.values():
            for name, method in inspect.getmembers(instance, inspect.ismethod):
                if not name.startswith("_"):
                    self.methods[name] = inspect.signature(method)

    def _execute(self, calls: list[str], name: str, eval_run: bool = False) -> Any:
        with isolated_numerics():
            return bfcl().multi_turn_utils.execute_multi_turn_func_call(
                calls, self.task.entry["initial_config"], self.task.entry["involved_classes"],
                name, self.task.id, long_context=self.long_context, is_evaL_run=eval_run)

    def run(self, calls: list[str]) -> list[str]:
        """Execute call strings against the live instances; BFCL's result strings, in order."""
        results, self.instances = self._execute(calls, self._name)
        return list(results)

    def check(self, turns: list[list[list[str]]]) -> Verdict:
        """BFCL's multi-turn checker on the first ``len(turns)`` turns.

        Args:
            turns: Per turn, per step, the executed call strings (steps without calls left
                out, as BFCL's decoder leaves them out).
        """
        name = f"agentgym_{uuid.uuid4().hex}"
        try:
            with isolated_numerics():  # the checker re-executes the calls
                result = bfcl().multi_turn_checker(turns, self.task.ground_truth[: len(turns)],
                                                   self.task.entry, self.task.category.name,
                                                   name)
        finally:
            _forget(name)
        if result["valid"]:
            return Verdict(True)
        return Verdict(False, result.get("error_type"), str(result.get("error_message")))

    def state(self) -> Any:
        """The instances' public state (what BFCL's state checker compares), as JSON data."""
        return {cls: _plain(vars(obj)) for cls, obj in sorted(self.instances.items())}

    def gold_call(self, call: str, call_id: str) -> ToolCall:
        """A ground-truth call string (``sort('a.pdf')``) as a tool call with named arguments."""
        node = ast.parse(call.strip(), mode="eval").body
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name), call
        name = node.func.id
        params = list(self.methods[name].parameters)
        args = {params[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
        args.update({k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg})
        return ToolCall(call_id, name, json.loads(json.dumps(args)))

    def close(self) -> None:
        """Drop this episode's instances from BFCL's executor."""
        _forget(self._name)


def _forget(name: str) -> None:
    namespace = vars(bfcl().multi_turn_utils)
    # list() copies the keys in one step: other episodes' worker threads add theirs meanwhile
    for key in [k for k in list(namespace) if k.startswith(name)]:
        namespace.pop(key, None)


STATE_NODES = 200_000
"""Most values :meth:`Executor.state` reads. Directories that share contents (``cp`` copies a
folder's entries by reference) can make the tree exponentially larger than the memory it
takes; past this many values the rest reads as ``"..."``, so ``state_key`` stays cheap."""


def _plain(value: Any, depth: int = 0, budget: list[int] | None = None) -> Any:
    """Public attributes as JSON data; objects become their public ``vars``; no back-links."""
    budget = [STATE_NODES] if budget is None else budget
    budget[0] -= 1
    if depth > 30 or budget[0] < 0:
        return "..."
    if isinstance(value, int) and value.bit_length() > 4_000:  # no decimal str() for these
        return hex(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v, depth + 1, budget) for k, v in value.items()
                if not str(k).startswith("_")}
    if isinstance(value, list | tuple | set | frozenset):
        items = [_plain(v, depth + 1, budget) for v in value]
        return sorted(items, key=repr) if isinstance(value, set | frozenset) else items
    if hasattr(value, "__dict__"):  # a File/Directory: its own fields, not its parent
        return {k: _plain(v, depth + 1, budget) for k, v in vars(value).items()
                if not k.startswith("_") and k != "parent"}
    return str(value)
