"""FunctionCalls: generated function-calling tasks scored by BFCL's checker (see ``.env``).

Files: :mod:`.spec` (how a function, its requests and samplers are written), :mod:`.library`
(the curated functions), :mod:`.synth` (functions composed from a vocabulary), :mod:`.env`
(task assembly and the env).
"""

from agentgym.envs.function_calls import synth
from agentgym.envs.function_calls.env import KINDS, FunctionCallsEnv, make_task

__all__ = ["KINDS", "FunctionCallsEnv", "make_task", "synth"]
