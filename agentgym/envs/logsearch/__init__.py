"""LogSearch: trace a failed request through long server logs (a long-horizon, long-context env)."""

from agentgym.envs.logsearch.env import LogSearchEnv

__all__ = ["LogSearchEnv"]
