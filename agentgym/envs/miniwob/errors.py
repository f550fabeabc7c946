"""The two kinds of failure a MiniWoB env tells apart."""

from __future__ import annotations

from agentgym.errors import AgentGymError


class MiniWoBError(AgentGymError, RuntimeError):
    """An infrastructure fault of a MiniWoB env (browser crashed, page stopped answering)."""


class ActionError(ValueError):
    """An agent mistake in a page action; the ToolBox turns it into a ``valid=False`` reply."""
