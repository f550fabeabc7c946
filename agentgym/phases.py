"""Long commands say which phase they are in and how far it got, on a terminal or in a log.

:class:`Phases` shows a live progress bar on a terminal and, when the output is a file or a
pipe (CI, ``nohup``, ``> log``), writes plain timestamped lines instead: one when a phase
starts, one when its description changes, one when it ends, and one at least every
``every_s`` seconds while it runs, whether or not it advanced (a heartbeat, so a phase whose
items take minutes each still shows it is alive). A redirected run is never silent for long.

It also answers the part of rich's ``Progress`` API that long-running code calls
(``add_task``, ``update``, ``advance``), so code written against a rich progress bar (the
trainer's loop) reports through it unchanged.

Example:
    >>> import io
    >>> from rich.console import Console
    >>> out = io.StringIO()
    >>> with Phases(Console(file=out), live=False, clock=lambda: 0.0) as phases:
    ...     task = phases.add_task("rollouts", total=2)
    ...     phases.advance(task)
    ...     phases.advance(task)
    >>> print(out.getvalue().strip())
    [0 s] rollouts 0/2
    [0 s] rollouts 2/2 done
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


@dataclass
class _Phase:
    description: str
    total: float | None
    completed: float
    started: float
    printed: float


class Phases:
    """Progress of the phases of a long command (a context manager).

    Args:
        console: Where to write; default: standard error.
        live: A live bar (True) or plain lines (False); default: a bar on a terminal only.
        every_s: Plain mode: most seconds between two lines of a running phase.
        clock: Seconds, monotonic (tests pass their own).
        heartbeat: Plain mode: print running phases every ``every_s`` real seconds even
            when nothing advanced.
    """

    def __init__(self, console: Console | None = None, *, live: bool | None = None,
                 every_s: float = 15.0, clock: Callable[[], float] = time.monotonic,
                 heartbeat: bool = True) -> None:
        self.console = console or Console(stderr=True)
        self.live = self.console.is_terminal if live is None else live
        self.every_s = every_s
        self._clock = clock
        self._start = clock()
        self._phases: dict[int, _Phase] = {}
        self._ids = itertools.count()  # plain mode's task ids (never reused)
        self._bar: Any = None  # a rich Progress (its stubs say int where it takes float)
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        if not self.live and heartbeat and every_s > 0:
            self._beat = threading.Thread(target=self._heartbeat, name="agentgym-phases",
                                          daemon=True)
        if self.live:
            self._bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=self.console, transient=False)

    def __enter__(self) -> Phases:
        if self._bar is not None:
            self._bar.start()
        if self._beat is not None:
            self._beat.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
        if self._beat is not None and self._beat.is_alive():
            self._stop.set()
            self._beat.join()

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.every_s):
            now = self._clock()
            for phase in list(self._phases.values()):
                running = phase.total is None or phase.completed < phase.total
                if running and now - phase.printed >= self.every_s:
                    phase.printed = now
                    self._line(phase)

    def add_task(self, description: str, total: float | None = None, completed: float = 0,
                 **_: Any) -> int:
        """Start a phase; returns its id (as rich's ``Progress.add_task``)."""
        now = self._clock()
        task = (self._bar.add_task(description, total=total, completed=completed)
                if self._bar is not None else next(self._ids))
        self._phases[task] = _Phase(description, total, completed, now, now)
        if self._bar is None:
            self._line(self._phases[task])
        return task

    def update(self, task: int, *, completed: float | None = None, advance: float | None = None,
               description: str | None = None, total: float | None = None, **_: Any) -> None:
        """Move a phase on, rename it or change its total (as rich's ``Progress.update``)."""
        phase = self._phases[task]
        renamed = description is not None and description != phase.description
        if completed is not None:
            phase.completed = completed
        if advance is not None:
            phase.completed += advance
        if description is not None:
            phase.description = description
        if total is not None:
            phase.total = total
        if self._bar is not None:
            self._bar.update(task, completed=phase.completed, description=phase.description,
                             total=phase.total)
            return
        now = self._clock()
        finished = phase.total is not None and phase.completed >= phase.total
        if renamed or finished or now - phase.printed >= self.every_s:
            phase.printed = now
            self._line(phase, " done" if finished else "")

    def remove_task(self, task: int) -> None:
        """Forget a phase that is over: off the bar and the heartbeat (as rich's)."""
        self._phases.pop(task, None)
        if self._bar is not None:
            self._bar.remove_task(task)

    def advance(self, task: int, advance: float = 1) -> None:
        """One more item of a phase done (as rich's ``Progress.advance``)."""
        self.update(task, advance=advance)

    def note(self, text: str) -> None:
        """A line that stays (a measured score, what was written where); printed literally."""
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def _line(self, phase: _Phase, suffix: str = "") -> None:
        count = (f" {phase.completed:g}/{phase.total:g}" if phase.total is not None
                 else f" {phase.completed:g}")
        self.note(f"[{self._clock() - self._start:.0f} s] {phase.description}{count}{suffix}")


def exit_interrupted(console: Console, what: str) -> NoReturn:
    """End a command stopped by Ctrl-C at once: say what was kept, exit with 130.

    Call it once the command's files are closed. Exit handlers run (they stop helper
    processes such as JVM pools); the interpreter's own teardown is skipped, because freeing
    torch and every loaded module took 8 s on a busy 2-core machine, against a promise to
    stop within 2 s.
    """
    console.print(f"interrupted: {what}", markup=False, highlight=False, soft_wrap=True)
    exit_now(130)


def exit_now(code: int) -> NoReturn:
    """Exit with ``code`` at once: flush, run exit handlers, skip the interpreter's teardown.

    For a command whose files are closed and whose work is over (a server stopped by
    Ctrl-C): see :func:`exit_interrupted` for why the teardown is skipped.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()  # the one way to run them before os._exit
    os._exit(code)


class JsonlTail:
    """Calls ``on_row`` with each JSON line appended to a file, from a background thread.

    A command shows what a long job logs as it logs it (a training run's held-out score
    before the first update) without the job knowing about the terminal. Use it as a context
    manager; it reads what is left when it stops.

    Args:
        path: The JSONL file (it may not exist yet).
        on_row: Called with each complete line's object.
        every_s: Seconds between two looks at the file.
    """

    def __init__(self, path: str | os.PathLike[str], on_row: Callable[[dict[str, Any]], None],
                 every_s: float = 0.5) -> None:
        self.path, self.on_row, self.every_s = Path(path), on_row, every_s
        self._offset = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="agentgym-tail", daemon=True)

    def __enter__(self) -> JsonlTail:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            stopping = self._stop.wait(self.every_s)
            self._read()
            if stopping:
                return

    def _read(self) -> None:
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return
        complete = data[:data.rfind(b"\n") + 1]  # a line being written waits for its end
        self._offset += len(complete)
        for line in complete.decode("utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                self.on_row(row)
