"""Judging a submission: apply the hidden tests, run them in the sandbox, read the results.

The SWE-bench procedure: capture the agent's patch (``git diff`` of the working tree),
restore the files the test patch touches to the base commit (so edits to those tests do not
count), apply the test patch, run ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` with the task's
test command, and parse each test's status from pytest's ``-rA`` summary. The task is
**resolved** when every listed test passed; a test missing from the output (deleted,
not collected, or the run timed out) did not pass.

An empty patch cannot resolve a task whose ``FAIL_TO_PASS`` tests fail at the base commit
(the shipped tasks are checked for that), so its tests are not run.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentgym.envs.swe.task import SWETask
from agentgym.sandboxes.base import Sandbox, SandboxError
from agentgym.sandboxes.local import GIT_IDENTITY

_SUMMARY_RE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)\s+(\S.*?)(?:\s+-\s+.*)?$")
_PATCH_FILE_RE = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)
PASSING = frozenset({"PASSED", "XFAIL"})
"""Statuses that count as a pass (SWE-bench counts an expected failure as passing)."""


@dataclass(frozen=True)
class Evaluation:
    """The judgement of one submission.

    Attributes:
        patch: The submitted diff.
        resolved: Every FAIL_TO_PASS and PASS_TO_PASS test passed.
        statuses: Test id -> pytest status (``MISSING`` when the output did not name it).
        tests_ran: Whether the tests were run (not for an empty patch).
        timed_out: The test run ran past its timeout.
        output: The tail of the test run's output.
    """

    patch: str
    resolved: bool
    statuses: Mapping[str, str] = field(default_factory=dict)
    tests_ran: bool = False
    timed_out: bool = False
    output: str = ""

    @property
    def patch_empty(self) -> bool:
        """The agent changed nothing."""
        return not self.patch.strip()

    def passed(self, ids: tuple[str, ...]) -> int:
        """How many of ``ids`` passed."""
        return sum(self.statuses.get(i) in PASSING for i in ids)

    def info(self, task: SWETask) -> dict[str, Any]:
        """The step-info keys the trainer's SWE rewards and metrics read (JSON types)."""
        return {"submitted": True, "patch_empty": self.patch_empty, "resolved": self.resolved,
                "success": self.resolved, "tests_ran": self.tests_ran,
                "fail_to_pass_passed": self.passed(task.fail_to_pass),
                "fail_to_pass_total": len(task.fail_to_pass),
                "pass_to_pass_passed": self.passed(task.pass_to_pass),
                "pass_to_pass_total": len(task.pass_to_pass),
                "test_timed_out": self.timed_out, "patch_chars": len(self.patch)}


def parse_pytest_summary(output: str) -> dict[str, str]:
    """Test id -> status from the ``-rA`` short test summary (the last status wins)."""
    statuses: dict[str, str] = {}
    for line in output.splitlines():
        match = _SUMMARY_RE.match(line.strip())
        if match and "::" in match.group(2):
            statuses[match.group(2)] = match.group(1)
    return statuses


def patched_files(patch: str) -> list[str]:
    """Paths a unified git diff touches (both sides of renames)."""
    return sorted({p for m in _PATCH_FILE_RE.finditer(patch) for p in m.groups()})


def heredoc(command: str, body: str, tag: str = "AGENTGYM_EOF") -> str:
    """``command <<'TAG'`` with ``body`` as its stdin (no shell expansion inside)."""
    while tag in body:
        tag += "_"
    return f"{command} <<'{tag}'\n{body}{'' if body.endswith(chr(10)) else chr(10)}{tag}\n"


async def evaluate(sandbox: Sandbox, task: SWETask, patch: str, *,
                   timeout: float = 300.0) -> Evaluation:  # noqa: ASYNC109 - passed to exec
    """Run the task's tests on the sandbox's working tree; see the module docstring.

    Args:
        sandbox: The episode's sandbox, with the agent's changes at ``task.workdir``.
        task: The task.
        patch: The agent's diff, captured before this call.
        timeout: Seconds the test run may take.

    Raises:
        SandboxError: The test patch does not apply (a broken task, not the agent's doing).
    """
    if not patch.strip():
        return Evaluation(patch, resolved=False)
    env = {**GIT_IDENTITY, **task.env}
    if task.test_patch:
        restore = " ; ".join(
            f"{{ git checkout -q HEAD -- {shlex.quote(f)} 2>/dev/null || rm -rf -- "
            f"{shlex.quote(f)} ; }}" for f in patched_files(task.test_patch))
        applied = await sandbox.exec(
            (restore + " ; " if restore else "") + heredoc("git apply -", task.test_patch),
            timeout=60, workdir=task.workdir, env=env)
        if not applied.ok:
            raise SandboxError(f"task {task.instance_id}: the test patch does not apply at "
                               f"the base commit: {applied.stderr.strip()[:500]}")
    ids = [*task.fail_to_pass, *task.pass_to_pass]
    cmd = task.test_cmd.format(tests=" ".join(shlex.quote(i) for i in ids))
    result = await sandbox.exec(cmd, timeout=timeout, workdir=task.workdir, env=env)
    found = parse_pytest_summary(result.stdout)
    statuses = {i: found.get(i, "MISSING") for i in ids}
    resolved = not result.timed_out and all(s in PASSING for s in statuses.values())
    tail = (result.stdout + result.stderr)[-4000:]
    return Evaluation(patch, resolved, statuses, tests_ran=True, timed_out=result.timed_out,
                      output=tail)
