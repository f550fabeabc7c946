"""ScienceWorld: 30 elementary-science task types in an interactive text world.

Registered as ``scienceworld/ScienceWorld-v0``. The simulator, tasks, variation splits,
scores and gold paths are the installed ``scienceworld`` package's own (``pip install
'agentgym[scienceworld]'``; it needs a Java runtime, Debian's ``default-jre-headless``).
"""

from .engine import task_names
from .env import ScienceWorldEnv, resolve_task

__all__ = ["ScienceWorldEnv", "resolve_task", "task_names"]
