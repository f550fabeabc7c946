"""Dataclass configs to and from plain mappings: checked keys and types, dotted overrides.

:func:`from_dict` builds any frozen config dataclass from a nested mapping (the YAML file),
raising :class:`~agentgym.errors.ConfigError` that names the field, what was expected and the
closest valid key; :func:`to_dict` is its inverse for YAML; :func:`apply_overrides` applies
``section.key=value`` items from the command line.

Every number is checked here, once for all fields: a float must be finite (NaN and ±inf,
which YAML spells ``.nan`` and ``.inf``, pass every ``lr > 0`` style check and then poison
training), and an int must fit in 64 bits (torch, numpy and the checkpoint files hold no
larger one). Free-form mappings (``env.kwargs``, ``algorithm.options``) are checked the same
way, at any depth. Each field's own range is its section's ``__post_init__``.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args, get_origin

import yaml

from agentgym.errors import ConfigError, did_you_mean

INT_LIMIT = 2**63
"""Every int in a config lies in (-INT_LIMIT, INT_LIMIT): what an int64 holds."""


def from_dict(cls: type[Any], data: Mapping[str, Any], where: str = "") -> Any:
    """Build dataclass ``cls`` from a nested mapping, checking keys and types."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where or 'config'} must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else key
        if key not in names:
            raise ConfigError(f"unknown config key {path!r}{did_you_mean(key, names)}; "
                              f"valid keys here: {names}")
        kwargs[key] = _coerce(hints[key], value, path)
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{where or 'config'}: {exc}") from exc


def _coerce(hint: Any, value: Any, path: str) -> Any:
    origin, args = get_origin(hint), get_args(hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return from_dict(hint, value or {}, path)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(arg, value, path)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0])
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{path} must be one of {list(args)}, got {value!r}")
        return value
    if origin is tuple:
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise ConfigError(f"{path} must be a list, got {value!r}")
        if len(args) == 2 and args[1] is Ellipsis and args[0] is not Any:
            return tuple(_coerce(args[0], v, f"{path}[{i}]") for i, v in enumerate(value))
        check_numbers(value, path)
        return tuple(value)
    if origin is dict or hint is Any:
        if origin is dict and not isinstance(value, Mapping):
            raise ConfigError(f"{path} must be a mapping, got {value!r}")
        check_numbers(value, path)
        return dict(value) if origin is dict else value
    if hint is float and isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return _number(float(value), path)
        except OverflowError:  # an int past a float's range
            return _number(math.inf, path)
    if hint is float and isinstance(value, str):  # YAML 1.1 reads "3e-6" as a string
        try:
            number = float(value)
        except ValueError:
            pass
        else:
            return _number(number, path)
    if hint in (int, str, bool) and type(value) is hint:
        return _number(typing.cast(int, value), path) if hint is int else value
    raise ConfigError(f"{path} must be {getattr(hint, '__name__', hint)}, got {value!r}")


def _number(value: float, path: str) -> float:
    """``value`` if it is finite and (an int) fits in 64 bits; else a ConfigError."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{path} must be a finite number, got {value} (NaN, ±inf and "
                          "numbers past a float's range are refused); set a finite value")
    if isinstance(value, int) and not -INT_LIMIT < value < INT_LIMIT:
        raise ConfigError(f"{path} must be an integer of at most 63 bits, got "
                          f"{value:.3e}; set a smaller value")
    return value


def check_numbers(value: Any, path: str) -> None:
    """Refuse a non-finite float or an oversize int anywhere inside ``value`` (mappings, lists).

    Raises:
        ConfigError: Naming the first such number's path.
    """
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        _number(value, path)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            check_numbers(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_numbers(item, f"{path}[{i}]")


def to_dict(config: Any) -> dict[str, Any]:
    """Plain nested dict (tuples as lists) for YAML."""
    def plain(value: Any) -> Any:
        if isinstance(value, tuple | list):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return plain(dataclasses.asdict(config))


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (values parsed as YAML) to a nested dict."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override must look like section.key=value, got {item!r}")
        node = data
        *parents, leaf = key.strip().split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {part!r} is not a section")
        node[leaf] = yaml.safe_load(raw)
    return data
