"""The env registry: ``register``, ``make``, ``spec`` and the ``registry`` listing.

Ids are versioned, ``[namespace/]Name-vN``. Built-in envs register from
``agentgym.envs``; third-party packages register through the entry-point group
``agentgym.envs`` (each entry point names a function called with no arguments, or a module
whose import registers its envs). Every registered env is also registered in Gymnasium's
registry (see :mod:`agentgym.gym_bridge`).
"""

from __future__ import annotations

import importlib
import inspect
import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from agentgym.env import Env
from agentgym.errors import EnvArgumentError, RegistrationError, UnknownEnvError, did_you_mean

ENTRY_POINT_GROUP = "agentgym.envs"
# The namespace allows what Gymnasium's registry does too (no dots), so every id registers there.
ID_PATTERN = re.compile(r"^(?:(?P<ns>[\w-]+)/)?(?P<name>[\w.:-]+?)-v(?P<version>\d+)$")
DEFAULT_MAX_OBSERVATION_CHARS = 16_000
SYSTEM_REQUIREMENTS = {
    "docker": "a running Docker engine (agentgym sandbox engine starts a private one)",
    "browser": "Chromium for Playwright (apt-get install chromium)",
    "java": "a Java runtime, 11 or newer (apt-get install default-jre-headless)",
    "gpu": "a CUDA GPU",
    "network": "access to the internet",
}
"""What an env may need beyond Python packages, as named in ``register(requires=...)``."""
EXTRA_PREFIX = "extra:"
"""``requires`` entries of the form ``extra:NAME`` name a pip extra: agentgym[NAME]."""


@dataclass(frozen=True)
class EnvSpec:
    """A registry entry.

    Attributes:
        id: Versioned id, ``[namespace/]Name-vN``.
        entry_point: ``"module:attr"`` or a callable returning an env.
        kwargs: Default keyword arguments for the entry point.
        description: One line shown by ``agentgym envs``.
        max_turns: When set, ``make`` wraps the env in ``MaxTurns``.
        max_observation_chars: ``make`` wraps the env in ``ObservationCap`` with this cap.
        requires: What the env needs beyond agentgym's core: system parts
            (:data:`SYSTEM_REQUIREMENTS`: ``docker``, ``browser``, ``java``, ``gpu``,
            ``network``) and pip extras as ``extra:NAME``; shown by ``agentgym envs``.
        alias_of: For an id that names one configuration of another registered env (e.g.
            ``miniwob/click-button-v0`` for ``miniwob/MiniWoB-v0`` with ``task="click-button"``),
            that env's id. Tests that run every registered env run each base env once and
            a sample of its aliases.
    """

    id: str
    entry_point: str | Callable[..., Env]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    max_turns: int | None = None
    max_observation_chars: int | None = DEFAULT_MAX_OBSERVATION_CHARS
    requires: tuple[str, ...] = ()
    alias_of: str | None = None

    @property
    def extras(self) -> tuple[str, ...]:
        """The pip extras the env needs (``pip install 'agentgym[NAME]'``)."""
        return tuple(r[len(EXTRA_PREFIX):] for r in self.requires if r.startswith(EXTRA_PREFIX))

    @property
    def system_requirements(self) -> tuple[str, ...]:
        """The system parts the env needs (``docker``, ``browser``, ``java``, ...)."""
        return tuple(r for r in self.requires if not r.startswith(EXTRA_PREFIX))

    @property
    def namespace(self) -> str | None:
        """The part before ``/``, if any."""
        return _parse_id(self.id)[0]

    @property
    def name(self) -> str:
        """The name without namespace and version."""
        return _parse_id(self.id)[1]

    @property
    def version(self) -> int:
        """The ``N`` of ``-vN``."""
        return _parse_id(self.id)[2]

    def load(self) -> Callable[..., Env]:
        """Import and return the entry point."""
        if callable(self.entry_point):
            return self.entry_point
        module, _, attr = self.entry_point.partition(":")
        try:
            obj: Any = importlib.import_module(module)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            raise RegistrationError(
                f"env {self.id!r}: cannot load entry point {self.entry_point!r}: {exc}"
            ) from exc
        return obj

    def accepted_kwargs(self) -> set[str] | None:
        """Keyword arguments the entry point accepts, or None if it takes ``**kwargs``."""
        target = self.load()
        sig = inspect.signature(target.__init__ if inspect.isclass(target) else target)
        names: set[str] = set()
        for p in sig.parameters.values():
            if p.kind is p.VAR_KEYWORD:
                return None
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self":
                names.add(p.name)
        return names

    def make(self, **kwargs: Any) -> Env:
        """Build the env with ``kwargs`` over the defaults; see :func:`make`."""
        from agentgym.wrappers import MaxTurns, ObservationCap

        max_turns = kwargs.pop("max_turns", self.max_turns)
        max_chars = kwargs.pop("max_observation_chars", self.max_observation_chars)
        accepted = self.accepted_kwargs()
        if accepted is not None:
            unknown = sorted(set(kwargs) - accepted)
            if unknown:
                hints = "".join(did_you_mean(u, accepted) for u in unknown)
                raise EnvArgumentError(
                    f"{self.id} got unexpected keyword argument(s) {unknown}; it accepts "
                    f"{sorted(accepted | {'max_turns', 'max_observation_chars'})}{hints}"
                )
        env: Any = self.load()(**{**self.kwargs, **kwargs})  # wrapped below
        try:
            env.spec = self
        except AttributeError:  # a wrapper exposing spec read-only
            pass
        if max_chars is not None:
            env = ObservationCap(env, max_chars)
        if max_turns is not None:
            env = MaxTurns(env, max_turns)
        return env


def _check_requires(env_id: str, requires: Any) -> tuple[str, ...]:
    if isinstance(requires, str) or not all(isinstance(r, str) for r in requires):
        raise RegistrationError(f"requires for {env_id!r} must be a list of strings, got "
                                f"{requires!r}; for example requires=('docker', 'extra:swe')")
    for r in requires:
        if r.startswith(EXTRA_PREFIX):
            if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", r[len(EXTRA_PREFIX):]):
                raise RegistrationError(f"requires for {env_id!r}: {r!r} names no pip extra; "
                                        "expected 'extra:NAME', e.g. 'extra:web'")
        elif r not in SYSTEM_REQUIREMENTS:
            raise RegistrationError(
                f"requires for {env_id!r}: unknown requirement {r!r}; expected one of "
                f"{sorted(SYSTEM_REQUIREMENTS)} or 'extra:NAME'"
                f"{did_you_mean(r, SYSTEM_REQUIREMENTS)}")
    return tuple(requires)


def _parse_id(env_id: str) -> tuple[str | None, str, int]:
    match = ID_PATTERN.match(env_id) if isinstance(env_id, str) else None
    if match is None:
        raise RegistrationError(
            f"env id must look like 'namespace/Name-vN' (namespace optional), got {env_id!r}; "
            "for example 'myproject/Maze-v0'"
        )
    return match["ns"], match["name"], int(match["version"])


class _Registry(Mapping[str, EnvSpec]):
    """The id → spec mapping; loads built-ins and entry-point plugins on first read."""

    def __init__(self) -> None:
        self._specs: dict[str, EnvSpec] = {}
        self._loaded = False
        self._loading = False

    def load(self) -> None:
        """Register the built-in envs and the entry-point plug-ins (once; idempotent)."""
        self._ensure_loaded()

    def _ensure_loaded(self) -> None:
        if self._loaded or self._loading:
            return
        self._loading = True
        try:
            importlib.import_module("agentgym.envs")
            for ep in entry_points(group=ENTRY_POINT_GROUP):
                try:
                    obj = ep.load()
                    if callable(obj):
                        obj()
                except Exception as exc:  # one broken plugin must not hide every env
                    warnings.warn(
                        f"agentgym: the env plugin {ep.name!r} ({ep.value}) failed to load: "
                        f"{exc!r}; its envs are not registered", RuntimeWarning, stacklevel=2)
            self._loaded = True
        finally:
            self._loading = False

    def add(self, spec: EnvSpec) -> None:
        old = self._specs.get(spec.id)
        if old is not None and old.entry_point != spec.entry_point:
            # Two packages claiming one id is almost always a mistake; the later one wins.
            warnings.warn(f"env id {spec.id!r} registered again: {spec.entry_point!r} replaces "
                          f"{old.entry_point!r}; bump the version (-vN) for a different env",
                          stacklevel=3)
        self._specs[spec.id] = spec

    def __getitem__(self, env_id: str) -> EnvSpec:
        self._ensure_loaded()
        if env_id in self._specs:
            return self._specs[env_id]
        raise UnknownEnvError(self._unknown_message(env_id))

    def _unknown_message(self, env_id: str) -> str:
        msg = f"no env registered with id {env_id!r}"
        try:
            ns, name, _ = _parse_id(env_id)
            versions = sorted(s.id for s in self._specs.values()
                              if s.namespace == ns and s.name == name)
            if versions:
                return f"{msg}; registered versions: {versions}"
        except RegistrationError:
            pass
        hint = did_you_mean(env_id, self._specs)
        return msg + (hint or "; run `agentgym envs` to list the registered ids")

    def __iter__(self) -> Iterator[str]:
        self._ensure_loaded()
        return iter(sorted(self._specs))

    def __len__(self) -> int:
        self._ensure_loaded()
        return len(self._specs)

    def __contains__(self, env_id: object) -> bool:
        self._ensure_loaded()
        return env_id in self._specs


registry = _Registry()
"""Read-only mapping of every registered env id to its :class:`EnvSpec`."""


def register(
    id: str,  # noqa: A002 - Gymnasium's name for it
    entry_point: str | Callable[..., Env],
    *,
    description: str = "",
    max_turns: int | None = None,
    max_observation_chars: int | None = DEFAULT_MAX_OBSERVATION_CHARS,
    requires: tuple[str, ...] | list[str] = (),
    alias_of: str | None = None,
    **kwargs: Any,
) -> EnvSpec:
    """Register an env under a versioned id (also in Gymnasium's registry).

    Args:
        id: ``[namespace/]Name-vN``.
        entry_point: ``"module:attr"`` or a callable returning an env.
        description: One line for ``agentgym envs``.
        max_turns: Truncate episodes after this many steps.
        max_observation_chars: Cap each observation message at this many characters.
        requires: What the env needs beyond the core: ``docker``, ``browser``, ``java``,
            ``gpu``, ``network`` and pip extras as ``extra:NAME`` (``agentgym envs`` shows
            them; tests pick the envs they can run by them).
        alias_of: The id of the env this one configures (same entry point, defaults in
            ``kwargs``); see :attr:`EnvSpec.alias_of`.
        **kwargs: Default keyword arguments for the entry point.

    Returns:
        The new spec.

    Example:
        >>> import agentgym
        >>> spec = agentgym.register("demo/Echo-v0", "agentgym.envs.sokoban:SokobanEnv",
        ...                          description="Sokoban under another name", size=5)
        >>> spec.kwargs
        {'size': 5}
    """
    _parse_id(id)
    if not (callable(entry_point) or (isinstance(entry_point, str) and ":" in entry_point)):
        raise RegistrationError(
            f"entry_point for {id!r} must be a callable or 'module:attr', got {entry_point!r}"
        )
    if alias_of is not None:
        base = registry._specs.get(alias_of)
        if base is None or base.entry_point != entry_point:
            raise RegistrationError(
                f"{id!r} is registered as an alias of {alias_of!r}, which "
                + ("is not registered (register it first)" if base is None else
                   f"has another entry point ({base.entry_point!r}, not {entry_point!r})"))
    spec = EnvSpec(id, entry_point, dict(kwargs), description, max_turns, max_observation_chars,
                   _check_requires(id, requires), alias_of)
    registry.add(spec)
    from agentgym.gym_bridge import register_in_gymnasium

    register_in_gymnasium(spec)
    return spec


def spec(env_id: str) -> EnvSpec:
    """The spec registered under ``env_id``; raises :class:`UnknownEnvError` with suggestions.

    ``openenv:URL`` names the OpenEnv server at ``URL`` (``http://HOST:PORT``), not a
    registered id: its spec builds ``agentgym.envs.openenv:OpenEnvEnv(url=URL)``.
    """
    scheme, _, url = env_id.partition(":") if isinstance(env_id, str) else ("", "", "")
    if scheme == "openenv" and url.startswith(("http://", "https://", "ws://", "wss://")):
        return EnvSpec(env_id, "agentgym.envs.openenv:OpenEnvEnv", {"url": url},
                       f"the OpenEnv server at {url}", max_observation_chars=None,
                       requires=("extra:openenv",))
    return registry[env_id]


def make(env_id: str, **kwargs: Any) -> Env:
    """Build a registered env.

    Args:
        env_id: A registered id (``agentgym envs`` lists them).
        **kwargs: Overrides of the spec's defaults, plus ``max_turns`` and
            ``max_observation_chars``.

    Raises:
        UnknownEnvError: ``env_id`` is not registered (the message names the closest ids).
        EnvArgumentError: a keyword the env does not accept (the message names those it does).

    Example:
        >>> import agentgym
        >>> env = agentgym.make("agentgym/Sokoban-v0", max_turns=20)
        >>> env.spec.id
        'agentgym/Sokoban-v0'
    """
    return spec(env_id).make(**kwargs)
