"""TextArena's single-player games as text envs; see :mod:`agentgym.envs.textarena.env`."""

from .env import TextArenaEnv
from .experts import EXPERTS
from .games import GAMES

__all__ = ["EXPERTS", "GAMES", "TextArenaEnv"]
