"""Keep freed tensor memory from staying with the process: tcmalloc, else glibc's threshold.

glibc serves a block above its mmap threshold (128 KiB at start) with ``mmap`` and gives it
back to the system when freed, but each such free raises the threshold to that block's size
(up to 32 MiB), so later blocks of that size come from the heap, where freed memory mostly
stays with the process. The tensors of a training step (activations, logits, gradients)
are such blocks, freed and allocated again every step: measured on the times-table job
(SmolLM2-135M-Instruct, LoRA, 3 steps on 2 CPU cores), peak resident memory was 4.9 GB with
the moving threshold and 2.6 GB with it fixed at 128 KiB, for about 10% more CPU time
(page faults of fresh mappings). :func:`fix_mmap_threshold` fixes it (``mallopt(M_MMAP_THRESHOLD,
...)``, which also turns the moving threshold off); it is a no-op where the C library is not
glibc.

tcmalloc (Debian's ``libtcmalloc-minimal4``; vLLM's CPU build asks for it too) keeps freed
blocks in size classes for reuse instead, without the page faults: three steps of the agent
job's warm start (1024-token passes, gradient checkpointing) peaked at 3.03 GB under glibc,
1.76 GB with the fixed threshold in 3:14 instead of 2:09, and 1.78 GB under tcmalloc in 2:17;
the agent job's RL updates took 130 and 105 s under tcmalloc against 223 and 190 s with the
fixed threshold, whose training process peaked 0.7 GB lower (docs/agent-job.md, "The
allocator: tcmalloc"). A C allocator cannot be swapped once Python runs, so the
commands that train or generate (:data:`PRELOADED_COMMANDS`) start themselves again with it
preloaded, once (:func:`rerun_with_tcmalloc`), and so does vLLM's engine process
(:func:`with_tcmalloc`). ``AGENTGYM_TCMALLOC=0`` keeps glibc's allocator.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys
from collections.abc import Mapping, Sequence

M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter number for the mmap threshold (malloc.h)."""
THRESHOLD = 128 * 1024
"""glibc's own starting value: blocks this large or larger are mmap'd and freed at once."""
SWITCH = "AGENTGYM_TCMALLOC"
"""Environment variable: ``0`` keeps glibc's allocator (no preload, no restart)."""
PRELOADED_COMMANDS = frozenset({"train", "sft", "rollout", "eval"})
"""The ``agentgym`` commands that start again under tcmalloc (they load models)."""
_MARK = "AGENTGYM_TCMALLOC_PRELOADED"  # set by the restart: the path to take out of LD_PRELOAD
_PATTERNS = ("/usr/lib/*-linux-gnu/libtcmalloc_minimal.so.*", "/usr/lib64/libtcmalloc_minimal.so.*",
             "/usr/local/lib/libtcmalloc_minimal.so.*", "/usr/lib/*-linux-gnu/libtcmalloc.so.*",
             "/usr/lib64/libtcmalloc.so.*", "/usr/local/lib/libtcmalloc.so.*")


def fix_mmap_threshold(threshold: int = THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes for this process.

    Returns:
        Whether it was set (False off Linux, without glibc, or where tcmalloc serves malloc).
    """
    if not sys.platform.startswith("linux") or tcmalloc_loaded():
        return False  # under tcmalloc glibc's heap serves nothing
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, threshold))


def release_free_memory() -> bool:
    """Give the memory this process freed back to the system; whether the allocator could.

    Before another process takes memory (a llama.cpp server starting beside the trainer):
    tcmalloc keeps freed blocks for reuse (``MallocExtension_ReleaseFreeMemory`` returns
    them), glibc keeps some at the top of its heap (``malloc_trim``).
    """
    here = ctypes.CDLL(None)
    for name, args in (("MallocExtension_ReleaseFreeMemory", ()), ("malloc_trim", (0,))):
        function = getattr(here, name, None)
        if function is not None:
            function(*args)
            return True
    return False


def find_tcmalloc() -> str | None:
    """Path of a tcmalloc shared library in the system's library folders, else None."""
    for pattern in _PATTERNS:
        found = sorted(p for p in glob.glob(pattern) if "debug" not in p)
        if found:
            return found[0]
    return None


def tcmalloc_loaded() -> bool:
    """Whether tcmalloc is mapped into this process (preloaded, it serves every malloc)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return any("libtcmalloc" in line for line in maps)
    except OSError:
        return False


def with_tcmalloc(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with tcmalloc first in ``LD_PRELOAD`` (unchanged if off, absent or already in)."""
    out = dict(env)
    preload = out.get("LD_PRELOAD", "")
    path = None if out.get(SWITCH) == "0" or "libtcmalloc" in preload else find_tcmalloc()
    if path is not None and sys.platform.startswith("linux"):
        out["LD_PRELOAD"] = f"{path}:{preload}" if preload else path
    return out


def rerun_with_tcmalloc(argv: Sequence[str]) -> None:
    """Start this command again with tcmalloc preloaded, if it trains or generates.

    Replaces the process (same pid, open files and terminal) when ``argv[0]`` is one of
    :data:`PRELOADED_COMMANDS`, ``argv`` ends the command line the process was started with
    (a caller that calls the CLI's ``main`` in-process with other arguments is left alone),
    tcmalloc is found and not loaded, and ``AGENTGYM_TCMALLOC`` is not ``0``; otherwise
    returns. In the restarted process, tcmalloc is taken out of the
    ``LD_PRELOAD`` its children inherit (browsers, JVMs and sandboxes keep their own
    allocators; vLLM's engine gets it back through :func:`with_tcmalloc`).

    Args:
        argv: The command's arguments after the program name.
    """
    mark = os.environ.pop(_MARK, None)
    if mark is not None:  # the restarted process: its children start without the preload
        kept = [p for p in os.environ.get("LD_PRELOAD", "").split(":") if p and p != mark]
        if kept:
            os.environ["LD_PRELOAD"] = ":".join(kept)
        else:
            os.environ.pop("LD_PRELOAD", None)
        return
    if not argv or argv[0] not in PRELOADED_COMMANDS or "--help" in argv \
            or list(sys.orig_argv[-len(argv):]) != list(argv) or tcmalloc_loaded():
        return  # (orig_argv: only the command this process was started as is run again)
    env = with_tcmalloc(os.environ)
    if env.get("LD_PRELOAD") == os.environ.get("LD_PRELOAD"):
        return  # off, not installed, or not Linux
    env[_MARK] = env["LD_PRELOAD"].split(":", 1)[0]
    sys.stdout.flush()
    sys.stderr.flush()
    # orig_argv keeps how Python was started (`-m agentgym` or the console script's path)
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
