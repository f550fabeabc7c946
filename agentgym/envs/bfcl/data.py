"""BFCL's categories, tasks and ground truth, read from the installed ``bfcl-eval`` package.

Nothing here copies BFCL data: every entry comes from ``bfcl_eval/data/`` through the
package's own loaders (``load_dataset_entry``, ``load_ground_truth_entry``), which also add
the function docs of the multi-turn API classes and hold out the functions of
``multi_turn_miss_func``. Entries are cached per process and handed out as deep copies, so
an episode can never change another's task.

Splits: BFCL has none (it is an evaluation benchmark). ``split="all"`` (the default) is the
whole category in file order, the way BFCL scores it; ``"train"``/``"test"`` are a fixed
80/20 partition by a hash of the entry id, stable across machines and package versions that
keep the id.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agentgym.errors import ConfigError, MissingExtraError, did_you_mean

Split = Literal["all", "train", "test"]
SPLITS: tuple[str, ...] = ("all", "train", "test")
BFCL_PIN = "2026.3.23"
"""The ``bfcl-eval`` release these envs are tested with (installed by ``.ci/test.sh``)."""
TRAIN_PERCENT = 80
"""Share of each category's entries (by id hash) in the ``train`` split."""


@dataclass(frozen=True)
class Category:
    """One BFCL test category this env family supports (Python ones; Java and JavaScript not).

    Attributes:
        name: BFCL's category name (``simple_python``, ``multi_turn_base``, ...).
        label: The leaderboard's name for its accuracy column.
        kind: ``ast`` (AST checker on the calls), ``irrelevance`` (no call is right),
            ``relevance`` (any call is right) or ``multi_turn``.
    """

    name: str
    label: str
    kind: Literal["ast", "irrelevance", "relevance", "multi_turn"]


CATEGORIES: dict[str, Category] = {c.name: c for c in (
    Category("simple_python", "Non-Live Python Simple AST", "ast"),
    Category("multiple", "Non-Live Multiple AST", "ast"),
    Category("parallel", "Non-Live Parallel AST", "ast"),
    Category("parallel_multiple", "Non-Live Parallel Multiple AST", "ast"),
    Category("irrelevance", "Non-Live Irrelevance Detection", "irrelevance"),
    Category("live_simple", "Live Python Simple AST", "ast"),
    Category("live_multiple", "Live Python Multiple AST", "ast"),
    Category("live_parallel", "Live Python Parallel AST", "ast"),
    Category("live_parallel_multiple", "Live Python Parallel Multiple AST", "ast"),
    Category("live_irrelevance", "Live Irrelevance Detection", "irrelevance"),
    Category("live_relevance", "Live Relevance Detection", "relevance"),
    Category("multi_turn_base", "Multi Turn Base", "multi_turn"),
    Category("multi_turn_miss_func", "Multi Turn Miss Func", "multi_turn"),
    Category("multi_turn_miss_param", "Multi Turn Miss Param", "multi_turn"),
    Category("multi_turn_long_context", "Multi Turn Long Context", "multi_turn"),
)}
SINGLE_TURN = tuple(n for n, c in CATEGORIES.items() if c.kind != "multi_turn")
MULTI_TURN = tuple(n for n, c in CATEGORIES.items() if c.kind == "multi_turn")


@dataclass(frozen=True)
class BFCLTask:
    """One BFCL entry with its ground truth.

    Attributes:
        id: BFCL's entry id (``simple_python_0``, ``multi_turn_base_12``, ...).
        category: The entry's category.
        entry: The entry as BFCL's loader returns it (``question``, ``function``, and for
            multi-turn ``initial_config``, ``involved_classes``, ``missed_function``).
        ground_truth: BFCL's ``possible_answer`` (AST categories: a list of
            ``{function: {param: [accepted values]}}``; multi-turn: the calls of each turn
            as Python call strings); ``None`` where BFCL has none (relevance, irrelevance).
    """

    id: str
    category: Category
    entry: dict[str, Any]
    ground_truth: Any


def bfcl_modules() -> Any:
    """Import ``bfcl_eval`` (or say how to install it).

    BFCL's config module creates ``result/``, ``score/`` and a lock folder under
    ``BFCL_PROJECT_ROOT`` at import; unless the user chose a root we point it at a cache
    folder so nothing is written into site-packages.
    """
    os.environ.setdefault("BFCL_PROJECT_ROOT",
                          str(Path.home() / ".cache" / "agentgym" / "bfcl"))
    try:
        import bfcl_eval.utils as bfcl_utils
    except ImportError as exc:
        missing = getattr(exc, "name", None) or "bfcl_eval"
        error = MissingExtraError("bfcl-eval" if missing.startswith("bfcl_eval") else missing,
                                  "bfcl", "The BFCL envs")
        error.msg = (f"{error.args[0]}, then: pip install --no-deps "  # ImportError's str()
                     f"bfcl-eval=={BFCL_PIN} (without --no-deps it would pin numpy 1.26 and "
                     "pull ~20 provider SDKs the envs do not use)")
        error.args = (error.msg,)
        raise error from exc
    return bfcl_utils


@functools.cache
def bfcl_version() -> str:
    """The installed ``bfcl-eval`` version (recorded in every episode's info)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bfcl-eval")
    except PackageNotFoundError:
        bfcl_modules()  # raises the install hint
        return "unknown"


def category(name: str, *, multi_turn: bool | None = None) -> Category:
    """The category called ``name``.

    Args:
        name: A BFCL category name.
        multi_turn: When set, the category must be (or must not be) a multi-turn one.

    Raises:
        ConfigError: Unknown name (with the closest names), or the wrong kind for the env.
    """
    if not isinstance(name, str):
        raise ConfigError(f"category must be a BFCL category name (str), got {name!r}")
    allowed = (MULTI_TURN if multi_turn else SINGLE_TURN) if multi_turn is not None else \
        tuple(CATEGORIES)
    if name not in allowed:
        other = "" if name not in CATEGORIES else (
            f" ({name!r} is a {'multi' if CATEGORIES[name].kind == 'multi_turn' else 'single'}"
            "-turn category: use bfcl/"
            f"{'MultiTurn' if CATEGORIES[name].kind == 'multi_turn' else 'SingleTurn'}-v0)")
        raise ConfigError(f"category must be one of {list(allowed)}, got {name!r}{other}"
                          f"{did_you_mean(str(name), allowed) if not other else ''}")
    return CATEGORIES[name]


@functools.cache
def _load(name: str) -> tuple[BFCLTask, ...]:
    bfcl_utils = bfcl_modules()
    cat = CATEGORIES[name]
    entries = bfcl_utils.load_dataset_entry(name)
    if cat.kind in ("irrelevance", "relevance"):
        answers: list[Any] = [None] * len(entries)
    else:
        by_id = {a["id"]: a["ground_truth"] for a in bfcl_utils.load_ground_truth_entry(name)}
        answers = [by_id[e["id"]] for e in entries]
    return tuple(BFCLTask(e["id"], cat, e, a) for e, a in zip(entries, answers, strict=True))


def in_split(task_id: str, split: str) -> bool:
    """Whether ``task_id`` belongs to ``split`` (the fixed hash partition)."""
    if split == "all":
        return True
    bucket = int(hashlib.sha256(task_id.encode()).hexdigest()[:8], 16) % 100
    return (bucket < TRAIN_PERCENT) == (split == "train")


def task_ids(name: str, split: str = "all") -> list[str]:
    """Ids of a category's entries in ``split``, in file order."""
    return [t.id for t in _load(category(name).name) if in_split(t.id, split)]


def get_task(name: str, split: str = "all", *, index: int | None = None,
             task_id: str | None = None) -> BFCLTask:
    """One entry of a category (a private deep copy).

    Args:
        name: The category.
        split: ``all``, ``train`` or ``test``.
        index: Pick the ``index % n``-th entry of the split, in file order.
        task_id: Pick the entry with this BFCL id (it must be in the split).

    Raises:
        ConfigError: Unknown id (with the closest ids) or an id outside the split.
    """
    if split not in SPLITS:
        raise ConfigError(f"split must be one of {SPLITS}, got {split!r}")
    tasks = _load(category(name).name)
    if task_id is not None:
        found = next((t for t in tasks if t.id == task_id), None)
        if found is None:
            raise ConfigError(f"no BFCL entry {task_id!r} in category {name!r}"
                              f"{did_you_mean(str(task_id), [t.id for t in tasks])}; ids look "
                              f"like {tasks[0].id!r}")
        if not in_split(found.id, split):
            raise ConfigError(f"BFCL entry {task_id!r} is not in the {split!r} split; make the "
                              "env with split='all' to reach every entry")
        return copy.deepcopy(found)
    chosen = [t for t in tasks if in_split(t.id, split)]
    return copy.deepcopy(chosen[(index or 0) % len(chosen)])
