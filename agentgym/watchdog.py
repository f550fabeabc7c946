"""Processes that die with this one, however it ends.

A process killed outright (SIGKILL, the OOM killer) runs no cleanup, so what it started in
sessions of their own runs on: a vLLM engine core holds its weights and KV cache (2.7 GB for
SmolLM2 on a CPU) until someone finds it, and a local sandbox's command (``sleep 1000 &``, a
server the agent started) runs until it ends by itself. Where agentgym starts a single
long-lived process it arms the kernel's parent-death signal (``setpriv --pdeathsig``, the
llama.cpp backend); a library that starts its own (vLLM's ``AsyncLLM``), or a command whose
background children the signal would not reach, needs a :class:`Watchdog`: a small ``sh``
reading a pipe whose write end only this process holds. Each process or process group to
guard is sent down the pipe with its start time, and sent again to release it. When this
process ends the kernel closes the write end, the reads end, and the watchdog SIGKILLs what
is still guarded, each only if it is still the process it was (same start time), so a pid
the system gave to another process is never touched. A group whose leader has exited is
killed by its id: Linux does not hand out a pid while a group or session still bears it.
A process that left its group (``setsid``, a daemon's double fork) is found by a mark in its
environment (:func:`new_mark`, :meth:`Watchdog.guard_mark`), which it inherited from the
command that started it; :func:`kill_marked` kills such processes the ordinary way.
:meth:`Watchdog.disarm` stops the watchdog once everything was shut down the ordinary way.

Linux only (it reads ``/proc``); elsewhere a watchdog guards nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

_GUARD = r"""
live=" "
while read -r op entry; do
    case $op in
        +) live="$live$entry " ;;
        -) case $live in *" $entry "*) live="${live%% $entry *} ${live#* $entry }" ;; esac ;;
    esac
done
marks=""
for entry in $live; do
    kind=${entry%%:*}
    rest=${entry#*:}
    if [ "$kind" = m ]; then
        marks="$marks $rest"
        continue
    fi
    pid=${rest%:*}
    start=${rest#*:}
    if stat=$(cat "/proc/$pid/stat" 2>/dev/null); then
        set -- ${stat##*) }
        shift 19
        [ "$1" = "$start" ] || continue
        [ "$kind" = p ] && kill -9 "$pid" 2>/dev/null
    fi
    [ "$kind" = g ] && kill -9 "-$pid" 2>/dev/null
done
[ -n "$marks" ] || exit 0
for pass in 1 2; do  # again: one in the middle of an exec shows its environment a moment later
    for mark in $marks; do
        for env in /proc/[0-9]*/environ; do
            grep -qzxF "AGENTGYM_PROCESS_MARK=$mark" "$env" 2>/dev/null || continue
            pid=${env#/proc/}
            kill -9 "${pid%/environ}" 2>/dev/null
        done
    done
    [ "$pass" = 1 ] && sleep 0.1
done
"""
"""The watchdog: reads ``+ ENTRY`` and ``- ENTRY`` lines (``p:PID:START`` for a process,
``g:PGID:START`` for a group and its leader's start time, ``m:MARK`` for every process whose
environment carries the mark) until its pipe ends, then kills each entry still held whose
``/proc/PID/stat`` has that start time (the 20th field after the command's name), each group
whose leader is gone, and then each marked process (twice, 0.1 s apart: a process in the
middle of an ``exec`` shows no environment yet)."""


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


MARK_VARIABLE = "AGENTGYM_PROCESS_MARK"
"""The environment variable that marks a command's processes (:func:`new_mark`)."""


def new_mark() -> str:
    """A fresh mark for a command's environment (``MARK_VARIABLE``).

    Every process the command starts carries it, even one that leaves its process group
    (``setsid``, a daemon's double fork), unless it clears its environment.
    """
    return uuid.uuid4().hex


def marked(mark: str) -> set[int]:
    """The pids of the running processes whose environment carries ``mark`` (Linux)."""
    return _scan(mark)[0]


def kill_marked(mark: str, settle: float = 1.0) -> set[int]:
    """SIGKILL every process that carries ``mark``; returns their pids.

    A process in the middle of ``exec`` shows no environment (nor command line) until the
    kernel has set up its new ones, and its parent may already run on (vfork, or a start
    that returns once the exec is under way): while such a process is there, the scan is
    repeated, for up to ``settle`` seconds (blocking; milliseconds in practice).
    """
    killed: set[int] = set()
    deadline = time.monotonic() + settle
    for _ in range(1000):
        found, starting = _scan(mark)
        pids = found - killed
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed |= pids
        if pids:  # one forking as it dies leaves a child with the mark: look again
            continue
        if not starting or time.monotonic() >= deadline:
            break
        time.sleep(0.002)
    return killed


_KERNEL_THREAD = 0x00200000  # PF_KTHREAD in /proc/PID/stat's flags


def _scan(mark: str) -> tuple[set[int], set[int]]:
    """The pids whose environment carries ``mark``, and those in the middle of an ``exec``.

    A process mid-exec has neither environment nor command line yet; one that cleared its
    environment (``env -i``) still has a command line.
    """
    needle = f"{MARK_VARIABLE}={mark}".encode()
    found: set[int] = set()
    starting: set[int] = set()
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if name.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    environ = Path(f"/proc/{name}/environ").read_bytes()
                    if needle in environ.split(b"\0"):
                        found.add(int(name))
                    elif not environ and _execing(int(name)):
                        starting.add(int(name))
    return found, starting


def _execing(pid: int) -> bool:
    """Whether ``pid``, which shows no environment, is in the middle of an ``exec``.

    Kernel threads and processes that have exited show none either.
    """
    if Path(f"/proc/{pid}/cmdline").read_bytes():
        return False
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return fields[0] not in ("Z", "X") and not int(fields[6]) & _KERNEL_THREAD


def process_start(pid: int) -> str | None:
    """Process ``pid``'s start time in clock ticks after boot, ``None`` when it is not running.

    With the pid it names one process, however often the pid is reused (Linux's ``/proc``).
    """
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def holding(fd: int) -> set[int]:
    """The pids of the other processes with an open descriptor on what ``fd`` is (Linux).

    A pipe's holders are found this way whatever their environment or group: a process that
    cleared its environment (``env -i``) and left its group still holds a command's output
    pipes if it inherited them.
    """
    info = os.fstat(fd)
    me, found = os.getpid(), set()
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) != me:
                with contextlib.suppress(OSError), os.scandir(f"/proc/{name}/fd") as fds:
                    for entry in fds:
                        with contextlib.suppress(OSError):
                            held = os.stat(entry.path)
                            if (held.st_ino, held.st_dev) == (info.st_ino, info.st_dev):
                                found.add(int(name))
                                break
    return found


class Watchdog:
    """SIGKILLs what it guards when this process ends, unless :meth:`disarm` ran first.

    Args:
        pids: Processes to guard from the start; any that has already exited is left out.
    """

    def __init__(self, pids: set[int] | list[int] | tuple[int, ...] = ()) -> None:
        self._held: dict[tuple[str, int | str], str] = {}
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._write = -1
        self._disarmed = False
        for pid in sorted(pids):
            self.guard(pid)

    @property
    def pids(self) -> tuple[int, ...]:
        """The processes (and group leaders) guarded now, in order."""
        return tuple(sorted(pid for _, pid in self._held if isinstance(pid, int)))

    def guard(self, pid: int, *, group: bool = False) -> bool:
        """Guard process ``pid``, or with ``group`` its whole process group (``pid`` its id).

        Returns whether it is guarded: not when it has already exited, after :meth:`disarm`,
        or off Linux.
        """
        start = process_start(pid)
        if start is None or not sys.platform.startswith("linux"):
            return False
        key = ("g" if group else "p", pid)
        entry = f"{key[0]}:{pid}:{start}"
        with self._lock:
            if self._disarmed or not self._send(f"+ {entry}\n"):
                return False
            self._held[key] = entry
        return True

    def release(self, pid: int, *, group: bool = False) -> None:
        """Stop guarding what :meth:`guard` guarded (it ended the ordinary way)."""
        self._release(("g" if group else "p", pid))

    def guard_mark(self, mark: str) -> bool:
        """Guard every process whose environment carries ``mark`` (:func:`new_mark`).

        Returns whether it is guarded (as :meth:`guard`).
        """
        if not (mark.isalnum() and mark.isascii()) or not sys.platform.startswith("linux"):
            return False  # the guard matches it as a plain word
        with self._lock:
            if self._disarmed or not self._send(f"+ m:{mark}\n"):
                return False
            self._held[("m", mark)] = f"m:{mark}"
        return True

    def release_mark(self, mark: str) -> None:
        """Stop guarding what :meth:`guard_mark` guarded."""
        self._release(("m", mark))

    def _release(self, key: tuple[str, int | str]) -> None:
        with self._lock:
            entry = self._held.pop(key, None)
            if entry is not None:
                self._send(f"- {entry}\n")

    def disarm(self) -> None:
        """Stop guarding everything (it was shut down); idempotent."""
        with self._lock:
            self._disarmed = True
            self._held.clear()
            if self._process is not None:
                self._process.kill()
                self._process.wait()
                self._process = None
            if self._write >= 0:
                os.close(self._write)
                self._write = -1

    def _send(self, line: str) -> bool:
        try:
            if self._process is None:
                self._start()
            # one line is far below PIPE_BUF: written whole, never interleaved
            os.write(self._write, line.encode())
        except OSError:  # no sh, or the watchdog was killed from outside: nothing guards
            return False
        return True

    def _start(self) -> None:
        # Neither end survives an exec; a child forked without one (multiprocessing's fork)
        # holds the write end too, and the guard fires once it has ended as well.
        read, write = os.pipe()
        try:
            # its own session: a Ctrl-C to this process group leaves the guard standing
            self._process = subprocess.Popen(["sh", "-c", _GUARD, "agentgym-watchdog"],
                                             stdin=read, start_new_session=True)
        except OSError:
            os.close(write)
            raise
        finally:
            os.close(read)
        self._write = write


_shared: tuple[int, Watchdog] | None = None  # (the pid that started it, it)
_shared_lock = threading.Lock()


def shared_watchdog() -> Watchdog:
    """This process's watchdog for processes that come and go (never disarmed).

    Started on first use; a forked child gets its own, so that its processes die with it.
    """
    global _shared
    with _shared_lock:
        if _shared is None or _shared[0] != os.getpid():
            _shared = (os.getpid(), Watchdog())
        return _shared[1]
