"""Code-interpreter tool use: math problems solved by running Python in a sandbox."""

from agentgym.envs.code.env import CodeMathEnv, CodeState, python

__all__ = ["CodeMathEnv", "CodeState", "python"]
