"""Processes that die with this one, however it ends.

A process killed outright (SIGKILL, the OOM killer) runs no cleanup, so what it started in
sessions of their own runs on: a vLLM engine core holds its weights and KV cache (2.7 GB for
SmolLM2 on a CPU) until someone finds it. Where agentgym starts such a process itself it
arms the kernel's parent-death signal (``setpriv --pdeathsig``, the llama.cpp backend); a
library that starts its own (vLLM's ``AsyncLLM``) gives no such hook, so a :class:`Watchdog`
stands guard: a small ``sh`` reading a pipe whose write end only this process holds. When
this process ends the kernel closes that end, the read returns, and the watchdog SIGKILLs
the processes it guards, each only if it is still the process it was (same start time), so
a pid the system gave to another process is never touched. :meth:`Watchdog.disarm` stops
the watchdog once the processes were shut down the ordinary way.

Linux only (it reads ``/proc``); elsewhere a watchdog guards nothing.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

_GUARD = r"""
read _
for entry in "$@"; do
    pid=${entry%:*}
    start=${entry#*:}
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
    set -- ${stat##*) }
    shift 19
    [ "$1" = "$start" ] && kill -9 "$pid" 2>/dev/null
done
"""
"""The watchdog: once its pipe ends, it kills each ``pid:start`` whose ``/proc/PID/stat``
still has that start time (the 20th field after the command's name)."""


def descendants() -> set[int]:
    """The pids of every living descendant of this process (Linux; empty elsewhere)."""
    found: set[int] = set()
    todo = [os.getpid()]
    while todo:
        pid = todo.pop()
        for path in Path(f"/proc/{pid}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                for child in path.read_text().split():
                    if int(child) not in found:
                        found.add(int(child))
                        todo.append(int(child))
    return found


def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class Watchdog:
    """SIGKILLs ``pids`` when this process ends, unless :meth:`disarm` ran first.

    Args:
        pids: Processes to guard; any that has already exited is left out.
    """

    def __init__(self, pids: set[int] | list[int]) -> None:
        entries = [f"{pid}:{start}" for pid in sorted(pids)
                   if (start := _start_time(pid)) is not None]
        self.pids = tuple(int(e.split(":")[0]) for e in entries)
        self._process: subprocess.Popen[bytes] | None = None
        self._write = -1
        if not entries or not sys.platform.startswith("linux"):
            return
        # Neither end survives an exec; a child forked without one (multiprocessing's fork)
        # holds the write end too, and the guard fires once it has ended as well.
        read, self._write = os.pipe()
        try:
            # its own session: a Ctrl-C to this process group leaves the guard standing
            self._process = subprocess.Popen(["sh", "-c", _GUARD, "agentgym-watchdog",
                                              *entries], stdin=read, start_new_session=True)
        finally:
            os.close(read)

    def disarm(self) -> None:
        """Stop guarding (the processes were shut down); idempotent."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None
        if self._write >= 0:
            os.close(self._write)
            self._write = -1
