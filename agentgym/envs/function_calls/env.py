"""FunctionCalls: generated single-turn function-calling tasks, scored by BFCL's own checker.

Registered as ``agentgym/FunctionCalls-v0``. Each task offers function docs from agentgym's
own library (:mod:`.library`, none from BFCL's data) and one user request; the model replies
once with the calls the request asks for, or with prose when no offered function fits. The
kinds mirror BFCL's non-live AST categories:

- ``simple``: one function offered, one call (scored as BFCL's ``simple_python``);
- ``multiple``: 2-4 functions offered, one call to the right one;
- ``parallel``: one function, 2-4 calls from one request ("... in Oslo and Lima");
- ``parallel_multiple``: 2-4 functions, 2-4 calls to at least two of them;
- ``irrelevance``: no offered function fits (a request for another function of the same
  topic or of another, or a question no function serves); the right reply makes no call.

``kind="mixed"`` (the default) draws the kind in the proportions of BFCL's non-live AST
categories (400 : 200 : 200 : 200 : 240 entries). Ground truth is written in BFCL's
possible-answer shape (``{function: {param: [accepted values]}}``; an optional argument the
request does not give accepts ``""`` and its default).

Everything after the task is BFCL's single-turn env's own code: :class:`FunctionCallsEnv`
subclasses :class:`~agentgym.envs.bfcl.BFCLSingleTurnEnv` and only chooses the task. The
docs get the hint BFCL's loader adds to its own ("Note that the provided function is in
Python 3 syntax.", by BFCL's ``add_language_specific_hint_to_function_doc``), the tools are
BFCL's function-calling form of them (``scoring.tool_specs``), the prompt is the request as
BFCL's FC mode sends it, replies are read and checked the same way, and the reward is BFCL's
``ast_checker`` (irrelevance: 1.0 when the reply holds no call). A model trained here
therefore reads prompts in the form ``bfcl/SingleTurn-v0`` evaluates it on.

Splits: a task belongs to ``test`` when a hash of its request text falls in a fixed 20% of
buckets, else to ``train``; each split draws until the task is its own, so no request text
is in both. Tasks are deterministic per ``(split, kind, seed)``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from agentgym.envs.bfcl import BFCLSingleTurnEnv
from agentgym.envs.bfcl.data import CATEGORIES, BFCLTask, bfcl_modules
from agentgym.envs.function_calls import phrasing, synth
from agentgym.envs.function_calls.library import FUNCTIONS, OFF_TOPIC
from agentgym.envs.function_calls.spec import NO_DEFAULT, Function, fields, join_words
from agentgym.errors import ConfigError, did_you_mean

KINDS = ("simple", "multiple", "parallel", "parallel_multiple", "irrelevance")
BFCL_COUNTS = {"simple": 400, "multiple": 200, "parallel": 200, "parallel_multiple": 200,
               "irrelevance": 240}
"""Entries per non-live AST category in BFCL (``bfcl-eval`` 2026.3.23): the ``mixed`` weights."""
CATEGORY = {"simple": "simple_python", "multiple": "multiple", "parallel": "parallel",
            "parallel_multiple": "parallel_multiple", "irrelevance": "irrelevance"}
"""The BFCL category each kind is scored as (it picks the checker: one call, any order...)."""
KIND_OF = {c: k for k, c in CATEGORY.items()}
SPLITS = ("train", "test")
FUNCTION_SOURCES = ("curated", "synthesized", "both")
REQUEST_STYLES = ("plain", "varied")
TEST_PERCENT = 20
"""Share of request-text hash buckets that belong to the ``test`` split."""
OFF_TOPIC_SHARE = 0.3
"""Share of irrelevance tasks that ask a general question rather than for another function."""
NEAR_MISS_SHARE = 0.5
"""Share of the other irrelevance tasks that offer a function of the request's own topic (a
near miss: a forecast asked for, only current conditions offered), as BFCL's often do."""
_STREAM = {name: i for i, name in enumerate(("train", "test", "mixed", *KINDS))}
_TRIES = 200  # draws before a generator gives up (a library mistake, not bad luck)


@dataclass(frozen=True)
class Call:
    """One generated call: the request sentence and BFCL's possible answer for it."""

    function: Function
    request: str
    answer: dict[str, list[Any]]

    def key(self) -> str:
        """The call's identity: its name and the arguments it must give.

        Two calls of one task never share it, so no request asks for the same call twice.
        """
        must = {p: a[0] for p, a in self.answer.items() if "" not in a}
        return json.dumps([self.function.name, must], sort_keys=True)


def _draw(fn: Function, rng: np.random.Generator, names: Sequence[str],
          fixed: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Values for the required parameters and ``names``, satisfying ``fn.valid``."""
    for _ in range(_TRIES):
        values = dict(fixed or {})
        for p in fn.params:
            if p.name not in values and (p.required or p.name in names):
                values[p.name] = p.sample(rng)
        if fn.valid is None or fn.valid(values):
            return values
    raise RuntimeError(f"{fn.name}: no valid arguments in {_TRIES} draws")


def _answer(fn: Function, values: Mapping[str, Any]) -> dict[str, list[Any]]:
    return {p.name: p.accepted(values.get(p.name, NO_DEFAULT)) for p in fn.params}


def one_call(fn: Function, rng: np.random.Generator, varied: bool = False) -> Call:
    """A request for one call to ``fn``, from one of its templates.

    ``varied`` (:mod:`.phrasing`): the request may also state optional arguments its template
    leaves out, which the call must then give.
    """
    template = fn.templates[int(rng.integers(len(fn.templates)))]
    names = fields(template)
    extra = phrasing.extra_optionals(fn, names, rng) if varied else []
    values = _draw(fn, rng, names + extra)
    text = template.format(**{n: fn.param(n).text(values[n]) for n in names})
    text = phrasing.state(text, [(fn.param(n), values[n]) for n in extra], rng)
    return Call(fn, text, _answer(fn, values))


def fan_calls(fn: Function, rng: np.random.Generator, count: int) -> tuple[str, list[Call]]:
    """One request for ``count`` calls to ``fn`` from a fanout template (one value each)."""
    template = fn.fanout[int(rng.integers(len(fn.fanout)))]
    names = fields(template)
    star = next(n for n in names if n.endswith("*"))[:-1]
    shared = _draw(fn, rng, [n for n in names if n != star + "*"])
    varied: list[Any] = []
    for _ in range(_TRIES):
        if len(varied) == count:
            break
        value = fn.param(star).sample(rng)
        if value not in varied and (fn.valid is None or fn.valid({**shared, star: value})):
            varied.append(value)
    if len(varied) < count:
        raise RuntimeError(f"{fn.name}: fewer than {count} distinct {star} values")
    texts = {n: fn.param(n).text(shared[n]) for n in names if n != star + "*"}
    texts[star + "*"] = join_words([fn.param(star).text(v) for v in varied])
    calls = [Call(fn, "", _answer(fn, {**shared, star: v})) for v in varied]
    return template.format(**texts), calls


def join_requests(requests: Sequence[str], rng: np.random.Generator) -> str:
    """Several requests as one message: a numbered list, or sentences linked by a word."""
    style = int(rng.integers(3))
    if style == 0:
        lines = "\n".join(f"{i + 1}. {r}" for i, r in enumerate(requests))
        return f"I have {len(requests)} things to ask:\n{lines}"
    link = ("Also,", "Then", "And") if style == 1 else ("After that,", "Additionally,", "Next,")
    out = requests[0]
    for r in requests[1:]:
        out += f" {link[int(rng.integers(len(link)))]} {phrasing.lower_first(r)}"
    return out


def distinct_calls(fns: Sequence[Function], rng: np.random.Generator,
                   varied: bool = False) -> list[Call]:
    """One call per function in ``fns``, no two alike."""
    calls: list[Call] = []
    for fn in fns:
        for _ in range(_TRIES):
            call = one_call(fn, rng, varied)
            if all(call.key() != c.key() and call.request != c.request for c in calls):
                calls.append(call)
                break
        else:
            raise RuntimeError(f"{fn.name}: no new call in {_TRIES} draws")
    return calls


def _same_job(a: Function, b: Function) -> bool:
    return synth.job(a) == synth.job(b)


def _functions(rng: np.random.Generator, count: int, pool: Sequence[Function]
               ) -> list[Function]:
    """``count`` functions of ``pool`` that do different jobs.

    A clash is drawn again; the curated library (one function a job) never has one, so its
    tasks draw as they always did.
    """
    for _ in range(_TRIES):
        fns = [pool[int(i)] for i in rng.choice(len(pool), count, replace=False)]
        if all(not _same_job(a, b) for i, a in enumerate(fns) for b in fns[:i]):
            return fns
    raise RuntimeError(f"no {count} functions of different jobs in {_TRIES} draws")


def _distractors(rng: np.random.Generator, fns: Sequence[Function], count: int,
                 pool: Sequence[Function]) -> list[Function]:
    """``count`` other functions, often of the same area as ``fns[0]`` (harder to tell apart)."""
    others = [f for f in pool if not any(_same_job(f, g) for g in fns)]
    near = [f for f in others if synth.area(f) == synth.area(fns[0])]
    far = [f for f in others if synth.area(f) != synth.area(fns[0])]
    rng.shuffle(near)  # type: ignore[arg-type]
    rng.shuffle(far)  # type: ignore[arg-type]
    order = near + far if rng.random() < 0.5 else far
    return order[:count]


def _weighted(rng: np.random.Generator, weights: Mapping[Any, int]) -> Any:
    keys = list(weights)
    p = np.array([weights[k] for k in keys], dtype=float)
    return keys[int(rng.choice(len(keys), p=p / p.sum()))]


def _join(requests: Sequence[str], rng: np.random.Generator, varied: bool) -> str:
    if varied and rng.random() < 0.5:
        return phrasing.enumerate_asks(requests, rng)
    return join_requests(requests, rng)


def _parts(fns: Sequence[Function], rng: np.random.Generator, varied: bool
           ) -> list[tuple[str, list[Call]]]:
    """Request parts, each with its calls, for one call per entry of ``fns`` (may repeat).

    Plain: one sentence a call. Varied: a repeated function with fanout templates is asked
    for in one sentence half the time ("... in Oslo and Lima"), as people combine asks.
    """
    if not varied:
        return [(c.request, [c]) for c in distinct_calls(fns, rng)]
    parts: list[tuple[str, list[Call]]] = []
    for fn in dict.fromkeys(fns):
        count = fns.count(fn)
        if count > 1 and fn.fanout and rng.random() < 0.5:
            parts.append(fan_calls(fn, rng, count))
        else:
            parts += [(c.request, [c]) for c in distinct_calls([fn] * count, rng, varied)]
    return parts


def _generate(kind: str, rng: np.random.Generator, pool: Sequence[Function],
              varied: bool = False) -> tuple[str, list[Function], list[Call]]:
    """Request text, offered functions (in offer order) and the calls it asks for.

    Every function comes from ``pool`` (the curated library or a synthesized split's);
    ``varied`` writes requests as :mod:`.phrasing` does.
    """
    def say(text: str) -> str:  # a single request, sometimes with a greeting or thanks
        return phrasing.courteous(text, rng) if varied else text

    if kind == "simple":
        (fn,) = _functions(rng, 1, pool)
        (call,) = distinct_calls([fn], rng, varied)
        return say(call.request), [fn], [call]
    if kind == "multiple":
        (fn,) = _functions(rng, 1, pool)
        (call,) = distinct_calls([fn], rng, varied)
        offered = [fn, *_distractors(rng, [fn], _weighted(rng, {1: 79, 2: 85, 3: 36}), pool)]
        return (say(call.request), [offered[int(i)] for i in rng.permutation(len(offered))],
                [call])
    if kind == "parallel":
        count = _weighted(rng, {2: 110, 3: 52, 4: 38})
        fans = [f for f in pool if f.fanout]
        if rng.random() < 0.5:
            (fn,) = _functions(rng, 1, fans)
            text, calls = fan_calls(fn, rng, count)
            return say(text), [fn], calls
        (fn,) = _functions(rng, 1, pool)
        calls = distinct_calls([fn] * count, rng, varied)
        return _join([c.request for c in calls], rng, varied), [fn], calls
    if kind == "parallel_multiple":
        offer = _weighted(rng, {2: 100, 3: 80, 4: 20})
        count = _weighted(rng, {2: 64, 3: 66, 4: 70})
        used = _functions(rng, int(rng.integers(2, min(offer, count) + 1)), pool)
        extra = [used[int(i)] for i in rng.integers(len(used), size=count - len(used))]
        parts = _parts(used + extra, rng, varied)
        parts = [parts[int(i)] for i in rng.permutation(len(parts))]
        offered = used + _distractors(rng, used, offer - len(used), pool)
        return (_join([text for text, _ in parts], rng, varied),
                [offered[int(i)] for i in rng.permutation(len(offered))],
                [c for _, calls in parts for c in calls])
    if kind == "irrelevance":
        count = 1 if rng.random() < 0.8 else 2
        if rng.random() < OFF_TOPIC_SHARE:
            template, topics = OFF_TOPIC[int(rng.integers(len(OFF_TOPIC)))]
            return (say(template.format(x=topics[int(rng.integers(len(topics)))])),
                    _functions(rng, count, pool), [])
        (fn,) = _functions(rng, 1, pool)
        (call,) = distinct_calls([fn], rng, varied)
        near = [f for f in pool if synth.area(f) == synth.area(fn) and not _same_job(f, fn)]
        offer = near if near and rng.random() < NEAR_MISS_SHARE else [
            f for f in pool if synth.area(f) != synth.area(fn)]
        return (say(call.request),
                _functions(rng, min(count, len(set(map(synth.job, offer)))), offer), [])
    raise AssertionError(kind)


def in_split(text: str, split: str) -> bool:
    """Whether a task with this request text belongs to ``split`` (a fixed hash partition)."""
    bucket = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) % 100
    return (bucket < TEST_PERCENT) == (split == "test")


def make_task(split: str, seed: int, kind: str = "mixed", functions: str = "curated",
              requests: str = "plain") -> BFCLTask:
    """The task of ``seed`` in ``split``, as a BFCL single-turn entry with its ground truth.

    Args:
        split: ``"train"`` or ``"test"``.
        seed: Any non-negative integer.
        kind: One of :data:`KINDS`, or ``"mixed"`` (BFCL's proportions).
        functions: Where the offered functions come from: ``"curated"`` (the library),
            ``"synthesized"`` (:mod:`.synth`: split by subject, so test tasks offer functions
            about subjects training never saw) or ``"both"`` (each task one or the other,
            half and half).
        requests: ``"plain"`` (one templated sentence a call) or ``"varied"`` (greetings,
            optional arguments stated, asks combined and enumerated; :mod:`.phrasing`).

    Raises:
        ConfigError: Unknown split, kind, functions or requests.

    Example:
        >>> task = make_task("train", 0, "simple")
        >>> task.category.name, len(task.entry["function"]), len(task.ground_truth)
        ('simple_python', 1, 1)
    """
    check_args(kind, split, functions, requests)
    rng = np.random.default_rng([_STREAM[split], _STREAM[kind], seed])
    chosen = _weighted(rng, BFCL_COUNTS) if kind == "mixed" else kind
    # the curated stream draws nothing more, so its tasks stay what they were
    synthesized = functions == "synthesized" or (functions == "both" and rng.random() < 0.5)
    pool = synth.pool(split) if synthesized else FUNCTIONS
    for _ in range(_TRIES):
        text, offered, calls = _generate(chosen, rng, pool, requests == "varied")
        if in_split(text, split):
            break
    else:
        raise RuntimeError(f"no {split} task in {_TRIES} draws")
    task_id = f"{kind}-{split}-{seed}" if functions == "curated" else (
        f"{functions}-{kind}-{split}-{seed}")
    if requests != "plain":
        task_id = f"{requests}-{task_id}"
    entry = {"id": task_id, "question": [[{"role": "user", "content": text}]],
             "function": [f.doc() for f in offered]}
    # what BFCL's loader does to each of its entries: the Python hint after every description
    bfcl_modules().add_language_specific_hint_to_function_doc([entry])
    truth = None if chosen == "irrelevance" else [{c.function.name: c.answer} for c in calls]
    return BFCLTask(task_id, CATEGORIES[CATEGORY[chosen]], entry, truth)


def check_args(kind: str, split: str, functions: str = "curated", requests: str = "plain"
               ) -> None:
    """Raise :class:`ConfigError` for an unknown kind, split, function source or style."""
    if kind not in ("mixed", *KINDS):
        raise ConfigError(f"kind must be 'mixed' or one of {KINDS}, got {kind!r}"
                          f"{did_you_mean(str(kind), ('mixed', *KINDS)) or ''}")
    if split not in SPLITS:
        raise ConfigError(f"split must be one of {SPLITS}, got {split!r}")
    if functions not in FUNCTION_SOURCES:
        raise ConfigError(f"functions must be one of {FUNCTION_SOURCES}, got {functions!r}"
                          f"{did_you_mean(str(functions), FUNCTION_SOURCES) or ''}")
    if requests not in REQUEST_STYLES:
        raise ConfigError(f"requests must be one of {REQUEST_STYLES}, got {requests!r}"
                          f"{did_you_mean(str(requests), REQUEST_STYLES) or ''}")


class FunctionCallsEnv(BFCLSingleTurnEnv):
    """Generated function-calling tasks, BFCL's single-turn env and checker (module docstring).

    Args:
        kind: ``"mixed"`` (BFCL's non-live AST proportions) or one of :data:`KINDS`.
        split: ``"train"`` or ``"test"`` (disjoint request texts).
        functions: ``"curated"`` (the 55-function library), ``"synthesized"`` (composed
            signatures, :mod:`.synth`) or ``"both"``; see :func:`make_task`.
        requests: ``"plain"`` or ``"varied"`` request phrasing; see :func:`make_task`.

    Raises:
        ConfigError: Unknown kind, split or functions; MissingExtraError without
            ``bfcl-eval``.

    Example:
        >>> import asyncio
        >>> env = FunctionCallsEnv(kind="parallel", split="test")
        >>> async def solve():
        ...     await env.reset(seed=7)
        ...     return (await env.step(env.expert_action())).reward
        >>> asyncio.run(solve())
        1.0
    """

    def __init__(self, kind: str = "mixed", split: Literal["train", "test"] = "train",
                 functions: Literal["curated", "synthesized", "both"] = "curated",
                 requests: Literal["plain", "varied"] = "plain") -> None:
        check_args(kind, split, functions, requests)
        # BFCL's env with a placeholder category: each reset sets the task's own
        super().__init__("simple_python", split)
        self.kind = kind
        self.functions = functions
        self.requests = requests

    def _pick_task(self, seed: int | None, options: Mapping[str, Any]) -> BFCLTask:
        """Generate the task of ``seed`` (a random one without a seed)."""
        index = seed if seed is not None else int(self.np_random.integers(1 << 30))
        self.task = make_task(self.split, index, self.kind, self.functions, self.requests)
        self.category = self.task.category
        return self.task

    def _info(self) -> dict[str, Any]:
        return {**super()._info(), "kind": KIND_OF[self.category.name], "split": self.split}
