"""Bug injection by program transformation: small, syntax-preserving edits to real source.

Every strategy walks a module's abstract syntax tree and proposes *text* edits at the exact
positions the parser reports, so the rest of the file (comments, formatting) is untouched
and the resulting diff is one or a few lines. Only code inside functions is mutated, so each
mutant belongs to a named function (the "function involved" of the task).

Strategies (each recorded on the task as ``strategy``):

- ``flip_comparison``: ``<`` ↔ ``>``, ``<=`` ↔ ``>=``, ``==`` ↔ ``!=``, ``is`` ↔ ``is not``,
  ``in`` ↔ ``not in``.
- ``off_by_one``: a bound moves by one: ``<`` ↔ ``<=``, ``>`` ↔ ``>=``, and an integer
  constant ``k`` in a slice, an index, a ``range(...)`` argument or a ``± k`` becomes ``k+1``.
- ``remove_statement``: a one-line assignment or call statement is deleted.
- ``remove_branch``: an ``if`` without ``else`` (at most five lines) is deleted.
- ``swap_arguments``: the first two positional arguments of a call change places.
- ``wrong_default``: a parameter default changes (``True`` ↔ ``False``, ``k`` → ``k+1``).
- ``change_operator``: ``+`` ↔ ``-``, ``*`` → ``//``, ``//`` → ``*``, ``and`` ↔ ``or``,
  ``+=`` ↔ ``-=``.
- ``invert_condition``: ``if c`` / ``while c`` / ``x if c else y`` become ``not (c)``, and
  ``not c`` becomes ``c``.

Equivalent mutants are deduplicated: two edits that give the same syntax tree (``ast.dump``,
which ignores formatting) count once, and an edit that leaves the tree unchanged is dropped.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

STRATEGIES = ("flip_comparison", "off_by_one", "remove_statement", "remove_branch",
              "swap_arguments", "wrong_default", "change_operator", "invert_condition")
MAX_BRANCH_LINES = 5
"""Longest ``if`` block ``remove_branch`` deletes (a small diff is the point)."""

_FLIP = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "==": "!=", "!=": "==",
         "is not": "is", "is": "is not", "not in": "in", "in": "not in"}
_BOUND = {"<": "<=", "<=": "<", ">": ">=", ">=": ">"}
_BINOP = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "//"),
          ast.FloorDiv: ("//", "*")}
_OP_RE = re.compile(r"is\s+not|not\s+in|<=|>=|==|!=|<|>|\bis\b|\bin\b")


@dataclass(frozen=True)
class Mutant:
    """One injected bug: replace ``source[start:end]`` of ``path`` with ``replacement``.

    Attributes:
        path: File, relative to the package root.
        strategy: One of :data:`STRATEGIES`.
        function: Qualified name of the function the edit is in (``Class.method``).
        line: First line of the edit (1-based).
        start: Character offset where the edit starts.
        end: Character offset where it ends.
        replacement: The new text.
        fingerprint: Hash of the mutated module's syntax tree (equal = equivalent mutant).
    """

    path: str
    strategy: str
    function: str
    line: int
    start: int
    end: int
    replacement: str
    fingerprint: str

    def apply(self, source: str) -> str:
        """``source`` with the edit made."""
        return source[:self.start] + self.replacement + source[self.end:]

    @property
    def key(self) -> str:
        """A short stable id (path, position, edit)."""
        text = f"{self.path}|{self.start}|{self.end}|{self.replacement}|{self.strategy}"
        return hashlib.sha256(text.encode()).hexdigest()[:10]


class _Offsets:
    """Maps the parser's (line, UTF-8 byte column) positions to character offsets."""

    def __init__(self, source: str) -> None:
        self.lines = source.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def at(self, line: int, col: int) -> int:
        text = self.lines[line - 1].encode("utf-8")[:col].decode("utf-8", "replace")
        return self.starts[line - 1] + len(text)

    def start(self, node: ast.AST) -> int:
        return self.at(node.lineno, node.col_offset)  # type: ignore[attr-defined]

    def end(self, node: ast.AST) -> int:
        return self.at(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]

    def line_span(self, node: ast.stmt) -> tuple[int, int]:
        """Offsets of the whole lines ``node`` occupies, newline included."""
        return self.starts[node.lineno - 1], self.starts[node.end_lineno]  # type: ignore[index]


Edit = tuple[str, ast.AST, int, int, str | None]  # strategy, node, start, end, replacement
"""A replacement of None is written by ``_finish`` from the source around the node."""


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function with its qualified name, outermost first, in source order."""
    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    yield name, child
                yield from walk(child, name + ".")
    yield from walk(tree, "")  # type: ignore[misc]


def _own_nodes(func: ast.AST) -> Iterator[ast.AST]:
    """Nodes of ``func``'s body, not those of functions or classes nested in it."""
    stack = list(reversed(func.body))  # type: ignore[attr-defined]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
                      | ast.Lambda):
            continue
        yield node
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _int(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _edits(func: ast.AST, src: str, off: _Offsets) -> Iterator[Edit]:
    """Every candidate edit inside ``func`` (see the module docstring)."""
    for default in (*func.args.defaults, *(d for d in func.args.kw_defaults if d)):  # type: ignore[attr-defined]
        if isinstance(default, ast.Constant) and isinstance(default.value, bool):
            yield "wrong_default", default, off.start(default), off.end(default), \
                str(not default.value)
        elif _int(default):
            yield "wrong_default", default, off.start(default), off.end(default), \
                str(default.value + 1)  # type: ignore[attr-defined]
    yield from _removals(func.body, src, off)  # type: ignore[attr-defined]
    for node in _own_nodes(func):
        yield from _node_edits(node, src, off)


def _node_edits(node: ast.AST, src: str, off: _Offsets) -> Iterator[Edit]:  # noqa: PLR0912
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        lo, hi = off.end(node.left), off.start(node.comparators[0])
        match = _OP_RE.search(src, lo, hi)
        if match:
            op = re.sub(r"\s+", " ", match.group())
            yield "flip_comparison", node, match.start(), match.end(), _FLIP[op]
            if op in _BOUND:
                yield "off_by_one", node, match.start(), match.end(), _BOUND[op]
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINOP:
        old, new = _BINOP[type(node.op)]
        lo, hi = off.end(node.left), off.start(node.right)
        at = src.find(old, lo, hi)
        if at >= 0 and (old != "*" or src[at:at + 2] != "**"):
            yield "change_operator", node, at, at + len(old), new
        if isinstance(node.op, ast.Add | ast.Sub) and _int(node.right):
            yield "off_by_one", node.right, off.start(node.right), off.end(node.right), \
                str(node.right.value + 1)  # type: ignore[attr-defined]
    elif isinstance(node, ast.BoolOp) and len(node.values) == 2:
        lo, hi = off.end(node.values[0]), off.start(node.values[1])
        old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        match = re.compile(rf"\b{old}\b").search(src, lo, hi)
        if match:
            yield "change_operator", node, match.start(), match.end(), new
    elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add | ast.Sub):
        old, new = ("+=", "-=") if isinstance(node.op, ast.Add) else ("-=", "+=")
        at = src.find(old, off.end(node.target), off.start(node.value))
        if at >= 0:
            yield "change_operator", node, at, at + 2, new
    elif isinstance(node, ast.Slice):
        for bound in (node.lower, node.upper):
            if bound is not None and _int(bound):
                yield "off_by_one", bound, off.start(bound), off.end(bound), \
                    str(bound.value + 1)  # type: ignore[attr-defined]
    elif isinstance(node, ast.Subscript) and _int(node.slice):
        s = node.slice
        yield "off_by_one", s, off.start(s), off.end(s), str(s.value + 1)  # type: ignore[attr-defined]
    elif isinstance(node, ast.Call):
        yield from _call_edits(node, off)
    if isinstance(node, ast.If | ast.While | ast.IfExp):
        yield from _condition_edits(node, off)
    if isinstance(node, ast.stmt) and hasattr(node, "body"):
        for field in ("body", "orelse", "finalbody"):  # whichever of them the statement has
            yield from _removals(getattr(node, field, []), src, off)


def _call_edits(node: ast.Call, off: _Offsets) -> Iterator[Edit]:
    args = node.args
    if (isinstance(node.func, ast.Name) and node.func.id == "range"):
        for arg in args:
            if _int(arg):
                yield "off_by_one", arg, off.start(arg), off.end(arg), \
                    str(arg.value + 1)  # type: ignore[attr-defined]
    if len(args) >= 2 and not any(isinstance(a, ast.Starred) for a in args[:2]):
        if args[0].lineno == args[1].end_lineno:  # one-line swaps keep the diff small
            # The text is built by _finish, which needs the source around the arguments.
            yield "swap_arguments", node, off.start(args[0]), off.end(args[1]), None


def _condition_edits(node: ast.If | ast.While | ast.IfExp, off: _Offsets) -> Iterator[Edit]:
    test = node.test
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        yield "invert_condition", test, off.start(test), off.end(test), None  # drop the not
    elif test.lineno == test.end_lineno:
        yield "invert_condition", test, off.start(test), off.end(test), ""  # add a not


def _removals(body: list[ast.stmt], src: str, off: _Offsets) -> Iterator[Edit]:
    if len(body) < 2:  # removing the only statement would need a ``pass``: not a small bug
        return
    for stmt in body:
        if stmt.lineno != stmt.end_lineno and not isinstance(stmt, ast.If):
            continue
        lo, hi = off.line_span(stmt)
        if src[lo:off.start(stmt)].strip():  # shares its line with other code (``a; b``)
            continue
        if isinstance(stmt, ast.Assign | ast.AugAssign | ast.AnnAssign) or (
                isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
            yield "remove_statement", stmt, lo, hi, ""
        elif (isinstance(stmt, ast.If) and not stmt.orelse
              and stmt.end_lineno - stmt.lineno < MAX_BRANCH_LINES):  # type: ignore[operator]
            yield "remove_branch", stmt, lo, hi, ""


def _finish(edit: Edit, src: str, off: _Offsets) -> str:
    """The replacement text of edits whose text depends on the source around them."""
    strategy, node, start, end, replacement = edit
    if replacement is not None and not (strategy == "invert_condition" and replacement == ""):
        return replacement
    if strategy == "swap_arguments":
        a, b = node.args[0], node.args[1]  # type: ignore[attr-defined]
        text = src[start:end]
        first, second = src[off.start(a):off.end(a)], src[off.start(b):off.end(b)]
        middle = text[len(first):len(text) - len(second)]
        return f"{second}{middle}{first}"
    if replacement is None:  # ``not c`` -> ``c``
        operand = node.operand  # type: ignore[attr-defined]
        return src[off.start(operand):off.end(operand)]
    text = src[start:end]
    simple = isinstance(node, ast.Name | ast.Attribute | ast.Call | ast.Subscript)
    return f"not {text}" if simple else f"not ({text})"


def body_spans(source: str) -> dict[str, tuple[int, int]]:
    """Qualified function name -> first and last line of its body.

    The ``def`` line is left out: it runs at import, the body only when the function is called.
    """
    return {name: (func.body[0].lineno, func.end_lineno or func.body[0].lineno)
            for name, func in _functions(ast.parse(source))}


def candidates(path: str, source: str) -> list[Mutant]:
    """Every candidate edit of one module, in source order, not yet checked.

    Checking means parsing the whole mutated module, which is costly for long modules, so
    it is left to :func:`realize` for the candidates a miner actually draws.

    Args:
        path: The module's path relative to the package root (recorded on each mutant).
        source: Its text.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    off = _Offsets(source)
    out: list[Mutant] = []
    for name, func in _functions(tree):
        for edit in _edits(func, source, off):
            strategy, _, start, end, _ = edit
            line = source.count("\n", 0, start) + 1
            out.append(Mutant(path, strategy, name, line, start, end,
                              _finish(edit, source, off), fingerprint=""))
    return out


def realize(mutant: Mutant, source: str, original: str | None = None) -> Mutant | None:
    """``mutant`` with its fingerprint, or None when it does not parse or changes nothing.

    Args:
        mutant: A candidate from :func:`candidates`.
        source: The module's text.
        original: ``ast.dump(ast.parse(source))``, when the caller has it already.
    """
    try:
        dumped = ast.dump(ast.parse(mutant.apply(source)))
    except SyntaxError:
        return None
    if dumped == (original if original is not None else ast.dump(ast.parse(source))):
        return None
    return replace(mutant, fingerprint=hashlib.sha256(dumped.encode()).hexdigest()[:16])


def mutants(path: str, source: str) -> list[Mutant]:
    """Every distinct, parsing mutant of one module (equivalent ones counted once)."""
    original = ast.dump(ast.parse(source))
    seen: set[str] = set()
    out = []
    for cand in candidates(path, source):
        got = realize(cand, source, original)
        if got is not None and got.fingerprint not in seen:
            seen.add(got.fingerprint)
            out.append(got)
    return out
