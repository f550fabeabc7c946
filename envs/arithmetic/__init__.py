"""Arithmetic tool-use env: word problems solved with a calculator tool."""

from agentgym.envs.arithmetic.env import ArithmeticEnv, calculator, evaluate

__all__ = ["ArithmeticEnv", "calculator", "evaluate"]
