"""ScienceWorld's own Python wrapper, attached to a pooled JVM instead of starting its own.

The package's ``ScienceWorldEnv.__init__`` launches one JVM per object; everything else (task
loading, the score-to-reward arithmetic, completion, the valid-action list) is what we want
unchanged. :class:`PooledScienceWorld` therefore overrides only construction and closing, so
scores and rewards are computed by the benchmark's code, not ours.
"""

from __future__ import annotations

import tempfile
from functools import cache
from typing import Any

from agentgym.errors import MissingExtraError

from ..jvm import JVMPool, Lease, shared_pool

ENTRY_CLASS = "scienceworld.runtime.pythonapi.PythonInterface"
"""The engine's Python-facing class, one object per isolate (see :mod:`~agentgym.envs.jvm`)."""


def package() -> Any:
    """The installed ``scienceworld`` module, or a MissingExtraError naming the extra."""
    try:
        import scienceworld
    except ImportError:
        raise MissingExtraError("scienceworld", "scienceworld", "ScienceWorld envs") from None
    return scienceworld


@cache
def version() -> str:
    """``scienceworld==X.Y.Z``, recorded in every step's info."""
    from importlib.metadata import version as dist_version

    return f"scienceworld=={dist_version('scienceworld')}"


def pool() -> JVMPool:
    """The process-wide JVM pool running ScienceWorld's bundled jar."""
    package()
    from scienceworld.constants import BASEPATH, JAR_PATH

    return shared_pool(JAR_PATH, BASEPATH, ENTRY_CLASS)


def task_names() -> list[str]:
    """The 30 task types, in the benchmark's order (read from its ``tasks.json``)."""
    package()
    from scienceworld.constants import ID2TASK

    return list(ID2TASK.values())


def make_engine(lease: Lease) -> Any:
    """The lease's simulator (its isolate's ``PythonInterface``) behind the package's API."""
    return _engine_class()(lease)


@cache
def _engine_class() -> type:
    package()
    from scienceworld import ScienceWorldEnv

    class PooledScienceWorld(ScienceWorldEnv):
        """The package's env minus its JVM launch; closing frees only this simulator."""

        def __init__(self, lease: Lease) -> None:  # sets what the package's __init__ sets
            self._gateway = lease.gateway
            self.server = lease.server  # this episode's own isolate
            self.lastStepScore = 0
            self.taskName = None
            self.envStepLimit = 100  # the package's default; the env sets its own
            self.clear_run_histories()
            self.goldPathGenerated = False
            self.simplificationStr = ""
            self.variationIdx = 0
            self._obj_tree_tempdir = tempfile.TemporaryDirectory()

        def close(self) -> None:  # the JVM is shared: never shut the gateway down here
            self._obj_tree_tempdir.cleanup()

        def __del__(self) -> None:
            pass

    return PooledScienceWorld
