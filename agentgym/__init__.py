"""agentgym: train LLM agents with reinforcement learning in multi-turn environments.

The core (this package) is light: it imports no torch, docker or playwright. Built-in envs
and entry-point plugins are registered on import, in agentgym's registry and Gymnasium's.
"""

from agentgym.checker import check_env
from agentgym.env import BaseEnv, Env
from agentgym.errors import (
    AgentGymError,
    ConfigError,
    EnvArgumentError,
    EnvClosedError,
    EnvStateError,
    MissingExtraError,
    RegistrationError,
    ResetNeeded,
    SchemaError,
    UnknownEnvError,
)
from agentgym.registry import EnvSpec, make, register, registry, spec
from agentgym.tool_env import ToolEnv
from agentgym.tools import Tool, ToolBox, tool
from agentgym.types import (
    SCHEMA_VERSION,
    Group,
    Message,
    Step,
    StepResult,
    StepTokens,
    ToolCall,
    ToolSpec,
    Trajectory,
)
from agentgym.wrappers import MaxTurns, ObservationCap, Wrapper

__version__ = "0.1.0"


__all__ = [
    "SCHEMA_VERSION", "AgentGymError", "BaseEnv", "ConfigError", "Env", "EnvArgumentError",
    "EnvClosedError", "EnvSpec", "EnvStateError", "Group", "MaxTurns", "Message",
    "MissingExtraError", "ObservationCap", "RegistrationError", "ResetNeeded", "SchemaError",
    "Step", "StepResult", "StepTokens", "Tool", "ToolBox", "ToolCall", "ToolEnv", "ToolSpec",
    "Trajectory",
    "UnknownEnvError", "Wrapper", "check_env", "make", "register", "registry", "spec", "tool",
]

registry.load()  # built-ins and plugins, so gymnasium.make works after import
