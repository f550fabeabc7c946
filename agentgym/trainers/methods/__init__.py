"""Training methods as plug-ins: one folder each, registered with metadata like the estimators.

A method that keeps state or acts around the estimator is a subpackage here
(``trainers/methods/<name>/``) that calls :func:`register_method`; its ``build`` returns the
:class:`agentgym.trainers.hooks.Hooks` it adds to the training step, or None when the run's
config does not ask for it. Every subpackage is imported on first use; other packages
register theirs through the entry-point group ``agentgym.methods``.

Built-in methods read the config sections they have always had (``algorithm.
reward_accumulation`` for G-RA, ``algorithm.value`` for GAE's critic, ``progress`` for SPA,
``rollout.summarize`` and ``algorithm.supo`` for SUPO). A method registered with an
``options`` dataclass is turned on by naming it in the config's ``methods`` section, with
its options (YAML ``methods: {length_penalty: {coef: 0.05}}``).

A method that cannot run on every collector (:mod:`agentgym.trainers.collectors`) names
the ones it can (``collectors``, from :data:`COLLECTORS`) and says when a config uses it
(``active``): a config that pairs it with another collector is refused when it is read,
with the way out, never trained without the method.

Example (a whole method is one folder: ``tests/trainers/plugins/length_penalty/``)::

    register_method("length_penalty", build=build, options=LengthPenaltyOptions,
                    summary="outcome reward minus coef per turn")
"""

from __future__ import annotations

import importlib
import pkgutil
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from agentgym.errors import ConfigError, did_you_mean
from agentgym.trainers.hooks import Hooks

if TYPE_CHECKING:
    from agentgym.trainers.advantages import Estimator
    from agentgym.trainers.config import TrainConfig

COLLECTORS: dict[str, str] = {
    "embedded": "the embedded loop (engine=local, model.generation=transformers)",
    "vllm": "model.generation=vllm",
    "llamacpp": "model.generation=llamacpp",
    "ray": "engine=ray",
    "ahead": "async_training.enabled=true",
    "april": "rollout.april.enabled=true",
}
"""What a run's rollouts can be collected by, and the config switch that picks each
(a run may combine several, e.g. ``ray`` and ``ahead``)."""


def collector_traits(config: TrainConfig) -> frozenset[str]:
    """The :data:`COLLECTORS` a config's rollouts go through."""
    on = {"vllm": config.engine == "local" and config.model.generation == "vllm",
          "llamacpp": config.engine == "local" and config.model.generation == "llamacpp",
          "ray": config.engine == "ray", "ahead": config.async_training.enabled,
          "april": config.rollout.april.enabled}
    return frozenset(k for k, yes in on.items() if yes) or frozenset({"embedded"})


@dataclass(frozen=True)
class MethodContext:
    """What a method's ``build`` gets: the run's config and its freshly made parts."""

    config: TrainConfig
    """The resolved config (built-in methods read their own section of it)."""
    model: Any
    """The freshly loaded policy, before LoRA wraps it (a method that copies the initial
    weights, as SPA's progress model and GAE's critic do, copies them from here)."""
    estimator: Estimator
    """The run's estimator."""
    options: Any = None
    """The method's options (an instance of its ``options`` dataclass), or None."""


@dataclass(frozen=True)
class MethodInfo:
    """A registered method."""

    name: str
    """The name configs use (``methods: {name: {...}}``)."""
    build: Callable[[MethodContext], Hooks | None]
    """The method's hooks for a run, or None when the run does not use it."""
    summary: str = ""
    """One line for people."""
    order: int = 100
    """Where its group transforms run among the others' (ascending; built-ins: 10-40)."""
    options: type | None = None
    """The options dataclass of an opt-in method; None: the method reads its own config
    section and its ``build`` says whether it is on."""
    check: Callable[[TrainConfig], None] | None = None
    """Refuses a config the method cannot train, before any model loads (ConfigError)."""
    collectors: frozenset[str] | None = None
    """The :data:`COLLECTORS` it runs on (None: every one)."""
    active: Callable[[TrainConfig], bool] | None = None
    """Whether a config uses it (built-ins; an opt-in method is used when named)."""


_REGISTRY: dict[str, MethodInfo] = {}
_LOADED = False


def register_method(name: str, *, build: Callable[[MethodContext], Hooks | None],
                    summary: str = "", order: int = 100, options: type | None = None,
                    check: Callable[[TrainConfig], None] | None = None,
                    collectors: frozenset[str] | None = None,
                    active: Callable[[TrainConfig], bool] | None = None) -> MethodInfo:
    """Register a training method.

    Args:
        name: The name configs use.
        build: Makes the method's hooks for a run (None: not used by this run).
        summary: One line for people.
        order: Where its group transforms run (ascending).
        options: A frozen dataclass of options: the method is then on when the config's
            ``methods`` section names it.
        check: Config checks run before any model loads.
        collectors: The :data:`COLLECTORS` it runs on (None: every one).
        active: Whether a config uses it (needed with ``collectors``, unless ``options``).

    Raises:
        ConfigError: ``name`` is taken by another method, or a collector name is unknown.
    """
    unknown = sorted(set(collectors or ()) - set(COLLECTORS))
    if unknown:
        raise ConfigError(f"method {name!r}: unknown collectors {unknown}; known: "
                          f"{', '.join(COLLECTORS)}")
    old = _REGISTRY.get(name)
    if old is not None and old.build.__module__ != build.__module__:
        raise ConfigError(f"method {name!r} is already registered by {old.build.__module__}; "
                          "pick another name")
    info = MethodInfo(name, build, summary, order, options, check, collectors, active)
    _REGISTRY[name] = info
    return info


def _load() -> None:
    """Import every method folder here, then the ``agentgym.methods`` entry points."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    from importlib.metadata import entry_points

    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    for ep in entry_points(group="agentgym.methods"):
        try:
            ep.load()
        except Exception as exc:  # a broken plug-in must not hide the built-in methods
            warnings.warn(f"method plug-in {ep.name!r} failed to load: {exc!r}", stacklevel=2)


def methods() -> list[MethodInfo]:
    """Every registered method, in the order their transforms run."""
    _load()
    return sorted(_REGISTRY.values(), key=lambda m: (m.order, m.name))


def method_names() -> list[str]:
    """Registered method names, sorted."""
    return sorted(m.name for m in methods())


def method_options(info: MethodInfo, values: Mapping[str, Any] | None) -> Any:
    """The options dataclass of an opt-in method built from its config section.

    Raises:
        ConfigError: An unknown option (naming the accepted ones) or a rejected value.
    """
    if info.options is None:
        raise ConfigError(f"method {info.name!r} is configured by its own section, not under "
                          "methods; remove it from methods")
    values = dict(values or {})
    accepted = [f.name for f in fields(info.options)]
    for key in values:
        if key not in accepted:
            raise ConfigError(f"methods.{info.name}: no option {key!r}; accepted: "
                              f"{', '.join(accepted)}{did_you_mean(key, accepted)}")
    try:
        return info.options(**values)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"methods.{info.name}: {exc}") from None


def check_methods(config: TrainConfig) -> None:
    """Refuse unknown methods, bad options, and a method paired with a collector it lacks.

    Raises:
        ConfigError: A name no method is registered under (with did-you-mean), options
            its dataclass rejects, or a used method whose ``collectors`` leave out one the
            config's rollouts go through (naming the switch to turn off).
    """
    names = {m.name: m for m in methods()}
    for name, values in config.methods.items():
        if name not in names:
            raise ConfigError(f"methods: unknown method {name!r}; registered: "
                              f"{', '.join(sorted(names))}{did_you_mean(name, list(names))}")
        if values is not None and not isinstance(values, Mapping):
            raise ConfigError(f"methods.{name} must be a mapping of options, got "
                              f"{type(values).__name__}")
        method_options(names[name], values)
        own = names[name].check
        if own is not None:  # a named plug-in's own checks: now, too
            own(config)
    traits = collector_traits(config)
    for info in names.values():
        used = info.name in config.methods if info.options is not None \
            else info.active is not None and info.active(config)
        if not used or info.collectors is None or traits <= info.collectors:
            continue
        off = [COLLECTORS[t] for t in sorted(traits - info.collectors)]
        can = [COLLECTORS[t] for t in COLLECTORS if t in info.collectors]
        raise ConfigError(f"{info.name} ({info.summary}) cannot run with {', '.join(off)}: "
                          f"that collector does not give what {info.name} needs; turn that "
                          f"off (it runs with: {'; '.join(can)})")


def check(config: TrainConfig) -> None:
    """Every method's own config checks (before any model loads)."""
    for info in methods():
        if info.check is not None:
            info.check(config)


def build_hooks(config: TrainConfig, model: Any, estimator: Estimator) -> Hooks:
    """The hooks of every method the run uses, composed in registry order."""
    hooks = Hooks()
    for info in methods():
        options = None
        if info.options is not None:
            if info.name not in config.methods:
                continue
            options = method_options(info, config.methods[info.name])
        made = info.build(MethodContext(config, model, estimator, options))
        if made is not None:
            hooks = hooks + made
    return hooks
