"""A pytest plugin the miner runs once per package: which source lines each test executes.

Copied into the package's container and loaded with ``-p agentgym_trace``. It traces the
files under ``$AGENTGYM_TRACE_ROOTS`` (comma-separated path prefixes) with ``sys.settrace``
from the moment pytest loads it, so lines run while modules are imported (collection) are
told apart from lines each test runs. At the end it writes ``$AGENTGYM_TRACE_OUT`` as JSON:
``{"tests": [node ids], "spawns": [test indices], "import": {file: [lines]},
"lines": {file: {line: [test indices]}}}``; ``spawns`` are the tests that started a
subprocess, whose lines the tracer cannot see.

A mutant inside a function can only change the outcome of a test that runs that function's
body (or of every test, when the body runs at import), so the miner runs just those tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

_ROOTS = tuple(r for r in os.environ.get("AGENTGYM_TRACE_ROOTS", "").split(",") if r)
_IMPORT: set[tuple[str, int]] = set()
_current: set[tuple[str, int]] = _IMPORT
_per_test: dict[str, set[tuple[str, int]]] = {}
_spawns: set[str] = set()
_test: str | None = None
_popen_init = subprocess.Popen.__init__


def _traced_popen_init(self: Any, *args: Any, **kwargs: Any) -> None:
    # Code run in a child process is invisible to the tracer: such a test may reach any line.
    if _test is not None:
        _spawns.add(_test)
    _popen_init(self, *args, **kwargs)


if _ROOTS:
    subprocess.Popen.__init__ = _traced_popen_init  # type: ignore[method-assign]


def _local(frame: Any, event: str, arg: Any) -> Any:
    if event == "line":
        _current.add((frame.f_code.co_filename, frame.f_lineno))
    return _local


def _global(frame: Any, event: str, arg: Any) -> Any:
    if frame.f_code.co_filename.startswith(_ROOTS):
        _current.add((frame.f_code.co_filename, frame.f_lineno))
        return _local
    return None


if _ROOTS:
    sys.settrace(_global)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Any:
    """Collect the lines of one test (setup, call and teardown)."""
    global _current, _test
    _current, _test = _per_test.setdefault(item.nodeid, set()), item.nodeid
    sys.settrace(_global)  # a test may have replaced or cleared the trace function
    try:
        yield
    finally:
        _current, _test = _IMPORT, None


def pytest_sessionfinish(session: Any) -> None:
    """Write the line map."""
    sys.settrace(None)
    tests = sorted(_per_test)
    index = {t: i for i, t in enumerate(tests)}
    lines: dict[str, dict[int, list[int]]] = {}
    for test, hits in _per_test.items():
        for path, line in hits:
            lines.setdefault(path, {}).setdefault(line, []).append(index[test])
    imported: dict[str, list[int]] = {}
    for path, line in _IMPORT:
        imported.setdefault(path, []).append(line)
    out = os.environ.get("AGENTGYM_TRACE_OUT")
    if out:
        with open(out, "w") as f:
            json.dump({"tests": tests, "spawns": sorted(index[t] for t in _spawns),
                       "import": {p: sorted(v) for p, v in imported.items()},
                       "lines": {p: {str(k): sorted(v) for k, v in d.items()}
                                 for p, d in lines.items()}}, f)
