"""SWE env: fix real bugs in small repositories, judged by tests run in a sandbox."""

from agentgym.envs.swe.env import SWEEnv
from agentgym.envs.swe.evaluation import Evaluation, evaluate, parse_pytest_summary
from agentgym.envs.swe.task import SWETask, load_tasks, shipped_tasks

__all__ = ["Evaluation", "SWEEnv", "SWETask", "evaluate", "load_tasks", "parse_pytest_summary",
           "shipped_tasks"]
