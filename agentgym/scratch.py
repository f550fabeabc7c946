"""Scratch directories that outlive no process for long.

A local sandbox's root, an interpreter's working directory, the vLLM backend's weight files
(in ``/dev/shm``, memory) and the llama.cpp backend's GGUF are removed when their owner closes
them. A process killed outright (SIGKILL, the OOM killer) closes nothing, and they stay: a
model's weights are half a gigabyte of memory or disk, a SWE task's repository copy tens of
megabytes, and a trainer killed again and again fills either. So each directory is named after
its owner, ``PREFIX<pidns>-<pid>-<start>-XXXXXXXX`` (the owner's pid namespace, pid and start
time), and the first :func:`scratch_dir` of a prefix in a process removes the directories of
that prefix whose owner is gone, the way a sandbox pool removes the containers of dead owners
when it starts. An owner is judged only within its own pid namespace: a directory made in another
(a container sharing the temporary folder) is left alone, and so is one not named this way.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
from pathlib import Path

from agentgym.watchdog import process_start

_swept: set[tuple[int, str, str]] = set()  # (pid, prefix, folder) swept in this process
_lock = threading.Lock()


def _pid_namespace() -> str:
    try:  # "pid:[4026531836]"
        return os.readlink("/proc/self/ns/pid").partition("[")[2].rstrip("]")
    except OSError:
        return ""


def scratch_dir(prefix: str, folder: str | None = None) -> Path:
    """A new directory ``folder/PREFIX...`` (default the temporary folder) owned by this process.

    The first call for ``prefix`` and ``folder`` in a process first removes that prefix's
    directories whose owner process has ended (:func:`sweep_scratch`).
    """
    folder = folder or tempfile.gettempdir()
    key = (os.getpid(), prefix, folder)
    with _lock:
        if key not in _swept:
            _swept.add(key)
            sweep_scratch(prefix, folder)
    ns, pid = _pid_namespace(), os.getpid()
    owner = f"{ns}-{pid}-{process_start(pid)}-" if ns else ""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{owner}", dir=folder))


def sweep_scratch(prefix: str, folder: str | None = None) -> int:
    """Remove ``folder``'s ``PREFIX<pidns>-<pid>-<start>-*`` directories whose owner is gone.

    Returns how many it removed. Only directories made in this process's pid namespace are
    judged; a running owner keeps its directories (its start time must match, so a reused pid
    does not).
    """
    ns = _pid_namespace()
    if not ns:
        return 0
    name = re.compile(re.escape(prefix) + r"(\d+)-(\d+)-(\d+)-[^/]+")
    removed = 0
    try:
        entries = list(os.scandir(folder or tempfile.gettempdir()))
    except OSError:
        return 0
    for entry in entries:
        found = name.fullmatch(entry.name)
        if found is None or found[1] != ns or not entry.is_dir(follow_symlinks=False):
            continue
        if process_start(int(found[2])) == found[3]:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed += 1
    return removed
