"""Reasoning Gym datasets as envs; see :mod:`agentgym.envs.reasoning_gym.env`."""

from .env import SPLIT_SEEDS, TASKS_PER_SPLIT, ReasoningGymEnv

CURATED: dict[str, str] = {
    "ChainSum": "chain_sum",
    "BasicArithmetic": "basic_arithmetic",
    "LegCounting": "leg_counting",
    "LetterCounting": "letter_counting",
    "SpellBackward": "spell_backward",
    "WordSorting": "word_sorting",
    "GSMSymbolic": "gsm_symbolic",
    "SimpleEquations": "simple_equations",
    "BaseConversion": "base_conversion",
    "FamilyRelationships": "family_relationships",
    "Maze": "maze",
    "MiniSudoku": "mini_sudoku",
    "KnightsKnaves": "knights_knaves",
    "Countdown": "countdown",
}
"""The default list, registered as ``reasoning-gym/<Name>-v0``: our id name -> dataset.
Arithmetic, counting, string, algebra, logic and puzzle tasks, each with a gold answer."""

__all__ = ["CURATED", "SPLIT_SEEDS", "TASKS_PER_SPLIT", "ReasoningGymEnv"]
