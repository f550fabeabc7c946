"""A container that dies under a running command is an infrastructure fault, never an exit code."""

from __future__ import annotations

import asyncio

import pytest

from agentgym import BaseEnv, Message, StepResult
from agentgym.sandboxes.base import SandboxError

pytestmark = pytest.mark.docker


async def _kill_soon(docker_client, container_id: str, delay: float = 1.0) -> None:
    await asyncio.sleep(delay)
    await asyncio.to_thread(docker_client.api.kill, container_id)


async def test_a_container_killed_mid_command_raises(docker_config, docker_client):
    from agentgym.sandboxes.docker import DockerSandbox

    async with DockerSandbox(docker_config) as box:
        killer = asyncio.create_task(_kill_soon(docker_client, box.container_id))
        with pytest.raises(SandboxError, match="gone or stopped"):
            await box.exec("echo started; sleep 30", timeout=60)  # was: exit code 137
        await killer


async def test_a_command_killed_by_the_agent_is_still_an_exit_code(docker_config):
    from agentgym.sandboxes.docker import DockerSandbox

    async with DockerSandbox(docker_config) as box:
        r = await box.exec("kill -KILL $$")
        assert r.exit_code == 137 and not r.timed_out
        assert (await box.exec("echo alive")).stdout == "alive\n"


class _HiddenTestsEnv(BaseEnv):
    """Runs 'hidden tests' in a container on submit, the way the SWE env scores a patch."""

    def __init__(self, config):
        super().__init__()
        self.config, self.box = config, None

    async def _reset(self, seed, options):
        from agentgym.sandboxes.docker import DockerSandbox

        self.box = DockerSandbox(self.config)
        await self.box.start()
        return [Message("user", "submit")], {"task_id": "hidden-tests"}

    async def _step(self, action):
        result = await self.box.exec("sleep 30; exit 1", timeout=60)
        return StepResult((Message("user", "tests ran"),), 1.0 if result.ok else 0.0,
                          terminated=True)

    async def aclose(self):
        if self.box is not None:
            await self.box.aclose()


async def test_a_sandbox_death_while_scoring_is_an_error_trajectory(docker_config, docker_client):
    from agentgym.policies import RandomPolicy
    from agentgym.rollout import RolloutConfig, run_groups

    env = _HiddenTestsEnv(docker_config)

    def make():
        return env

    async def kill_when_running():
        for _ in range(600):  # the container starts in reset
            if env.box is not None and env.box.container_id is not None:
                break
            await asyncio.sleep(0.1)
        await _kill_soon(docker_client, env.box.container_id, 1.5)

    killer = asyncio.create_task(kill_when_running())
    (traj,) = await run_groups(make, RandomPolicy(0), [0], RolloutConfig(step_timeout=60))
    await killer
    assert traj.status == "error" and traj.outcome_reward is None  # not a 0 in the loss
    assert "SandboxError" in traj.error
