"""agentgym.sandboxes.process: a child's exit as a future, with a pidfd or without one."""

import asyncio
import os
import subprocess

import pytest

from agentgym.sandboxes.local import LocalSandbox
from agentgym.sandboxes.process import ProcessExit


@pytest.mark.parametrize("pidfd", [True, False])
async def test_exit_status_of_a_process_and_a_wait_that_times_out(monkeypatch, pidfd):
    if not pidfd:  # an older kernel, or a seccomp filter that refuses pidfd_open
        def refused(pid: int) -> int:
            raise PermissionError("pidfd_open refused")
        monkeypatch.setattr(os, "pidfd_open", refused, raising=False)
    loop = asyncio.get_running_loop()
    proc = subprocess.Popen(["sh", "-c", "sleep 0.3; exit 7"])  # noqa: ASYNC220 - its subject
    done = ProcessExit(loop, proc)
    try:
        assert await done.wait(0.01) is None  # still running
        assert await done.wait(30) == 7
        assert proc.returncode == 7  # reaped
    finally:
        done.close()
        done.close()  # idempotent
    async with LocalSandbox() as box:  # the sandbox's commands, either way
        result = await box.exec("echo hi; exit 3")
        assert (result.exit_code, result.stdout) == (3, "hi\n")
