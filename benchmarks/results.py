"""Write one benchmark's section into docs/benchmarks.md, keeping the other sections."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
HEADER = ("# Benchmarks\n\nMeasured figures, written by the scripts in `benchmarks/`; each "
          "section names the command that produced it.\n")


def write_section(title: str, body: str, path: Path = DOC) -> None:
    """Replace (or append) the ``## title`` section of the benchmarks document."""
    text = path.read_text(encoding="utf-8") if path.exists() else HEADER
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
