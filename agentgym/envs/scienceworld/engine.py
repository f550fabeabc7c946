"""ScienceWorld's own Python wrapper, attached to a pooled JVM instead of starting its own.

The package's ``ScienceWorldEnv.__init__`` launches one JVM per object; everything else (task
loading, the score-to-reward arithmetic, completion, the valid-action list) is what we want
unchanged. :class:`PooledScienceWorld` therefore overrides only construction and closing, so
scores and rewards are computed by the benchmark's code, not ours; and, before a load that
makes a gold path, empties the gold agent's path cache (:func:`forget_gold_paths`), so that
an episode's gold path does not depend on what its isolate played before.
"""

from __future__ import annotations

import tempfile
from functools import cache
from typing import Any

from agentgym.errors import MissingExtraError

from ..jvm import IsolatedObject, JVMPool, Lease, shared_pool

ENTRY_CLASS = "scienceworld.runtime.pythonapi.PythonInterface"
"""The engine's Python-facing class, one object per isolate (see :mod:`~agentgym.envs.jvm`)."""

GOLD_AGENT = "scienceworld.goldagent.PathFinder$"
"""The Scala object whose ``precomputedExhaustivePaths`` caches room search patterns."""


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


def forget_gold_paths(server: Any, gateway: Any) -> None:
    """Empty the gold agent's room-search cache in the class loader of ``server``.

    ScienceWorld 1.2.3's gold agent (``PathFinder.createActionSequenceSearchPatternPrecomputed``)
    keeps the search pattern it made for a start room in a map that lives as long as the
    classes, and makes a pattern by shuffling with the Random the load has just seeded. A
    cache hit therefore leaves that Random where a miss would not, and hands over a pattern
    made in another episode's world: the gold path of a (task, variation) then depends on
    which episodes the engine made gold paths for before (checked: test-conductivity
    variation 47 connects other wires after a gold path of variation 50 than in a fresh
    engine). Emptied before each gold load, the engine makes the gold path a fresh process
    makes. The cache is read by nothing but gold-path generation.

    Args:
        server: The engine's ``PythonInterface`` (an isolate's :class:`IsolatedObject`, or
            the package's own Py4J object).
        gateway: The Py4J gateway of its JVM.
    """
    cls = server.getClass().getClassLoader().loadClass(GOLD_AGENT)
    module = cls.getField("MODULE$").get(None)  # the Scala object's one instance
    IsolatedObject(gateway, cls, module).precomputedExhaustivePaths().clear()


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

        def load(self, taskName: str, variationIdx: int = 0, simplificationStr: str = "",
                 generateGoldPath: bool = False) -> None:
            if generateGoldPath:  # as a fresh engine would (see forget_gold_paths)
                forget_gold_paths(self.server, self._gateway)
            else:
                # The engine's flag is set by a gold load and never cleared, and its reset()
                # makes a gold path whenever it is set (1-3 s): without this, every later
                # reset of the isolate would run the gold agent for an episode that asked
                # for none (the world it then loads is the same).
                getattr(self.server, "goldPathGenerationEnabled_$eq")(False)
            super().load(taskName, variationIdx, simplificationStr, generateGoldPath)

        def close(self) -> None:  # the JVM is shared: never shut the gateway down here
            self._obj_tree_tempdir.cleanup()

        def __del__(self) -> None:
            pass

    return PooledScienceWorld
