"""Typed errors for caller mistakes.

Agent mistakes never raise (they become observations) and infrastructure faults end a
trajectory with ``status="error"``; what is left, a caller using the API wrongly, raises one
of these with what was expected, what came and how to fix it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class AgentGymError(Exception):
    """Base class of every error agentgym raises on purpose."""


class ConfigError(AgentGymError, ValueError):
    """A configuration value is missing or out of range."""


class SchemaError(AgentGymError, ValueError):
    """A record (trajectory JSONL, task file) does not match its schema."""


class UnknownEnvError(AgentGymError, KeyError):
    """An env id is not registered."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class RegistrationError(AgentGymError, ValueError):
    """An env id or entry point cannot be registered."""


class EnvArgumentError(AgentGymError, TypeError):
    """``make`` received keyword arguments the env does not accept."""


class EnvStateError(AgentGymError, RuntimeError):
    """An env method was called in the wrong state (step before reset, after the end, closed)."""


class ResetNeeded(EnvStateError):
    """``step`` was called before ``reset`` or after the episode ended."""


class EnvClosedError(EnvStateError):
    """The env was used after ``aclose``."""


class MissingExtraError(AgentGymError, ImportError):
    """An optional dependency is not installed."""

    def __init__(self, package: str, extra: str, purpose: str) -> None:
        super().__init__(
            f"{purpose} needs the {package!r} package, which is not installed; "
            f"install it with: pip install 'agentgym[{extra}]'"
        )


def did_you_mean(name: str, options: Iterable[str], n: int = 3) -> str:
    """A ``"; did you mean ...?"`` suffix naming the closest options, or ``""``."""
    options = list(options)
    close = difflib.get_close_matches(name, options, n=n, cutoff=0.5)
    if not close:
        lowered = {o.lower(): o for o in options}
        close = [lowered[m] for m in difflib.get_close_matches(name.lower(), lowered, n=n,
                                                                cutoff=0.5)]
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
