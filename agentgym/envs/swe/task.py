"""SWE tasks: the SWE-bench instance format, a loader for JSON/JSONL, and the shipped set.

A task is a repository snapshot, a problem statement and the tests that judge a fix:
``FAIL_TO_PASS`` (fail before the fix, pass after) and ``PASS_TO_PASS`` (pass before and
must still pass). As in SWE-bench, ``test_patch`` holds the tests that check the fix; it is
hidden from the agent and applied just before the tests run, and ``patch`` is the reference
(oracle) fix.

Where the repository comes from:

- **An image** (SWE-bench style, ``image`` set): the image already holds the repository at
  ``workdir`` as a git checkout of ``base_commit``; users build or provide these images.
- **A host directory** (``repo_dir`` set, the shipped tasks): copied into the sandbox at
  reset and committed as the base, so ``git diff`` shows exactly the agent's changes.

The shipped set lives in ``tasks/<instance_id>/``: ``repo/`` (the buggy project),
``task.json`` (problem statement, test ids, split), ``oracle.patch`` and ``test.patch``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym.errors import SchemaError
from agentgym.task_data import read_records

TASKS_DIR = Path(__file__).parent / "tasks"
REAL_DIR = Path(__file__).parent / "real"
"""Tasks mined from real packages: one ``<package>.jsonl`` each (``agentgym swe mine``)."""
DEFAULT_TEST_CMD = "python -m pytest -rA -p no:cacheprovider -W ignore {tests}"
"""Pytest with one summary line per test (``-rA``), which the evaluator parses."""
SHIPPED_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
"""The shipped projects need no pytest plugins; skipping the host's saves seconds per run."""
SPLITS = ("train", "test", "all")


@dataclass(frozen=True)
class SWETask:
    """One SWE-bench-style instance.

    Attributes:
        instance_id: Unique id (``owner__repo-123`` in SWE-bench).
        problem_statement: The issue text the agent reads.
        fail_to_pass: Test ids that must go from failing to passing.
        pass_to_pass: Test ids that must keep passing.
        patch: The reference fix (a unified diff), used by the scripted expert.
        test_patch: A diff adding the judging tests, applied before the tests run.
        repo: ``owner/name`` of the upstream repository, when there is one.
        base_commit: The commit the task starts from, when known.
        image: Image holding the repository at ``workdir`` (Docker sandboxes only).
        repo_dir: Host directory copied to ``workdir`` at reset (when there is no image).
        workdir: Where the repository lives in the sandbox.
        test_cmd: Command that runs the tests; ``{tests}`` becomes the quoted test ids.
            Its output must be pytest's ``-rA`` summary (the evaluator parses it).
        split: ``train`` or ``test``; ``None`` puts the task in every split.
        env: Environment variables for the agent's commands and the test run.
        setup_patch: A diff applied at reset before the base commit is made (a mined
            task's injected bug), so the agent sees its result but not the diff.
    """

    instance_id: str
    problem_statement: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...] = ()
    patch: str = ""
    test_patch: str = ""
    repo: str = ""
    base_commit: str = ""
    image: str | None = None
    repo_dir: str | None = None
    workdir: str = "/testbed"
    test_cmd: str = DEFAULT_TEST_CMD
    split: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    setup_patch: str = ""

    def __post_init__(self) -> None:
        if not self.instance_id or not isinstance(self.instance_id, str):
            raise SchemaError(f"a task needs a non-empty instance_id, got {self.instance_id!r}")
        if not self.fail_to_pass:
            raise SchemaError(f"task {self.instance_id!r} has no FAIL_TO_PASS tests; a task "
                              "needs at least one test that the fix makes pass")
        if "{tests}" not in self.test_cmd:
            raise SchemaError(f"task {self.instance_id!r}: test_cmd must contain '{{tests}}' "
                              f"where the test ids go, got {self.test_cmd!r}")
        if self.split not in (None, "train", "test"):
            raise SchemaError(f"task {self.instance_id!r}: split must be 'train', 'test' or "
                              f"absent, got {self.split!r}")
        if not self.workdir.startswith("/"):
            raise SchemaError(f"task {self.instance_id!r}: workdir must be an absolute path, "
                              f"got {self.workdir!r}")


def _test_ids(record: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = record.get(key, [])
    if isinstance(value, str):  # the SWE-bench datasets store these lists as JSON text
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError as exc:
            raise SchemaError(f"{where}: {key} must be a list of test ids or its JSON text, "
                              f"got {value[:80]!r}") from exc
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SchemaError(f"{where}: {key} must be a list of test id strings, got {value!r}")
    return tuple(value)


def task_from_record(record: Mapping[str, Any], *, where: str = "task",
                     image: str | None = None, base: Path | None = None) -> SWETask:
    """A task from one SWE-bench-style record (a JSON object).

    Args:
        record: Fields ``instance_id``, ``problem_statement``, ``FAIL_TO_PASS``,
            ``PASS_TO_PASS`` and optionally ``patch``, ``test_patch``, ``repo``,
            ``base_commit``, ``image`` (or ``image_name``), ``repo_dir``, ``workdir``,
            ``test_cmd``, ``split``, ``env`` (a JSON object of strings), ``setup_patch``.
        where: Names the record in error messages.
        image: Image for records without one; ``{instance_id}`` is filled in.
        base: Directory that relative ``repo_dir`` values are relative to.

    Raises:
        SchemaError: A missing or malformed field (the message names it).
    """
    if not isinstance(record, Mapping):
        raise SchemaError(f"{where}: expected a JSON object, got {type(record).__name__}")
    for key in ("instance_id", "problem_statement", "FAIL_TO_PASS"):
        if key not in record:
            raise SchemaError(f"{where}: missing the field {key!r} (SWE-bench instances have "
                              f"instance_id, problem_statement, FAIL_TO_PASS, PASS_TO_PASS); "
                              f"it has {sorted(record)}")
    where = f"{where} ({record['instance_id']})"
    repo_dir = record.get("repo_dir")
    if repo_dir is not None and base is not None and not Path(repo_dir).is_absolute():
        repo_dir = str(base / repo_dir)
    task_image = record.get("image") or record.get("image_name") or (
        image.format(instance_id=record["instance_id"]) if image else None)
    if task_image is None and repo_dir is None:
        raise SchemaError(f"{where}: no repository: give the task an 'image' that holds the "
                          "repository at its workdir (or pass image='name-{instance_id}' to "
                          "the loader), or a 'repo_dir' to copy in")
    extra = {k: record[k] for k in ("workdir", "test_cmd", "split") if record.get(k)}
    env = record.get("env") or {}
    if not isinstance(env, Mapping) or not all(isinstance(v, str) for v in env.values()):
        raise SchemaError(f"{where}: env must be a JSON object of strings, got {env!r}")
    return SWETask(
        instance_id=str(record["instance_id"]),
        problem_statement=str(record["problem_statement"]),
        fail_to_pass=_test_ids(record, "FAIL_TO_PASS", where),
        pass_to_pass=_test_ids(record, "PASS_TO_PASS", where),
        patch=str(record.get("patch") or ""), test_patch=str(record.get("test_patch") or ""),
        setup_patch=str(record.get("setup_patch") or ""),
        repo=str(record.get("repo") or ""), base_commit=str(record.get("base_commit") or ""),
        image=task_image, repo_dir=repo_dir, env=dict(env), **extra)


def load_tasks(source: str | Path | Any, *, image: str | None = None) -> list[SWETask]:
    """Tasks from SWE-bench-style records: a JSON/JSONL/CSV/Parquet file or a Dataset.

    Files are read by :func:`agentgym.task_data.read_records` (a JSON file holds a list of
    instances; a ``datasets.Dataset`` loaded from the SWE-bench data works as it is).

    Args:
        source: The file, or a ``datasets.Dataset`` of instances.
        image: Image for instances that name none (``{instance_id}`` is filled in), e.g.
            ``"sweb.eval.x86_64.{instance_id}"`` for images built by the SWE-bench harness.

    Raises:
        ConfigError: No such file, or an unknown file type.
        SchemaError: A file that cannot be parsed, or a malformed instance (naming its row
            and field).
    """
    base = Path(source).parent if isinstance(source, str | os.PathLike) else None
    tasks = [task_from_record(r.data, where=r.where, image=image, base=base)
             for r in read_records(source)]
    _check_unique(tasks, str(source) if base is not None else "dataset")
    return tasks


def shipped_tasks(root: Path = TASKS_DIR) -> list[SWETask]:
    """The bug-fix tasks that ship with agentgym (``tasks/*/``), sorted by id."""
    tasks = []
    for folder in sorted(p for p in root.iterdir() if (p / "task.json").is_file()):
        record = json.loads((folder / "task.json").read_text(encoding="utf-8"))
        record.setdefault("instance_id", folder.name)
        record["repo_dir"] = str(folder / "repo")
        record.setdefault("env", SHIPPED_ENV)
        for key, name in (("patch", "oracle.patch"), ("test_patch", "test.patch")):
            if (folder / name).is_file():
                record[key] = (folder / name).read_text(encoding="utf-8")
        tasks.append(task_from_record(record, where=str(folder / "task.json")))
    return tasks


def real_tasks(root: Path = REAL_DIR) -> list[SWETask]:
    """The tasks mined from real packages (``real/*.jsonl``), sorted by id.

    Each runs in its package's image, built on first use from the sdist (hash checked).
    """
    tasks = [t for path in sorted(root.glob("*.jsonl")) for t in load_tasks(path)]
    _check_unique(tasks, str(root))
    return sorted(tasks, key=lambda t: t.instance_id)


def select_split(tasks: Iterable[SWETask], split: str) -> list[SWETask]:
    """The tasks of ``split`` (``all`` keeps every task; tasks without a split are in all)."""
    if split not in SPLITS:
        raise SchemaError(f"split must be one of {SPLITS}, got {split!r}")
    return [t for t in tasks if split == "all" or t.split in (None, split)]


def _check_unique(tasks: list[SWETask], where: str) -> None:
    seen: set[str] = set()
    for t in tasks:
        if t.instance_id in seen:
            raise SchemaError(f"{where}: two tasks have the instance_id {t.instance_id!r}")
        seen.add(t.instance_id)
