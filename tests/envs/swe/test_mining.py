"""Mining without Docker: the mutation strategies, the draw order, the issue text, the diffs,
the recipes, and the shipped mined tasks' bookkeeping (licences, splits, no leaked patches)."""

from __future__ import annotations

import ast
import subprocess
from collections import Counter

import pytest

from agentgym.envs.swe import SWEEnv
from agentgym.envs.swe.mining.issue import clean_traceback, write_issue
from agentgym.envs.swe.mining.mine import changed_lines, draw_order, unified_diff
from agentgym.envs.swe.mining.mutate import STRATEGIES, candidates, mutants, realize
from agentgym.envs.swe.mining.recipe import load_recipes
from agentgym.envs.swe.task import real_tasks
from agentgym.errors import ConfigError

SOURCE = '''\
X = 1 + 2  # module level: never mutated


def clamp(value, low=0, high=10, strict=False):
    """Clamp value into [low, high]."""
    if value < low:
        return low
    if value >= high and not strict:
        value = high
    total = value + 1
    total -= 1
    print(value, total)
    items = list(range(3))[1:]
    return pair(items[0], total) if strict else total


def pair(a, b):
    return (a, b)
'''

EXPECTED = {  # strategy -> one edit it must propose, as (old line, new line)
    "flip_comparison": ("    if value < low:", "    if value > low:"),
    "off_by_one": ("    if value < low:", "    if value <= low:"),
    "remove_statement": ("    print(value, total)", None),
    "remove_branch": ("        value = high", None),
    "swap_arguments": ("    print(value, total)", "    print(total, value)"),
    "wrong_default": ("def clamp(value, low=0, high=10, strict=False):",
                      "def clamp(value, low=0, high=10, strict=True):"),
    "change_operator": ("    total = value + 1", "    total = value - 1"),
    "invert_condition": ("    if value < low:", "    if not (value < low):"),
}


def _edits(strategy):
    out = []
    for m in mutants("m.py", SOURCE):
        if m.strategy == strategy:
            old = SOURCE.splitlines()
            new = m.apply(SOURCE).splitlines()
            out.append((old, new))
    return out


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_each_strategy_makes_its_edit(strategy):
    old_line, new_line = EXPECTED[strategy]
    found = False
    for old, new in _edits(strategy):
        gone = [x for x in old if x not in new]
        if new_line is None:
            found |= old_line in gone
        else:
            found |= old_line in gone and new_line in new
    assert found, f"{strategy} did not propose {old_line!r} -> {new_line!r}"


def test_mutants_parse_differ_and_stay_inside_functions():
    found = mutants("m.py", SOURCE)
    assert {m.strategy for m in found} == set(STRATEGIES)
    original = ast.dump(ast.parse(SOURCE))
    assert len({m.fingerprint for m in found}) == len(found)  # equivalent ones once
    for m in found:
        assert ast.dump(ast.parse(m.apply(SOURCE))) != original
        assert m.line > 2, "module-level code is never mutated"
        assert m.function in ("clamp", "pair")


def test_equivalent_and_no_op_edits_are_dropped():
    source = "def f(a):\n    return a if a else a\n"
    # Inverting the condition of ``a if a else a`` gives a different tree but swapping
    # nothing; the candidate list holds it once, and realize drops no-op edits.
    cands = candidates("f.py", source)
    noop = cands[0].__class__("f.py", "change_operator", "f", 2, 0, 0, "", "")
    assert realize(noop, source) is None
    assert len({m.fingerprint for m in mutants("f.py", source)}) == len(mutants("f.py", source))


def test_draw_order_is_seeded_and_round_robin():
    recipe = load_recipes().get("inflection")
    cands = candidates("m.py", SOURCE)
    first = list(draw_order(recipe, cands))
    assert first == list(draw_order(recipe, cands))
    assert sorted(first, key=id) == sorted(cands, key=id)
    present = [s for s in STRATEGIES if any(c.strategy == s for c in cands)]
    assert [m.strategy for m in first[:len(present)]] == present  # one of each first
    other = list(draw_order(type(recipe)(**{**recipe.__dict__, "seed": 1}), cands))
    assert other != first


def test_diffs_apply_both_ways(tmp_path):
    mutant = next(m for m in mutants("pkg/m.py", SOURCE) if m.strategy == "remove_branch")
    buggy = mutant.apply(SOURCE)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/m.py").write_text(SOURCE)
    subprocess.run(["git", "apply", "-"], input=unified_diff("pkg/m.py", SOURCE, buggy),
                   text=True, cwd=tmp_path, check=True)
    assert (tmp_path / "pkg/m.py").read_text() == buggy
    subprocess.run(["git", "apply", "-"], input=unified_diff("pkg/m.py", buggy, SOURCE),
                   text=True, cwd=tmp_path, check=True)
    assert (tmp_path / "pkg/m.py").read_text() == SOURCE
    gone = [x.strip() for x in SOURCE.splitlines() if x not in buggy.splitlines()]
    assert changed_lines(SOURCE, buggy) == gone and 1 < len(gone) <= 5


OUTPUT = """\
=================================== FAILURES ===================================
_________________________________ test_clamp __________________________________
tests/test_m.py:7: in test_clamp
    assert clamp(12) == 10
pkg/m.py:9: in clamp
    value = high - 1
E   assert 11 == 10
=========================== short test summary info ============================
FAILED tests/test_m.py::test_clamp - assert 11 == 10
"""


def test_issue_shows_the_evidence_but_not_the_change():
    changed = ["value = high", "value = high - 1"]
    lines, entry = clean_traceback(OUTPUT.splitlines()[2:7], changed)
    assert entry == "clamp"
    assert "pkg/m.py:9: in clamp" in lines and "    assert clamp(12) == 10" in lines
    text = write_issue(package="pkg", version="1.0", module="pkg.m", function="clamp",
                       failing=["tests/test_m.py::test_clamp"], output=OUTPUT,
                       changed=changed, instance_id="pkg-1.0__x")
    assert "`pkg.m.clamp`" in text and "tests/test_m.py::test_clamp" in text
    assert "E   assert 11 == 10" in text and "one test" in text
    assert "value = high" not in text


def test_issue_names_a_public_function_the_test_calls():
    output = OUTPUT.replace("pkg/m.py:9: in clamp\n    value = high - 1\n", "")
    text = write_issue(package="pkg", version="1.0", module="pkg.m", function="_helper",
                       failing=["tests/test_m.py::test_clamp"], output=output,
                       changed=["x"], instance_id="i", public={"clamp"})
    assert "`pkg.m.clamp`" in text and "_helper" not in text


@pytest.mark.parametrize("reply, used", [
    ("`clamp(12)` returns 11 instead of 10 and tests/test_m.py::test_clamp fails.", True),
    ("tests/test_m.py::test_clamp fails: `value = high - 1` in clamp.", False),  # the change
    ("`clamp(12)` returns 11 instead of 10.", False),  # lost the failing test
    ("   ", False),
])
async def test_rewrite_goes_over_http_and_never_leaks_the_change(reply, used):
    """The rewording comes from a real OpenAI-compatible HTTP server; one that quotes the
    changed code, drops the failing test or says nothing leaves the written issue as it was."""
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    from agentgym.envs.swe.mining.issue import rewrite_issue

    seen: list[dict] = []

    async def chat(request: web.Request) -> web.Response:
        seen.append(await request.json())
        return web.json_response({"choices": [{"index": 0, "finish_reason": "stop",
                                               "message": {"role": "assistant",
                                                           "content": reply}}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    text = write_issue(package="pkg", version="1.0", module="pkg.m", function="clamp",
                       failing=["tests/test_m.py::test_clamp"], output=OUTPUT,
                       changed=["value = high - 1"], instance_id="pkg-1.0__x")
    async with TestServer(app, host="127.0.0.1") as server:
        out = await rewrite_issue(text, base_url=str(server.make_url("/v1")), model="m",
                                  changed=["value = high - 1"],
                                  keep=["tests/test_m.py::test_clamp"])
    assert out == (reply.strip() + "\n" if used else text)
    assert seen[0]["model"] == "m" and text in seen[0]["messages"][0]["content"]


def test_recipe_lookup_names_the_fix():
    book = load_recipes()
    with pytest.raises(ConfigError, match="did you mean 'toolz'"):
        book.get("toolzz")
    with pytest.raises(ConfigError, match="not 0.1"):
        book.get("toolz==0.1")


# -- the shipped mined tasks ---------------------------------------------------------
REAL = real_tasks()
RECIPES = load_recipes()


def test_shipped_set_size_and_packages():
    per_package = Counter(t.instance_id.split("__")[0] for t in REAL)
    assert len(REAL) >= 300, per_package
    assert len(per_package) >= 10, per_package
    assert all(n >= 10 for n in per_package.values()), per_package


def test_every_task_matches_its_recipe_and_split_is_by_package():
    splits: dict[str, set[str]] = {}
    for task in REAL:
        recipe = RECIPES.by_image(task.image)
        assert recipe is not None, f"{task.instance_id}: no recipe builds {task.image}"
        assert recipe.license and task.split == recipe.split
        assert task.test_cmd == recipe.test_cmd() and dict(task.env) == recipe.env
        splits.setdefault(task.split, set()).add(recipe.name)
    assert splits["train"] and splits["test"] and not splits["train"] & splits["test"]


def test_issues_never_show_the_patch():
    for task in REAL:
        removed = [x[1:].strip() for x in task.patch.splitlines()
                   if x.startswith("-") and not x.startswith("---") and x[1:].strip()]
        for line in removed:  # the buggy code the fix removes
            assert line not in task.problem_statement, (task.instance_id, line)


def test_env_loads_the_mined_tasks():
    env = SWEEnv(tasks="real", split="test", sandbox="docker")
    assert env.tasks and {t.split for t in env.tasks} == {"test"}
    assert all(t.setup_patch and t.patch and t.image for t in env.tasks)


def test_trace_plugin_maps_lines_to_tests(tmp_path):
    """The miner's tracing plugin tells which test runs which line, and what runs at import."""
    import json
    import os
    import shutil
    import sys
    from pathlib import Path

    import agentgym.envs.swe.mining as mining
    from agentgym.envs.swe.mining.mine import LineMap

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/__init__.py").write_text(
        "def used():\n    return 1\n\n\ndef unused():\n    return 2\n\n\n"
        "def at_import():\n    return 3\n\n\nVALUE = at_import()\n")
    (tmp_path / "test_pkg.py").write_text(
        "import subprocess\nimport sys\n\nimport pkg\n\n\ndef test_used():\n"
        "    assert pkg.used() == 1\n\n\ndef test_value():\n    assert pkg.VALUE == 3\n\n\n"
        "def test_spawn():\n    subprocess.run([sys.executable, '-c', 'import pkg'], check=True)\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # the rootdir, so ids are relative
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    shutil.copy(Path(mining.__file__).parent / "trace_plugin.py", plugins / "agentgym_trace.py")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{plugins}",
           "AGENTGYM_TRACE_ROOTS": f"{tmp_path}/pkg", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
           "AGENTGYM_TRACE_OUT": str(tmp_path / "map.json")}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "agentgym_trace",
                    "-p", "no:cacheprovider", "test_pkg.py"], cwd=tmp_path, env=env,
                   check=True, capture_output=True)
    data = json.loads((tmp_path / "map.json").read_text())
    assert data["tests"] == ["test_pkg.py::test_spawn", "test_pkg.py::test_used",
                             "test_pkg.py::test_value"]
    assert data["spawns"] == [0]  # its child process is not traced: it may reach any line
    init = f"{tmp_path}/pkg/__init__.py"
    assert data["lines"][init]["2"] == [1]  # used() body: test_used only
    assert "6" not in data["lines"][init]  # unused() body: no test
    assert 10 in data["import"][init]  # at_import() body ran at import
    lines = LineMap({("pkg/__init__.py", 2): frozenset({"test_pkg.py::test_used"})},
                    frozenset({("pkg/__init__.py", 10)}), frozenset({"test_pkg.py::test_spawn"}))
    stable = data["tests"]
    assert lines.affected("pkg/__init__.py", (2, 2), stable) == ["test_pkg.py::test_spawn",
                                                                 "test_pkg.py::test_used"]
    assert lines.affected("pkg/__init__.py", (6, 6), stable) == ["test_pkg.py::test_spawn"]
    assert lines.affected("pkg/__init__.py", (10, 10), stable) == stable


def test_swe_real_suite_covers_the_test_packages():
    from agentgym.evaluation.suites import get_suite

    (entry,) = get_suite("swe-real").entries
    assert entry.make_kwargs() == {"sandbox": "docker", "tasks": "real", "split": "test"}
    test_tasks = [t for t in REAL if t.split == "test"]
    assert sorted(entry.seeds) == list(range(len(test_tasks)))  # each test task once
