"""Evaluation suites: named, versioned lists of (env, split, tasks, seeds, rollouts, kwargs).

Built-in suites are the YAML files in ``agentgym/suites/`` (format in its ``README.md``);
code adds more with :func:`register_suite`; a path to a YAML file works wherever a name does.
Composite suites (``includes:``) pull in other suites by name or glob, so ``all-local`` picks
up every family suite that needs neither Docker nor a browser without naming it.
"""

from __future__ import annotations

import fnmatch
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, TypeGuard

import yaml

from agentgym.errors import ConfigError, did_you_mean
from agentgym.files import yaml_error_message

_ENTRY_KEYS = {"env", "name", "split", "tasks", "seed", "seeds", "rollouts", "kwargs",
               "max_turns"}
_SUITE_KEYS = {"name", "version", "description", "requires", "entries", "includes",
               "local_only", "exclude"}
REQUIREMENTS = ("docker", "browser", "network", "gpu")
MAX_EPISODES_PER_ENTRY = 1_000_000
"""Most tasks x rollouts one entry may ask for: the eval's work list is built up front, and
an absurd count would exhaust memory before the first episode (split it into entries)."""
MAX_SEED = 2**63
"""Task seeds lie in [0, MAX_SEED): envs seed numpy and torch generators with them."""


@dataclass(frozen=True)
class SuiteEntry:
    """One env of a suite.

    Attributes:
        env: Registered env id.
        name: Label, unique in the suite; results are keyed by ``(name, seed, rollout)``.
        seeds: Task seeds, one task each.
        rollouts: Rollouts per task (pass@k needs ``rollouts >= k``).
        split: Passed to the env as ``split=`` when set.
        kwargs: Keyword arguments for ``agentgym.make``.
        max_turns: Override of the env's turn limit.
        suite: The suite this entry was defined in (``name@version``).
    """

    env: str
    name: str
    seeds: tuple[int, ...]
    rollouts: int = 1
    split: str | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    max_turns: int | None = None
    suite: str = ""

    def make_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``agentgym.make`` (kwargs, split, max_turns)."""
        out = dict(self.kwargs)
        if self.split is not None:
            out["split"] = self.split
        if self.max_turns is not None:
            out["max_turns"] = self.max_turns
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (recorded in results so runs stay comparable)."""
        return {"env": self.env, "name": self.name, "seeds": list(self.seeds),
                "rollouts": self.rollouts, "split": self.split, "kwargs": dict(self.kwargs),
                "max_turns": self.max_turns, "suite": self.suite}


@dataclass(frozen=True)
class Suite:
    """A named, versioned suite.

    Attributes:
        name: Suite name.
        version: Bumped whenever an entry changes.
        entries: The envs, includes already expanded.
        description: One line.
        requires: What it needs beyond local CPU Python (``docker``, ``browser``, ...).
        includes: Names or globs of the suites it includes (composite suites).
        local_only: Keep only included suites with empty ``requires``.
        exclude: Names or globs of included suites to leave out.
        source: Where it was defined (a file path or ``"code"``).
    """

    name: str
    version: int
    entries: tuple[SuiteEntry, ...] = ()
    description: str = ""
    requires: tuple[str, ...] = ()
    includes: tuple[str, ...] = ()
    local_only: bool = False
    exclude: tuple[str, ...] = ()
    source: str = "code"

    def __post_init__(self) -> None:
        # Entries built in code name their suite here, so results record where they came from.
        object.__setattr__(self, "entries", tuple(
            e if e.suite else replace(e, suite=self.tag) for e in self.entries))

    @property
    def tag(self) -> str:
        """``name@version``, the id results are recorded under."""
        return f"{self.name}@{self.version}"

    def resolve(self) -> Suite:
        """The suite with ``includes`` expanded into entries, every env id checked."""
        entries = [_checked(e) for e in self.entries]
        requires = set(self.requires)
        for sub in _included(self):
            entries.extend(sub.entries)
            requires |= set(sub.requires)
        seen: dict[str, str] = {}
        for e in entries:
            if e.name in seen:
                raise ConfigError(f"suite {self.name!r}: entry label {e.name!r} appears in both "
                                  f"{seen[e.name]} and {e.suite}; give one a distinct `name:`")
            seen[e.name] = e.suite
        if not entries:
            raise ConfigError(f"suite {self.name!r} has no entries (and its includes matched no "
                              "loadable suite)")
        return Suite(self.name, self.version, tuple(entries), self.description,
                     tuple(sorted(requires)), (), False, (), self.source)

    def with_overrides(self, tasks: int | None = None, min_rollouts: int | None = None,
                       rollouts: int | None = None, max_turns: int | None = None) -> Suite:
        """A copy with fewer tasks, other rollout counts, or shorter episodes.

        Args:
            tasks: At most this many tasks per entry.
            min_rollouts: At least this many rollouts per task.
            rollouts: Exactly this many rollouts per task.
            max_turns: At most this many turns per episode (never above the env's own limit).
        """
        entries = []
        for e in self.entries:
            seeds = e.seeds if tasks is None else e.seeds[:tasks]
            n = e.rollouts if min_rollouts is None else max(e.rollouts, min_rollouts)
            n = n if rollouts is None else rollouts
            turns = e.max_turns
            if max_turns is not None:
                import agentgym

                own = e.max_turns or agentgym.spec(e.env).max_turns
                turns = min(max_turns, own) if own else max_turns
            _check_size(len(seeds), n, f"suite {self.name!r}, entry {e.name!r}")
            entries.append(SuiteEntry(e.env, e.name, seeds, n, e.split, e.kwargs, turns, e.suite))
        return Suite(self.name, self.version, tuple(entries), self.description, self.requires,
                     self.includes, self.local_only, self.exclude, self.source)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"name": self.name, "version": self.version, "description": self.description,
                "requires": list(self.requires), "source": self.source,
                "entries": [e.to_dict() for e in self.entries]}


_REGISTERED: dict[str, Suite] = {}


def register_suite(suite: Suite | Mapping[str, Any] | str | Path) -> Suite:
    """Register a suite from code: a :class:`Suite`, a mapping in the YAML form, or a file.

    Example:
        >>> from agentgym.evaluation import register_suite
        >>> s = register_suite({"name": "tiny-math", "version": 1, "entries": [
        ...     {"env": "agentgym/MentalMath-v0", "tasks": 4, "split": "test"}]})
        >>> s.entries[0].seeds
        (0, 1, 2, 3)
    """
    if isinstance(suite, str | Path):
        suite = load_suite_file(Path(suite))
    elif not isinstance(suite, Suite):
        suite = parse_suite(suite, "code")
    _REGISTERED[suite.name] = suite
    return suite


def builtin_dir() -> Path:
    """The folder of the built-in suite files (shipped in the wheel)."""
    return Path(str(resources.files("agentgym") / "suites"))


def _builtin() -> dict[str, Path]:
    return {p.stem: p for p in sorted(builtin_dir().glob("*.yaml"))}


def suite_names() -> list[str]:
    """Names of the built-in and registered suites."""
    return sorted(set(_builtin()) | set(_REGISTERED))


def get_suite(name: str | Path, *, resolve: bool = True) -> Suite:
    """The suite called ``name`` (or the YAML file at that path), includes expanded.

    Raises:
        ConfigError: No such suite (the message names the closest ones), or a bad file.
    """
    if name in _REGISTERED:
        suite = _REGISTERED[str(name)]
    elif str(name) in _builtin():
        suite = load_suite_file(_builtin()[str(name)])
    elif str(name).endswith((".yaml", ".yml")) or Path(name).is_file():
        suite = load_suite_file(Path(name))
    else:
        raise ConfigError(f"no suite named {str(name)!r}{did_you_mean(str(name), suite_names())}"
                          f"; available: {suite_names()} (or pass a suite YAML file)")
    return suite.resolve() if resolve else suite


def load_suite_file(path: Path) -> Suite:
    """Parse one suite YAML file (includes not yet expanded)."""
    if not path.is_file():
        raise ConfigError(f"no suite file at {str(path)!r}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(yaml_error_message(exc, path)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at "
                          f"offset {exc.start}); expected a suite YAML file") from None
    return parse_suite(data, str(path))


def parse_suite(data: Any, source: str) -> Suite:
    """Build a :class:`Suite` from its YAML form, checking every field."""
    where = f"suite {source}"
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping with name, version, entries; got "
                          f"{type(data).__name__}")
    _no_unknown(data, _SUITE_KEYS, where)
    name, version = data.get("name"), data.get("version", 1)
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: `name` must be a non-empty string, got {name!r}")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ConfigError(f"{where}: `version` must be a positive integer, got {version!r}")
    requires = tuple(_str_list(data.get("requires"), "requires", where))
    for r in requires:
        if r not in REQUIREMENTS:
            raise ConfigError(f"{where}: unknown requirement {r!r}; expected one of "
                              f"{list(REQUIREMENTS)}{did_you_mean(r, REQUIREMENTS)}")
    entries_raw = data.get("entries") or []
    if not isinstance(entries_raw, list):
        raise ConfigError(f"{where}: `entries` must be a list, got {type(entries_raw).__name__}")
    includes = tuple(_str_list(data.get("includes"), "includes", where))
    if not entries_raw and not includes:
        raise ConfigError(f"{where}: needs `entries` (a list of envs) or `includes`")
    tag = f"{name}@{version}"
    entries = tuple(_entry(e, f"{where} entry {i}", tag) for i, e in enumerate(entries_raw))
    return Suite(name, version, entries, str(data.get("description") or ""), requires, includes,
                 bool(data.get("local_only", False)),
                 tuple(_str_list(data.get("exclude"), "exclude", where)), source)


def _entry(data: Any, where: str, tag: str) -> SuiteEntry:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping with `env`, got {data!r}")
    _no_unknown(data, _ENTRY_KEYS, where)
    env = data.get("env")
    if not isinstance(env, str):
        raise ConfigError(f"{where}: `env` must be a registered env id, got {env!r}")
    if "seeds" in data:
        seeds = data["seeds"]
        if not isinstance(seeds, list) or not all(_is_int(s) for s in seeds) or not seeds:
            raise ConfigError(f"{where}: `seeds` must be a non-empty list of ints, got {seeds!r}")
        if any(not 0 <= s < MAX_SEED for s in seeds):
            raise ConfigError(f"{where}: `seeds` must lie in [0, 2**63), got "
                              f"{[s for s in seeds if not 0 <= s < MAX_SEED][:3]}; task seeds "
                              "count up from 0")
        if "tasks" in data and data["tasks"] != len(seeds):
            raise ConfigError(f"{where}: tasks={data['tasks']} but {len(seeds)} seeds are listed")
        seeds = tuple(seeds)
    else:
        tasks, first = data.get("tasks"), data.get("seed", 0)
        if not _is_int(tasks) or tasks < 1:
            raise ConfigError(f"{where}: `tasks` must be a positive integer, got {tasks!r}")
        if not _is_int(first) or not 0 <= first < MAX_SEED:
            raise ConfigError(f"{where}: `seed` (the first task seed) must be an int in [0, "
                              f"2**63), got {first!r}; task seeds count up from 0")
        _check_size(tasks, 1, where)  # before the seeds are built
        seeds = tuple(range(first, first + tasks))
    rollouts = data.get("rollouts", 1)
    if not _is_int(rollouts) or rollouts < 1:
        raise ConfigError(f"{where}: `rollouts` must be a positive integer, got {rollouts!r}")
    _check_size(len(seeds), rollouts, where)
    kwargs = data.get("kwargs") or {}
    if not isinstance(kwargs, Mapping):
        raise ConfigError(f"{where}: `kwargs` must be a mapping, got {kwargs!r}")
    max_turns = data.get("max_turns")
    if max_turns is not None and (not _is_int(max_turns) or max_turns < 1):
        raise ConfigError(f"{where}: `max_turns` must be a positive integer, got {max_turns!r}")
    split = data.get("split")
    return SuiteEntry(env, str(data.get("name") or env), seeds, rollouts,
                      None if split is None else str(split), dict(kwargs), max_turns, tag)


def _check_size(tasks: int, rollouts: int, where: str) -> None:
    """Refuse an entry whose work list would not fit in memory (see MAX_EPISODES_PER_ENTRY)."""
    if tasks * rollouts > MAX_EPISODES_PER_ENTRY:
        raise ConfigError(
            f"{where}: {tasks:,} tasks x {rollouts:,} rollouts = {tasks * rollouts:,} episodes; "
            f"expected at most {MAX_EPISODES_PER_ENTRY:,} per entry. Lower `tasks`, "
            "`rollouts` or -k, or split the work into several entries (each with its own "
            "`seed`)")


def _checked(entry: SuiteEntry) -> SuiteEntry:
    """Fail on an unknown env id (with did-you-mean) or kwargs the env does not take."""
    import agentgym

    spec = agentgym.spec(entry.env)
    accepted = spec.accepted_kwargs()
    if accepted is not None:
        unknown = sorted(set(entry.make_kwargs()) - accepted - {"max_turns"})
        if "split" in unknown:
            raise ConfigError(f"suite {entry.suite} entry {entry.name!r}: {entry.env} takes no "
                              "`split`; drop it and hold tasks out through `seed`/`seeds`")
        if unknown:
            raise ConfigError(
                f"suite {entry.suite} entry {entry.name!r}: {entry.env} does not accept "
                f"{unknown}; it accepts {sorted(accepted)}"
                + "".join(did_you_mean(u, accepted) for u in unknown))
    return entry


def _included(suite: Suite) -> list[Suite]:
    excluded = set()
    for pattern in suite.exclude:
        excluded |= set(fnmatch.filter(suite_names(), pattern))
    out: list[Suite] = []
    for pattern in suite.includes:
        is_glob = any(ch in pattern for ch in "*?[")
        names = fnmatch.filter(suite_names(), pattern) if is_glob else [pattern]
        if not is_glob and pattern not in suite_names():
            raise ConfigError(f"suite {suite.name!r} includes unknown suite {pattern!r}"
                              f"{did_you_mean(pattern, suite_names())}")
        for name in names:
            if name == suite.name or name in excluded or any(s.name == name for s in out):
                continue
            try:
                sub = get_suite(name, resolve=False)
                if is_glob and sub.includes:  # globs never pull in composites (no cycles)
                    continue
                if suite.local_only and sub.requires:
                    continue
                out.append(sub.resolve())
            except Exception as exc:
                if not is_glob:
                    raise
                warnings.warn(f"suite {suite.name!r}: skipped the suite {name!r} matched by "
                              f"{pattern!r}: {exc}", RuntimeWarning, stacklevel=2)
    return out


def _no_unknown(data: Mapping[str, Any], allowed: set[str], where: str) -> None:
    for key in sorted(set(data) - allowed):
        raise ConfigError(f"{where}: unknown key {key!r}{did_you_mean(str(key), allowed)}; "
                          f"valid keys: {sorted(allowed)}")


def _str_list(value: Any, key: str, where: str) -> Sequence[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: `{key}` must be a list of strings, got {value!r}")
    return value


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
