"""Write one benchmark's section into docs/benchmarks.md, keeping the other sections."""

from __future__ import annotations

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
