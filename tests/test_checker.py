"""agentgym.check_env runs on every registered env and catches broken envs."""

import pytest

import agentgym
from agentgym import BaseEnv, Message, StepResult
from agentgym.checker import EnvCheckError


@pytest.mark.parametrize("env_id", list(agentgym.registry), ids=str)
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
