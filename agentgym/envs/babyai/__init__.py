"""BabyAI levels (minigrid) as text envs; see :mod:`agentgym.envs.babyai.env`."""

from .env import ACTIONS, BabyAIEnv, read_action
from .levels import LEVELS

__all__ = ["ACTIONS", "LEVELS", "BabyAIEnv", "read_action"]
