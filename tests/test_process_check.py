"""The end-of-session check: a process a test leaves running fails the session and is killed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from process_fixtures import SESSION_ENV, session_processes

TESTS = Path(__file__).parent


def _session(tmp_path: Path, body: str, workers: int = 0,
             ) -> tuple[subprocess.CompletedProcess[str], int | None]:
    """Run a pytest session of one test with the process plugin; returns it and a pid it left.

    ``workers``: spread over that many pytest-xdist workers (as CI runs), or none.
    """
    pid_file = tmp_path / "pid"
    (tmp_path / "test_inner.py").write_text(
        "import subprocess, sys\n"
        f"PID_FILE = {str(pid_file)!r}\n"
        "def test_inner(spawn):\n" + body)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get(
        "PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "process_fixtures", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path / "test_inner.py"),
         *(["-n", str(workers)] if workers else [])],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    pid = int(pid_file.read_text()) if pid_file.exists() else None
    return done, pid


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


@pytest.mark.parametrize("workers", [0, 2], ids=["one-process", "two-xdist-workers"])
@pytest.mark.parametrize("how", ["child", "orphan"])
def test_a_process_left_running_fails_the_session_and_is_killed(tmp_path, how, workers):
    start = ("    p = subprocess.Popen(['sleep', '600'])\n"
             "    open(PID_FILE, 'w').write(str(p.pid))\n" if how == "child" else
             # the shell exits at once: the sleep is reparented, found by its environment
             "    out = subprocess.run(['sh', '-c', 'sleep 600 >/dev/null 2>&1 & echo $!'],\n"
             "                         capture_output=True, text=True).stdout\n"
             "    open(PID_FILE, 'w').write(out.strip())\n")
    if workers:
        pytest.importorskip("xdist")
    done, pid = _session(tmp_path, start, workers)
    assert pid is not None, done.stdout + done.stderr
    try:
        assert done.returncode == 1, done.stdout + done.stderr
        assert "1 passed" in done.stdout
        assert "still running at the end of the session" in done.stdout
        assert f"pid {pid}: sleep 600" in done.stdout
        deadline = time.monotonic() + 60
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(pid), "the check named the process but did not kill it"
    finally:
        if _running(pid):
            os.kill(pid, 9)


def test_a_session_whose_processes_end_passes(tmp_path):
    done, pid = _session(tmp_path, (
        "    s = spawn(['sleep', '600'])\n"  # the fixture ends its group after the test
        "    open(PID_FILE, 'w').write(str(s.proc.pid))\n"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert pid is not None and not _running(pid)


def test_processes_of_other_sessions_are_not_counted():
    """Another session's process (an orphan with its own marker) is not this session's leak."""
    out = subprocess.run(["sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"], capture_output=True,
                         text=True, env={**os.environ, SESSION_ENV: "another-session"}).stdout
    pid = int(out)
    try:
        assert _running(pid) and pid not in session_processes()
        assert pid in session_processes(session="another-session")
    finally:
        os.kill(pid, 9)
