"""Default time limits of a rollout, chosen by where the model runs.

An in-process model on a slow or shared CPU is slow, not broken: a step limit there only
turns slow episodes into errors (every one of them, at worst), so in-process backends get
no step or episode limit by default. A remote server can hang or drop a connection, which a
limit must catch: it gets :data:`REMOTE_STEP_TIMEOUT` per step and
:data:`REMOTE_EPISODE_TIMEOUT` per episode.
"""

from __future__ import annotations

from typing import Any

REMOTE_STEP_TIMEOUT = 300.0
"""Seconds a step may take against a server (``openai:URL``) unless told otherwise."""
REMOTE_EPISODE_TIMEOUT = 1800.0
"""Seconds an episode may take against a server unless told otherwise."""


def is_remote(agent: Any) -> bool:
    """Whether the agent's model answers over the network (its backend has ``check()``)."""
    return hasattr(getattr(agent, "policy", None), "check")


def default_timeouts(agent: Any, step_timeout: float | None = None
                     ) -> tuple[float | None, float | None]:
    """``(step_timeout, episode_timeout)`` for a rollout of ``agent``.

    Args:
        agent: The agent (``LMAgent`` or a model-free agent).
        step_timeout: The caller's choice; None = the default for where the model runs.

    Returns:
        The caller's step limit (with the remote episode limit, or none in-process), or the
        defaults: ``(REMOTE_STEP_TIMEOUT, REMOTE_EPISODE_TIMEOUT)`` for a server, ``(None,
        None)`` for an in-process model or a model-free agent.
    """
    remote = is_remote(agent)
    if step_timeout is not None:
        return step_timeout, REMOTE_EPISODE_TIMEOUT if remote else None
    return (REMOTE_STEP_TIMEOUT, REMOTE_EPISODE_TIMEOUT) if remote else (None, None)
