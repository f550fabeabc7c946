"""TextWorldExpress: fast generated text games (CoinCollector, CookingWorld, TWC, ...).

Registered as ``twx/<Game>-v0``, one id per game. Games, generation, splits, scores and gold
paths are the installed ``textworld-express`` package's own (``pip install
'agentgym[textworld-express]'``; it needs a Java runtime, Debian's ``default-jre-headless``).
"""

from .engine import game_names
from .env import TextWorldExpressEnv

__all__ = ["TextWorldExpressEnv", "game_names"]
