"""MiniWoB++ in real Chromium: the ``miniwob`` package's own task pages, seeds and rewards.

Registered as ``miniwob/MiniWoB-v0`` with a ``task`` argument (``agentgym.make(
"miniwob/MiniWoB-v0", task="click-button")``) and, per task, as its alias
``miniwob/<task>-v0`` (``agentgym.make("miniwob/click-button-v0")``);
``python -m agentgym.envs.miniwob`` lists the tasks of the installed package. Needs the
``miniwob`` extra and Chromium; see ``docs/miniwob.md``. Importing this package imports
neither Playwright nor the ``miniwob`` package.
"""

from .env import MiniWoBEnv
from .errors import MiniWoBError
from .tasks import package_version, task_names

__all__ = ["MiniWoBEnv", "MiniWoBError", "package_version", "task_names"]
