"""Scripts of model replies for the differential check: BFCL's ground truth and perturbations.

A script is the sequence of replies a scripted model gives: each reply is a tuple of calls
``(name, arguments)`` or a text (which, in multi turn, ends the user turn). The ground truth
comes straight from BFCL's ``possible_answer`` files, parsed here with Python's ``ast`` and the
API classes' own signatures (not through the env's expert, so that a fault there shows).

Perturbations are chosen to land on both sides of BFCL's verdict: some break the answer (a
call dropped, an argument changed, a turn skipped), some leave it right (calls split over
steps, an extra call BFCL ignores, parallel calls reordered, another accepted value), and
some probe the inference loop's edges (more steps in a turn than BFCL's limit, in the last
turn and in an earlier one). Which is which is for BFCL to say; the check only asks that the
env says the same.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import inspect
import json
import random
from collections.abc import Mapping
from typing import Any

from agentgym.envs.bfcl import scoring
from agentgym.envs.bfcl.data import BFCLTask

Call = tuple[str, dict[str, Any]]
Reply = tuple[Call, ...] | str
Script = tuple[Reply, ...]
END = "Done."
UNKNOWN: Call = ("lookup_everything", {"query": "status"})
"""A call to a function no entry has: BFCL answers ``name ... is not defined``, state unchanged."""
PAD_STEPS = 22
"""Tool-calling replies past the gold calls in a padded turn: beyond BFCL's 20-step limit."""


@functools.cache
def _method_params(class_name: str, method: str) -> tuple[str, ...]:
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    cls = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)
    fn = getattr(cls, method, None)
    return tuple(inspect.signature(fn).parameters)[1:] if fn is not None else ()


def parse_call(text: str, classes: list[str]) -> Call:
    """A ground-truth call string (``sort('a.pdf')``) as a name and named arguments."""
    node = ast.parse(text.strip(), mode="eval").body
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name), text
    name = node.func.id
    params = next((p for c in classes if (p := _method_params(c, name))), ())
    args = {params[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
    args.update({k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg})
    return name, json.loads(json.dumps(args))  # as a function-calling model can send them


def changed(value: Any) -> Any:
    """A different value of the same JSON type."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 1.5 + 1.0
    if isinstance(value, str):
        return value + "_x"
    if isinstance(value, list):
        return value[:-1] if value else ["x"]
    if isinstance(value, dict):
        return {**value, "unexpected_key": "x"}
    return "x"


def _with_arg(call: Call, key: str, value: Any) -> Call:
    return call[0], {**copy.deepcopy(call[1]), key: value}


def scripts_for(task: BFCLTask, rng: random.Random) -> list[tuple[str, Script]]:
    """Every script kind that applies to ``task``: ``[(kind, script)]``, gold first."""
    if task.category.kind == "multi_turn":
        return multi_turn_scripts(task, rng)
    return single_turn_scripts(task, rng)


# -- multi turn ----------------------------------------------------------------------------

def gold_turns(task: BFCLTask) -> list[list[Call]]:
    """BFCL's ground truth of a multi-turn entry: per turn, its calls."""
    classes = list(task.entry["involved_classes"])
    return [[parse_call(c, classes) for c in turn] for turn in task.ground_truth]


def play(turns: list[list[Call]], steps: list[list[list[Call]]] | None = None) -> Script:
    """Replies making each turn's calls, then ending the turn with a text.

    Each turn's calls go in one reply, or in the replies ``steps`` splits them into.
    """
    out: list[Reply] = []
    for i, calls in enumerate(turns):
        for step in (steps[i] if steps is not None else [calls] if calls else []):
            out.append(tuple(step))
        out.append(END)
    return tuple(out)


def _chunks(calls: list[Call], rng: random.Random) -> list[list[Call]]:
    out, i = [], 0
    while i < len(calls):
        n = rng.randint(1, 3)
        out.append(calls[i:i + n])
        i += n
    return out


def multi_turn_scripts(task: BFCLTask, rng: random.Random) -> list[tuple[str, Script]]:
    """Gold, re-stepped gold, broken, harmlessly changed and over-long versions of an entry."""
    turns = gold_turns(task)
    busy = [i for i, t in enumerate(turns) if t]
    out: list[tuple[str, Script]] = [
        ("gold", play(turns)),
        ("per_call", play(turns, [[[c] for c in t] for t in turns])),
        ("chunks", play(turns, [_chunks(t, rng) for t in turns])),
    ]
    if not busy:
        return out
    t = rng.choice(busy)
    k = rng.randrange(len(turns[t]))

    def edit(new_turn: list[Call], at: int = t) -> list[list[Call]]:
        return [*turns[:at], new_turn, *turns[at + 1:]]

    out.append(("drop", play(edit(turns[t][:k] + turns[t][k + 1:]))))
    call = turns[t][k]
    if call[1]:
        key = rng.choice(sorted(call[1]))
        out.append(("change", play(edit([*turns[t][:k], _with_arg(call, key, changed(
            call[1][key])), *turns[t][k + 1:]]))))
    out.append(("duplicate", play(edit([*turns[t][:k + 1], call, *turns[t][k + 1:]]))))
    if len(turns[t]) >= 2:
        j = rng.randrange(len(turns[t]) - 1)
        swapped = list(turns[t])
        swapped[j], swapped[j + 1] = swapped[j + 1], swapped[j]
        out.append(("swap", play(edit(swapped))))
    out.append(("unknown", play(edit([*turns[t][:k], UNKNOWN, *turns[t][k:]]))))
    out.append(("skip", play(edit([]))))
    if t + 1 < len(turns):  # the turn's last call made at the start of the next turn instead
        moved = edit(turns[t][:-1])
        moved[t + 1] = [turns[t][-1], *turns[t + 1]]
        out.append(("move", play(moved)))
    out.append(("pad_last", _padded(turns, len(turns) - 1)))
    if len(turns) > 1:
        out.append(("pad_first", _padded(turns, 0)))
    return out


def _padded(turns: list[list[Call]], at: int) -> Script:
    """Gold, but turn ``at`` goes on calling an unknown function past BFCL's step limit.

    BFCL's inference loop force-quits the entry there.
    """
    steps = [[t] if t else [] for t in turns]
    steps[at] = steps[at] + [[UNKNOWN]] * PAD_STEPS
    return play(turns, steps)


# -- single turn ---------------------------------------------------------------------------

def _gold_single(task: BFCLTask) -> list[Call]:
    return [(c.name, dict(c.arguments)) for c in scoring.gold_single(task)]


def _placeholder_call(task: BFCLTask) -> Call:
    """A call of the entry's first function with its required parameters filled in.

    A made-up function for the entries that offer none.
    """
    if not task.entry["function"]:
        return UNKNOWN
    doc = task.entry["function"][0]
    props = doc["parameters"].get("properties", {})
    kinds = {"integer": 1, "float": 1.0, "number": 1.0, "boolean": True, "array": [],
             "tuple": [], "dict": {}}
    args = {p: props.get(p, {}).get("default", kinds.get(str(props.get(p, {}).get("type")),
                                                          "example"))
            for p in doc["parameters"].get("required", [])}
    return scoring.served_name(doc["name"]), args


def single_turn_scripts(task: BFCLTask, rng: random.Random) -> list[tuple[str, Script]]:
    """Gold and perturbed single replies (one reply each)."""
    if task.category.kind == "irrelevance":
        return [("gold", (END,)), ("call", ((_placeholder_call(task),),))]
    if task.category.kind == "relevance":
        return [("gold", (tuple(_gold_single(task)),)), ("text", (END,))]
    gold = _gold_single(task)
    out: list[tuple[str, Script]] = [("gold", (tuple(gold),)), ("text", (END,))]
    if len(gold) > 1:
        out.append(("drop", (tuple(gold[:-1]),)))
        out.append(("swap", (tuple(reversed(gold)),)))
    k = rng.randrange(len(gold))
    name, args = gold[k]

    def edit(call: Call) -> Script:
        return (tuple([*gold[:k], call, *gold[k + 1:]]),)

    out.append(("duplicate", (tuple([*gold[:k + 1], gold[k], *gold[k + 1:]]),)))
    out.append(("extra_param", edit(_with_arg(gold[k], "unexpected_param", 1))))
    if args:
        key = rng.choice(sorted(args))
        out.append(("change", edit(_with_arg(gold[k], key, changed(args[key])))))
        value = args[key]
        wrong = str(value) if isinstance(value, int | float) and not isinstance(
            value, bool) else 7 if isinstance(value, str) else None
        if wrong is not None:
            out.append(("wrong_type", edit(_with_arg(gold[k], key, wrong))))
    alternative = _alternative(gold, task.ground_truth)
    if alternative is not None:
        out.append(("alternative", (tuple(alternative),)))
    optional = _without_optional(gold, task)
    if optional is not None:
        out.append(("drop_optional", (tuple(optional),)))
    return out


def _alternative(gold: list[Call], answers: list[Mapping[str, Any]]) -> list[Call] | None:
    """Gold with one argument set to another value the possible answer lists."""
    for i, (call, answer) in enumerate(zip(gold, answers, strict=False)):
        (_, params), = answer.items()
        for key, options in sorted(params.items()):
            others = [o for o in options if o != "" and o != call[1].get(key)]
            if key in call[1] and others:
                return [*gold[:i], _with_arg(call, key, others[0]), *gold[i + 1:]]
    return None


def _without_optional(gold: list[Call], task: BFCLTask) -> list[Call] | None:
    """Gold without one parameter the function doc does not require.

    BFCL accepts that when its possible answer lists ``""`` for the parameter.
    """
    docs = {scoring.served_name(f["name"]): f for f in task.entry["function"]}
    for i, (name, args) in enumerate(gold):
        required = set(docs.get(name, {}).get("parameters", {}).get("required", []))
        for key in sorted(args):
            if key not in required:
                return [*gold[:i], (name, {k: v for k, v in args.items() if k != key}),
                        *gold[i + 1:]]
    return None
