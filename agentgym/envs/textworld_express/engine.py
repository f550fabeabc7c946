"""TextWorldExpress's own Python wrapper, attached to a pooled JVM instead of starting its own.

The package's ``TextWorldExpressEnv.__init__`` launches one JVM per object; game generation,
the score-to-reward arithmetic, completion and gold paths are what we want unchanged, so
:func:`make_engine` overrides only construction and closing.
"""

from __future__ import annotations

import tempfile
from functools import cache
from typing import Any

from agentgym.errors import MissingExtraError

from ..jvm import JVMPool, Lease, shared_pool

ENTRY_CLASS = "textworldexpress.runtime.PythonInterface"
"""The engine's Python-facing class, one object per isolate (see :mod:`~agentgym.envs.jvm`)."""


def package() -> Any:
    """The installed ``textworld_express`` module, or a MissingExtraError naming the extra."""
    try:
        import textworld_express
    except ImportError:
        raise MissingExtraError("textworld-express", "textworld-express",
                                "TextWorldExpress envs") from None
    return textworld_express


@cache
def version() -> str:
    """``textworld-express==X.Y.Z``, recorded in every step's info."""
    from importlib.metadata import version as dist_version

    return f"textworld-express=={dist_version('textworld-express')}"


def game_names() -> list[str]:
    """The games the installed package ships (its ``GAME_NAMES``)."""
    package()
    from textworld_express.constants import GAME_NAMES

    return list(GAME_NAMES)


def pool() -> JVMPool:
    """The process-wide JVM pool running TextWorldExpress's bundled jar."""
    package()
    from textworld_express.constants import BASEPATH, JAR_PATH

    return shared_pool(JAR_PATH, BASEPATH, ENTRY_CLASS)


def make_engine(lease: Lease) -> Any:
    """The lease's simulator (its isolate's ``PythonInterface``) behind the package's API."""
    return _engine_class()(lease)


@cache
def _engine_class() -> type:
    package()
    from textworld_express import TextWorldExpressEnv

    class PooledTextWorldExpress(TextWorldExpressEnv):
        """The package's env minus its JVM launch; closing frees only this simulator."""

        def __init__(self, lease: Lease) -> None:  # sets what the package's __init__ sets
            self._gateway = lease.gateway
            self.server = lease.server  # this episode's own isolate
            self.lastStepScore = 0
            self.envStepLimit = 100  # the package's default; the env sets its own
            self.runHistory = []
            self.seed = None
            self.gameName = None
            self.gameParams = ""
            self.gameFold = "train"
            self.generateGoldPath = False
            self.goldPathGenerated = False
            self._obj_tree_tempfile = tempfile.NamedTemporaryFile()  # noqa: SIM115

        def close(self) -> None:  # the JVM is shared: never shut the gateway down here
            self._obj_tree_tempfile.close()

        def __del__(self) -> None:
            pass

    return PooledTextWorldExpress
