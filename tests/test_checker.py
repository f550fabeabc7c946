"""agentgym.check_env runs on every registered env and catches broken envs."""

import pytest

import agentgym
from agentgym import BaseEnv, Message, StepResult
from agentgym.checker import EnvCheckError

# Aliases (one id per task of a family env, e.g. miniwob/<task>-v0) run as a sample: the
# first of each family here, more in the family's own tests.
BASE_IDS = [i for i, s in agentgym.registry.items() if s.alias_of is None]
ALIAS_SAMPLE = sorted({s.alias_of: i for i, s in reversed(list(agentgym.registry.items()))
                       if s.alias_of}.values())


@pytest.mark.parametrize("env_id", BASE_IDS + ALIAS_SAMPLE, ids=str)
async def test_every_registered_env_passes_check_env(env_id):
    ran = await agentgym.check_env(agentgym.make(env_id))
    assert "determinism" in ran and "aclose twice" in ran


class _Good(BaseEnv):
    tools = ()

    async def _reset(self, seed, options):
        self.value = int(self.np_random.integers(100))
        return [Message("user", f"number {self.value}")], {"task_id": f"good-{seed}"}

    async def _step(self, action):
        return StepResult((Message("user", "ok"),), reward=1.0, terminated=True)


class _NonDeterministic(_Good):
    async def _reset(self, seed, options):
        import random

        return [Message("user", f"number {random.random()}")], {}


class _RaisesOnMistake(BaseEnv):
    def __init__(self):
        super().__init__()
        from agentgym.envs.arithmetic import calculator

        self.box = agentgym.ToolBox([calculator])
        self.tools = self.box.specs

    async def _reset(self, seed, options):
        return [Message("user", "compute")], {}

    async def _step(self, action):
        raise ValueError("cannot handle that action")


class _BadTypes(_Good):
    async def _step(self, action):
        return StepResult((Message("user", "ok"),), reward=1.0, terminated=True,
                          info={"state_key": 7})


class _CloseTwiceFails(_Good):
    async def aclose(self):
        if getattr(self, "_once", False):
            raise RuntimeError("already closed")
        self._once = True


async def test_good_env_passes():
    assert await agentgym.check_env(_Good(), make_env=_Good)


@pytest.mark.parametrize(
    ("env_cls", "needle"),
    [
        (_NonDeterministic, "not deterministic"),
        (_RaisesOnMistake, "must become observations"),
        (_BadTypes, "state_key"),
        (_CloseTwiceFails, "idempotent"),
    ],
)
async def test_broken_envs_are_reported(env_cls, needle):
    with pytest.raises(EnvCheckError, match=needle):
        await agentgym.check_env(env_cls(), make_env=env_cls)


class _Decliner(BaseEnv):
    """A tool env where declining is an action: prose valid, every broken call invalid."""

    prose_is_action = True
    prose_valid = True
    unknown_tools_valid = False

    def __init__(self):
        super().__init__()
        from agentgym.envs.arithmetic import calculator

        self.tools = agentgym.ToolBox([calculator]).specs

    async def _reset(self, seed, options):
        return [Message("user", "compute, or decline")], {}

    async def _step(self, action):
        from agentgym.parsing import parse_tool_calls

        parsed = parse_tool_calls(action.content)
        calls, errors = action.tool_calls or parsed.calls, parsed.errors
        names = {t.name for t in self.tools}
        if not calls and not errors:
            valid = self.prose_valid
        else:
            valid = not errors and all(
                c.name in names and set(c.arguments) <= {"expression"} for c in calls) or (
                self.unknown_tools_valid and any(c.name not in names for c in calls))
        return StepResult((Message("user", "ok"),), reward=0.0, info={"valid": valid})


class _DeclinerMarksProseInvalid(_Decliner):
    prose_valid = False


class _DeclinerAcceptsUnknownTools(_Decliner):
    unknown_tools_valid = True


class _UndeclaredProseValid(_Decliner):
    prose_is_action = False


async def test_env_declaring_prose_an_action_passes_with_valid_prose():
    env = _Decliner()
    assert agentgym.env.accepts_prose(agentgym.MaxTurns(env, 5))
    assert await agentgym.check_env(env, make_env=_Decliner)


@pytest.mark.parametrize(
    ("env_cls", "needle"),
    [
        (_DeclinerMarksProseInvalid, "prose_is_action = True, so a reply without a tool call"),
        (_DeclinerAcceptsUnknownTools, r"agent mistakes \(unknown tool, malformed arguments\)"),
        (_UndeclaredProseValid, "no tool call"),
    ],
)
async def test_prose_declaration_is_held_to(env_cls, needle):
    """Declaring prose an action never lets garbage calls pass, and is not implied."""
    with pytest.raises(EnvCheckError, match=needle):
        await agentgym.check_env(env_cls(), make_env=env_cls)
