"""Sokoban: push every box onto a target, on a procedurally generated, solvable grid.

Registered as ``agentgym/Sokoban-v0``. :class:`SokobanEnv` is the env; the rules
(:class:`Level`, :func:`move`, the BFS :func:`solve`) and the level :func:`generate` are
public too, so a scripted policy can plan with the same rules the env plays by.
"""

from .env import SokobanEnv
from .generator import generate
from .level import DIRECTIONS, Level, move, solve

__all__ = ["DIRECTIONS", "Level", "SokobanEnv", "generate", "move", "solve"]
