"""Arithmetic tool-use env: word problems solved with a calculator tool."""

from agentgym.envs.arithmetic.env import ArithmeticEnv, calculator, evaluate
from agentgym.envs.arithmetic.mental import MentalMathEnv

__all__ = ["ArithmeticEnv", "MentalMathEnv", "calculator", "evaluate"]
