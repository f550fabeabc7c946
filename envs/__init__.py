"""Built-in environment families, registered under the ``agentgym/`` namespace.

Registration names entry points as strings, so importing this package imports no env code.
"""

from agentgym.registry import register

register(
    "agentgym/Sokoban-v0",
    "agentgym.envs.sokoban:SokobanEnv",
    description="Push every box onto a target in a procedurally generated grid (text).",
    max_turns=40,
)
register(
    "agentgym/Arithmetic-v0",
    "agentgym.envs.arithmetic:ArithmeticEnv",
    description="Multi-step word problems solved with a calculator tool; exact-answer reward.",
    max_turns=10,
)
register(
    "agentgym/MentalMath-v0",
    "agentgym.envs.arithmetic.mental:MentalMathEnv",
    description="Answer a small sum in plain text; a second try after a miss (no tools).",
    max_turns=2,
)
