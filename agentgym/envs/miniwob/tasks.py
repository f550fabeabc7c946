"""The MiniWoB++ tasks the installed ``miniwob`` package ships.

Each task is one HTML page under ``miniwob/html/miniwob/`` with its generator, its reward
function and its time limit in the page's own JavaScript. We read the page list from the
installed package at run time (never a copy) and locate the package without importing it:
its ``__init__`` registers Selenium-driven Gymnasium envs we do not use.
"""

from __future__ import annotations

import functools
import importlib.util
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from agentgym.errors import ConfigError, MissingExtraError, did_you_mean

PACKAGE = "miniwob"


@functools.cache
def html_dir() -> Path:
    """The folder of the installed package's task pages.

    Raises:
        MissingExtraError: The ``miniwob`` package is not installed.
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtraError(PACKAGE, "miniwob", "the MiniWoB++ envs")
    folder = Path(next(iter(spec.submodule_search_locations))) / "html" / "miniwob"
    if not folder.is_dir():
        raise MissingExtraError(PACKAGE, "miniwob", f"the MiniWoB++ envs (no pages in {folder})")
    return folder


@functools.cache
def task_names() -> tuple[str, ...]:
    """Every task of the installed package, sorted (``click-button``, ``email-inbox``, ...)."""
    return tuple(sorted(p.stem for p in html_dir().glob("*.html")))


def package_version() -> str:
    """The installed ``miniwob`` version (recorded in every episode's info)."""
    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        return "unknown"


def task_page(task: str) -> Path:
    """The page of ``task``.

    Raises:
        ConfigError: No such task in the installed package (with a did-you-mean).
    """
    names = task_names()
    if task not in names:
        raise ConfigError(
            f"unknown MiniWoB++ task {task!r}{did_you_mean(task, names) or '.'} The installed "
            f"miniwob {package_version()} has {len(names)} tasks; list them with "
            "`python -m agentgym.envs.miniwob`")
    return html_dir() / f"{task}.html"
