"""Mining one package: baseline its tests, try mutants in one container, keep the caught ones.

The procedure (``agentgym swe mine``), cheap by design — one container per package, every
mutant applied and tested inside it with the suite's own runner:

1. Unpack the sdist on the host (the mutants are computed from it) and start one container
   of the package's image.
2. **Baseline.** Run the suite twice; a test that passes in both is *stable* (one that
   changes between runs is flaky and excluded). Run the stable tests once more by id, the
   way the task's test command will, and keep those that pass addressed that way.
3. **Line map.** One more run, with a tracing plugin (:mod:`.trace_plugin`), records which
   lines of the package each stable test executes, and which run at import.
4. **Mutants.** All candidate edits of the recipe's modules (:mod:`.mutate`) are grouped by
   strategy, each group shuffled by ``random.Random(f"{seed}|{name}=={version}")``, and drawn
   round-robin over the strategies, so every strategy gets tried. A draw that does not parse,
   changes nothing, repeats an earlier tree, or hits a function that already gave
   ``per_function`` tasks is skipped without a test run. Each tried mutant is written into
   the container, the stable tests that execute the mutated function's body run (all of
   them when the body runs at import; none, and the mutant survives, when no test runs it),
   and the file is restored. A test that does not run the changed code cannot change its
   outcome, so this is the whole suite's verdict at a fraction of the cost.
5. **Keep** a mutant when ≥ 1 stable test fails (FAIL_TO_PASS) and fewer than half of them do
   (a bug that breaks the whole suite, e.g. at import, is no task); every other stable test
   then passed by construction. PASS_TO_PASS is the stable tests of the files the failing
   tests are in (as SWE-bench takes them from the test files of the fix), so a task's test
   run stays short. A run past its timeout rejects the mutant.

Everything that decides the output is recorded (seed, budget, recipe), so mining again gives
the same instances bit for bit, provided the suite is deterministic.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import random
import shlex
import subprocess
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym.envs.swe.evaluation import PASSING, parse_pytest_summary
from agentgym.envs.swe.mining.issue import write_issue
from agentgym.envs.swe.mining.mutate import STRATEGIES, Mutant, body_spans, candidates, realize
from agentgym.envs.swe.mining.recipe import (
    WORKDIR,
    PackageRecipe,
    build_package_image,
    source_files,
    unpack_sdist,
)
from agentgym.sandboxes.base import Sandbox, SandboxError

Log = Callable[[str], None]
MAX_CHANGED_LINES = 6
"""A kept bug's diff has at most this many ``-`` and ``+`` lines together."""
TEST_PATCH_NOTE = "# Tests in this file judge the task; edits to it are discarded at evaluation.\n"


@dataclass
class StrategyYield:
    """Counts of one strategy in one package's mining run."""

    tried: int = 0
    kept: int = 0
    survived: int = 0
    """No stable test failed."""
    too_broad: int = 0
    """Half or more of the stable tests failed."""
    timed_out: int = 0


@dataclass
class MiningReport:
    """What mining one package did (the figures in docs/swe.md come from these)."""

    package: str
    version: str
    seconds: float = 0.0
    baseline_tests: int = 0
    stable_tests: int = 0
    flaky_tests: int = 0
    candidates: int = 0
    suite_seconds: float = 0.0
    load_average: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """The machine's 1/5/15-minute load average when mining started (times depend on it)."""
    strategies: dict[str, StrategyYield] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"package": self.package, "version": self.version,
                "seconds": round(self.seconds, 1), "baseline_tests": self.baseline_tests,
                "stable_tests": self.stable_tests, "flaky_tests": self.flaky_tests,
                "candidates": self.candidates, "suite_seconds": round(self.suite_seconds, 2),
                "load_average": [round(x, 2) for x in self.load_average],
                "strategies": {k: vars(v) for k, v in sorted(self.strategies.items())}}


def unified_diff(path: str, old: str, new: str) -> str:
    """A ``git apply``-able diff of one file (``a/`` and ``b/`` prefixes)."""
    body = list(difflib.unified_diff(old.splitlines(keepends=True),
                                     new.splitlines(keepends=True),
                                     f"a/{path}", f"b/{path}", n=3))
    out = [f"diff --git a/{path} b/{path}\n"]
    for line in body:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def changed_lines(old: str, new: str) -> list[str]:
    """Stripped text of the lines that differ (both sides)."""
    diff = difflib.unified_diff(old.splitlines(), new.splitlines(), n=0, lineterm="")
    return [d[1:].strip() for d in diff
            if d[:1] in "+-" and not d.startswith(("+++", "---")) and d[1:].strip()]


def draw_order(recipe: PackageRecipe, cands: list[Mutant]) -> Iterator[Mutant]:
    """Candidates in the seeded round-robin order over strategies (see the module doc)."""
    rng = random.Random(f"{recipe.seed}|{recipe.spec}")
    groups = {s: [c for c in cands if c.strategy == s] for s in STRATEGIES}
    for group in groups.values():
        rng.shuffle(group)
    while any(groups.values()):
        for strategy in STRATEGIES:
            if groups[strategy]:
                yield groups[strategy].pop()


async def _run(box: Sandbox, recipe: PackageRecipe, targets: list[str],
               timeout: float,  # noqa: ASYNC109 - passed to exec
               extra: str = "", env: dict[str, str] | None = None,
               ) -> tuple[dict[str, str], str, bool, float]:
    # Mining shares the machine: its test runs yield the CPU to everything else.
    cmd = "nice -n 10 " + recipe.test_cmd().format(
        tests=extra + " ".join(shlex.quote(t) for t in targets))
    start = time.monotonic()
    # One hash seed: pytest prints sets in hash order, and the issue text quotes that output,
    # so without it two mining runs can word an issue differently.
    result = await box.exec(cmd, timeout=timeout, workdir=WORKDIR,
                            env={**recipe.env, "PYTHONHASHSEED": "0", **(env or {})})
    return (parse_pytest_summary(result.stdout), result.stdout, result.timed_out,
            time.monotonic() - start)


async def _baseline(box: Sandbox, recipe: PackageRecipe, report: MiningReport,
                    log: Log) -> list[str]:
    runs = []
    for _ in range(2):
        statuses, out, timed_out, secs = await _run(box, recipe, list(recipe.tests), 900)
        if timed_out or not statuses:
            raise SandboxError(f"{recipe.spec}: the baseline test run gave no results "
                               f"(timed out: {timed_out}): {out[-1500:]}")
        runs.append(statuses)
    report.baseline_tests = len(runs[0])
    passing = [t for t, s in runs[0].items() if s in PASSING]
    stable = [t for t in passing if runs[1].get(t) in PASSING]
    report.flaky_tests = len(passing) - len(stable)
    statuses, _, _, secs = await _run(box, recipe, stable, 900)
    stable = sorted(t for t in stable if statuses.get(t) in PASSING)
    report.stable_tests, report.suite_seconds = len(stable), secs
    log(f"{recipe.spec}: {len(stable)} stable passing tests of {report.baseline_tests} "
        f"({report.flaky_tests} flaky), suite {secs:.1f}s")
    return stable


@dataclass(frozen=True)
class LineMap:
    """Which stable tests execute which lines (from the tracing run)."""

    tests: dict[tuple[str, int], frozenset[str]]
    """(path relative to the sdist root, line) -> ids of the tests that ran it."""
    at_import: frozenset[tuple[str, int]]
    """Lines that ran outside any test (module imports)."""
    spawning: frozenset[str] = frozenset()
    """Tests that started a subprocess (the package may run there, untraced): always run."""

    def affected(self, path: str, span: tuple[int, int], stable: list[str]) -> list[str]:
        """Stable tests that may see a change in lines ``span`` of ``path``, in order."""
        lines = [(path, n) for n in range(span[0], span[1] + 1)]
        if any(x in self.at_import for x in lines):
            return stable
        hit = frozenset().union(self.spawning, *(self.tests.get(x, frozenset()) for x in lines))
        return [t for t in stable if t in hit]


async def _line_map(box: Sandbox, recipe: PackageRecipe, stable: list[str]) -> LineMap:
    plugin = (Path(__file__).parent / "trace_plugin.py").read_text(encoding="utf-8")
    await box.write_file("/tmp/agentgym_trace/agentgym_trace.py", plugin)
    roots = ",".join(f"{WORKDIR}/{s}" for s in recipe.sources)
    env = {"PYTHONPATH": recipe.env["PYTHONPATH"] + ":/tmp/agentgym_trace",
           "AGENTGYM_TRACE_ROOTS": roots, "AGENTGYM_TRACE_OUT": "/tmp/agentgym_trace.json"}
    _, out, timed_out, _ = await _run(box, recipe, stable, 1800, "-p agentgym_trace ", env)
    try:
        data = json.loads(await box.read_file("/tmp/agentgym_trace.json"))
    except (OSError, ValueError) as exc:
        raise SandboxError(f"{recipe.spec}: the tracing run wrote no line map "
                           f"(timed out: {timed_out}): {out[-1500:]}") from exc
    strip = len(WORKDIR) + 1
    names = data["tests"]
    tests: dict[tuple[str, int], frozenset[str]] = {}
    for path, lines in data["lines"].items():
        for line, idx in lines.items():
            tests[path[strip:], int(line)] = frozenset(names[i] for i in idx)
    at_import = frozenset((p[strip:], n) for p, ns in data["import"].items() for n in ns)
    return LineMap(tests, at_import, frozenset(names[i] for i in data.get("spawns", ())))


def _tree_hash(root: Path) -> str:
    """``git write-tree`` of ``root`` (the base the agent starts from)."""
    env = {"GIT_DIR": str(root / ".git-mine"), "GIT_WORK_TREE": str(root), "HOME": str(root)}
    if not (root / ".git-mine").exists():
        subprocess.run(["git", "init", "-q"], env=env, check=True)
        (root / ".git-mine" / "info").mkdir(exist_ok=True)
        (root / ".git-mine" / "info" / "exclude").write_text(".git-mine\n__pycache__/\n")
    subprocess.run(["git", "add", "-A"], env=env, check=True)
    return subprocess.run(["git", "write-tree"], env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


def _module_name(recipe: PackageRecipe, path: str) -> str:
    rel = path[len(recipe.python_path) + 1:] if recipe.python_path != "." else path
    mod = rel.removesuffix(".py").replace("/", ".")
    return mod.removesuffix(".__init__")


def public_names(sources: dict[str, str]) -> frozenset[str]:
    """Public function and class names defined anywhere in the package's modules."""
    return frozenset(node.name for text in sources.values() for node in ast.walk(ast.parse(text))
                     if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                     and not node.name.startswith("_"))


def _instance(recipe: PackageRecipe, mutant: Mutant, clean: str, buggy: str,
              failing: list[str], p2p: list[str], output: str, root: Path,
              public: frozenset[str]) -> dict[str, Any]:
    instance_id = f"{recipe.slug}-{recipe.version}__{mutant.strategy}-{mutant.key}"
    changed = changed_lines(clean, buggy)
    test_files = sorted({t.split("::")[0] for t in failing})
    test_patch = "".join(
        unified_diff(f, text, text + ("" if text.endswith("\n") else "\n") + TEST_PATCH_NOTE)
        for f in test_files for text in [(root / f).read_text(encoding="utf-8")])
    (root / mutant.path).write_text(buggy, encoding="utf-8")
    try:
        tree = _tree_hash(root)
    finally:
        (root / mutant.path).write_text(clean, encoding="utf-8")
    return {
        "instance_id": instance_id, "repo": f"pypi/{recipe.name}", "version": recipe.version,
        "base_commit": "", "base_tree": tree,
        "problem_statement": write_issue(
            package=recipe.name, version=recipe.version,
            module=_module_name(recipe, mutant.path), function=mutant.function,
            failing=failing, output=output, changed=changed, instance_id=instance_id,
            public=public),
        "setup_patch": unified_diff(mutant.path, clean, buggy),
        "patch": unified_diff(mutant.path, buggy, clean), "test_patch": test_patch,
        "FAIL_TO_PASS": failing, "PASS_TO_PASS": p2p, "image": recipe.image,
        "workdir": WORKDIR, "test_cmd": recipe.test_cmd(), "env": recipe.env,
        "split": recipe.split, "strategy": mutant.strategy, "function": mutant.function,
        "file": mutant.path, "line": mutant.line, "license": recipe.license,
        "image_recipe": {"sdist": recipe.spec, "sha256": recipe.sha256,
                         "python_path": recipe.python_path,
                         "deps": [f"{d.name}=={d.version} sha256:{d.sha256}" for d in recipe.deps]},
        "seed": recipe.seed,
    }


async def mine_package(recipe: PackageRecipe, *, client: Any, sandbox: Callable[[str], Any],
                       log: Log = print) -> tuple[list[dict[str, Any]], MiningReport]:
    """Mine ``recipe``'s package; see the module docstring.

    Args:
        recipe: The package.
        client: A ``docker.DockerClient`` (the image is built there if missing).
        sandbox: ``image -> async context manager of a started Sandbox`` for that image.
        log: Progress lines.

    Returns:
        The kept instances (SWE-bench records, in the order found) and the report.
    """
    report = MiningReport(recipe.name, recipe.version, load_average=os.getloadavg(),
                          strategies={s: StrategyYield() for s in STRATEGIES})
    start = time.monotonic()
    build_package_image(client, recipe, log)
    with tempfile.TemporaryDirectory(prefix="agentgym-mine-") as tmp:
        root = unpack_sdist(recipe, Path(tmp) / "src", log)
        sources = {p: (root / p).read_text(encoding="utf-8")
                   for p in source_files(recipe, root)}
        cands = [c for p, text in sources.items() for c in candidates(p, text)]
        report.candidates = len(cands)
        async with sandbox(recipe.image) as box:
            stable = await _baseline(box, recipe, report, log)
            lines = await _line_map(box, recipe, stable)
            kept = await _mutants(box, recipe, report, stable, lines, sources, cands, root,
                                  log)
    report.seconds = time.monotonic() - start
    log(f"{recipe.spec}: kept {len(kept)} of {sum(s.tried for s in report.strategies.values())}"
        f" tried in {report.seconds:.0f}s")
    return kept, report


async def _mutants(box: Sandbox, recipe: PackageRecipe, report: MiningReport,
                   stable: list[str], lines: LineMap, sources: dict[str, str],
                   cands: list[Mutant], root: Path, log: Log) -> list[dict[str, Any]]:
    dumps = {p: ast.dump(ast.parse(t)) for p, t in sources.items()}
    spans = {p: body_spans(t) for p, t in sources.items()}
    public = public_names(sources)
    seen: set[str] = set()
    per_function: Counter[tuple[str, str]] = Counter()
    timeout = max(60.0, 5 * report.suite_seconds)
    tried, kept = 0, []
    for cand in draw_order(recipe, cands):
        if tried >= recipe.budget or len(kept) >= recipe.max_tasks:
            break
        if per_function[cand.path, cand.function] >= recipe.per_function:
            continue
        mutant = realize(cand, sources[cand.path], dumps[cand.path])
        if mutant is None or mutant.fingerprint in seen:
            continue
        seen.add(mutant.fingerprint)
        clean, buggy = sources[mutant.path], mutant.apply(sources[mutant.path])
        if len(changed_lines(clean, buggy)) > MAX_CHANGED_LINES:
            continue
        tried += 1
        counts = report.strategies[mutant.strategy]
        counts.tried += 1
        affected = lines.affected(mutant.path, spans[mutant.path][mutant.function], stable)
        statuses, output, timed_out = {}, "", False
        if affected:
            await box.write_file(f"{WORKDIR}/{mutant.path}", buggy)
            try:
                statuses, output, timed_out, _ = await _run(box, recipe, affected, timeout)
            finally:
                await box.write_file(f"{WORKDIR}/{mutant.path}", clean)
        failing = [t for t in affected if statuses.get(t) not in PASSING]
        if timed_out:
            counts.timed_out += 1
        elif not failing:
            counts.survived += 1
        elif 2 * len(failing) >= len(stable):
            counts.too_broad += 1
        else:
            files = {t.split("::")[0] for t in failing}
            p2p = [t for t in stable if t.split("::")[0] in files and t not in failing]
            kept.append(_instance(recipe, mutant, clean, buggy, failing, p2p, output, root,
                                  public))
            counts.kept += 1
            per_function[mutant.path, mutant.function] += 1
        if tried % 10 == 0:
            log(f"{recipe.spec}: {tried} tried, {len(kept)} kept")
    return kept


def yields(reports: list[MiningReport]) -> dict[str, dict[str, int]]:
    """Tried and kept per strategy over several packages."""
    total: dict[str, dict[str, int]] = defaultdict(lambda: {"tried": 0, "kept": 0})
    for r in reports:
        for s, y in r.strategies.items():
            total[s]["tried"] += y.tried
            total[s]["kept"] += y.kept
    return dict(total)
