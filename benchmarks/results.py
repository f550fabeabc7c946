"""Write one benchmark's section into docs/benchmarks.md, keeping the other sections."""

from __future__ import annotations

import os
import platform
import re
import statistics
import threading
import time
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
HEADER = ("# Benchmarks\n\nMeasured figures, written by the scripts in `benchmarks/`; each "
          "section names the command that produced it.\n")


def percentile(xs: list[float], q: float) -> float:
    """The ``q`` quantile of ``xs`` (nearest rank)."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def latency_row(name: str, seconds: list[float], digits: int = 0) -> str:
    """A markdown row: name, count, p50, p95 and mean in milliseconds."""
    ms = [x * 1000 for x in seconds]
    return (f"| {name} | {len(ms)} | {percentile(ms, 0.5):.{digits}f} | "
            f"{percentile(ms, 0.95):.{digits}f} | {statistics.mean(ms):.{digits}f} |")


def write_section(title: str, body: str, path: Path = DOC) -> None:
    """Replace (or append) the ``## title`` section of the benchmarks document.

    A body that does not give this CPU's measured matmul peak gets :func:`machine_line`
    (CPU model, matmul peak measured now, load average), so every figure says what it
    was measured on.
    """
    text = path.read_text(encoding="utf-8") if path.exists() else HEADER
    if "matmul peak" not in body:
        body = body.strip() + "\n\n" + machine_line()
    section = f"## {title}\n\n{body.strip()}\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.M | re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text).rstrip() + "\n"
    else:
        text = text.rstrip() + "\n\n" + section
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"wrote section {title!r} to {path}")


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo, else the platform)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_note(load: tuple[float, float, float] | None = None) -> str:
    """CPU model, cores and load average, saying whether other work shared the machine.

    Args:
        load: ``os.getloadavg()`` taken when the measurement started (default: now).
    """
    one, five, fifteen = load if load is not None else os.getloadavg()
    cores = os.cpu_count() or 1
    busy = one >= 0.5 * cores
    return (f"{cpu_model()}, {cores} cores; load average {one:.1f} / {five:.1f} / "
            f"{fifteen:.1f} at the start (from `uptime`): "
            + ("other work shared the machine, so times are pessimistic" if busy
               else "an idle machine"))


def matmul_peak(n: int = 1024, seconds: float = 2.0) -> float | None:
    """Best float32 matmul FLOP/s of ``n × n`` products over about ``seconds`` (torch)."""
    try:
        import torch
    except ImportError:
        return None
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best, end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        torch.mm(a, b)
        best = max(best, 2 * n ** 3 / (time.perf_counter() - start))
    return best


def machine_line(start_load: float | None = None) -> str:
    """The machine a section was measured on: CPU model, cores, matmul peak and load.

    ``start_load`` is the 1-minute load average before the measured job started; when given,
    it (not the load when written, which includes the job itself) decides whether other work
    shared the machine.
    """
    peak = matmul_peak()
    one, five, fifteen = os.getloadavg()
    cores = os.cpu_count() or 1
    other = one if start_load is None else start_load
    speed = (f"float32 matmul peak {peak / 1e9:.1f} GFLOP/s (torch, measured when this "
             "section was written)" if peak else "matmul peak not measured (no torch)")
    line = (f"Measured on: {cpu_model()}, {cores} cores; {speed}; load average {one:.1f} / "
            f"{five:.1f} / {fifteen:.1f} when written (from `uptime`")
    if start_load is None:  # the load now includes the measured job's own processes
        return line + ", the measured job's own work included)."
    return line + ")" + ("; other work shared the machine, so times are pessimistic."
                         if other >= 0.5 * cores else ".")


class PeakMemory:
    """Peak summed RSS of a process and all its descendants, sampled every ``interval`` s.

    ``at_peak`` names who held it: ``(process name (pid), bytes)``, largest first. Used as a
    context manager around the measured work (``with PeakMemory(proc.pid) as memory:``).
    """

    def __init__(self, root: int | None = None, interval: float = 0.1) -> None:
        import psutil  # vLLM's dependency; only the scripts that measure memory need it

        self._psutil = psutil
        self.root = psutil.Process(root or os.getpid())
        self.interval = interval
        self.peak = 0
        self.at_peak: tuple[tuple[str, int], ...] = ()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            held = []
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except self._psutil.Error:  # the root has exited
                procs = []
            for p in procs:
                try:
                    held.append((f"{p.name()} ({p.pid})", p.memory_info().rss))
                except self._psutil.Error:
                    pass
            total = sum(size for _, size in held)
            if total > self.peak:
                self.peak, self.at_peak = total, tuple(sorted(held, key=lambda x: -x[1]))
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mb(self) -> float:
        return self.peak / 2**20
