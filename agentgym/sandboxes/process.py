"""A child process's exit, as an event loop future, for processes started with ``subprocess``.

The local sandbox and the Python interpreter start their processes with ``subprocess.Popen``
rather than asyncio's subprocess transport: the start is one call with no await in it, so
the process is guarded (:func:`agentgym.watchdog.shared_watchdog`) before any cancel can
arrive, and an event loop that closes while such a process runs does not wait for pipes it
never connected (asyncio's transport, cancelled by the loop's close while it connects them,
waits forever on Python 3.11). :class:`ProcessExit` is the part of the transport they keep:
a future that is done when the process has exited and was reaped.
"""

from __future__ import annotations

import asyncio
import os
import subprocess


class ProcessExit:
    """``done`` holds a process's exit status once it exited and was reaped.

    The loop watches a pidfd (Linux 5.3); where there is none (an older kernel, a seccomp
    filter that refuses it) the process is polled every 10 ms. :meth:`close` stops watching;
    call it when done with the process.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, proc: subprocess.Popen[bytes]) -> None:
        self._loop, self._proc = loop, proc
        self.done: asyncio.Future[int] = loop.create_future()
        self._poll: asyncio.TimerHandle | None = None
        try:
            self._fd: int | None = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            self._fd = None
            self._check()
        else:
            loop.add_reader(self._fd, self._check)

    def _check(self) -> None:
        code = self._proc.poll()
        if code is None:
            if self._fd is None:
                self._poll = self._loop.call_later(0.01, self._check)
            return
        if self._fd is not None:
            self._loop.remove_reader(self._fd)
        if not self.done.done():
            self.done.set_result(code)

    async def wait(self, timeout: float) -> int | None:  # noqa: ASYNC109 - a bound, not a deadline
        """The exit status, waiting up to ``timeout`` seconds; ``None`` if it still runs.

        The wait is shielded: cancelling it leaves ``done`` to complete.
        """
        try:
            return await asyncio.wait_for(asyncio.shield(self.done), timeout)
        except TimeoutError:
            return None

    def close(self) -> None:
        """Stop watching (idempotent); ``done`` stays as it is."""
        if self._poll is not None:
            self._poll.cancel()
        if self._fd is not None:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = None
