"""Every mined task is sound in Docker, and mining reproduces the shipped tasks.

For a task: at the base (the bug applied, nothing fixed) its own judging — test patch applied,
FAIL_TO_PASS and PASS_TO_PASS run — fails every FAIL_TO_PASS test and passes every
PASS_TO_PASS one, so an empty patch does not resolve it; the oracle patch played through the
env (``git apply``, then ``submit``) resolves it with reward 1. The exhaustive sweep over every
shipped task is marked ``sweep``; the default run checks a fixed sample from four packages,
two of them test packages. Mining again from the recorded seed gives the shipped instances
byte for byte (a prefix by default, a whole package in the sweep).
"""

from __future__ import annotations

import dataclasses

import pytest

from agentgym.envs.swe import SWEEnv
from agentgym.envs.swe.evaluation import PASSING, evaluate
from agentgym.envs.swe.mining.recipe import REAL_DIR, load_recipes
from agentgym.envs.swe.task import SWETask, real_tasks

TASKS = {t.instance_id: t for t in real_tasks()}


def _sample() -> list[str]:
    """The first task of four packages (two test packages), in id order: a fixed sample."""
    chosen: dict[str, list[str]] = {"train": [], "test": []}
    seen: set[str] = set()
    for task_id, task in sorted(TASKS.items()):
        package = task_id.split("__")[0]
        if package not in seen and len(chosen[task.split or "train"]) < 2:
            seen.add(package)
            chosen[task.split or "train"].append(task_id)
    return chosen["train"] + chosen["test"]


SAMPLE = _sample()


async def check_task(task: SWETask) -> None:
    """The base fails FAIL_TO_PASS and passes PASS_TO_PASS; the oracle resolves (reward 1)."""
    async with SWEEnv(tasks=[task], split="all", sandbox="docker", pool_size=1) as env:
        await env.reset(options={"task_id": task.instance_id})
        assert env.sandbox is not None
        base = await evaluate(env.sandbox, task, patch="(the base, unchanged)")
        assert not base.resolved, f"{task.instance_id}: the base already resolves"
        failed_before = [t for t in task.fail_to_pass if base.statuses[t] not in PASSING]
        assert failed_before == list(task.fail_to_pass), base.output[-2000:]
        broken = [t for t in task.pass_to_pass if base.statuses[t] not in PASSING]
        assert not broken, f"PASS_TO_PASS fail at the base: {broken[:5]}"
        applied = await env.step(env.expert_action())  # git apply the oracle patch
        assert applied.valid and not applied.done
        result = await env.step(env.expert_action())  # submit
        assert result.done and result.info["resolved"], result.info
        assert result.reward == 1.0


@pytest.fixture
async def pools():
    from agentgym.sandboxes.pool import close_shared_pools

    yield
    await close_shared_pools()


@pytest.mark.docker
@pytest.mark.parametrize("task_id", SAMPLE)
async def test_sample_task_in_docker(docker_engine, sandbox_image, pools, task_id):
    await check_task(TASKS[task_id])


@pytest.mark.docker
@pytest.mark.sweep
@pytest.mark.parametrize("task_id", sorted(TASKS))
async def test_every_task_in_docker(docker_engine, sandbox_image, pools, task_id):
    await check_task(TASKS[task_id])


def _lines(path):
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


@pytest.mark.docker
async def test_mining_reproduces_the_first_tasks(docker_engine, sandbox_image, tmp_path):
    """Mining inflection again, stopped after 3 tasks, gives the shipped first 3 exactly."""
    from agentgym.envs.swe.mining.cli import mine_to

    recipe = dataclasses.replace(load_recipes().get("inflection"), max_tasks=3)
    path = await mine_to(recipe, tmp_path, log=lambda line: None)
    assert _lines(path) == _lines(REAL_DIR / "inflection.jsonl")[:3]


@pytest.mark.docker
@pytest.mark.sweep
async def test_mining_reproduces_a_package(docker_engine, sandbox_image, tmp_path):
    from agentgym.envs.swe.mining.cli import mine_to

    path = await mine_to(load_recipes().get("inflection"), tmp_path, log=lambda line: None)
    assert path.read_bytes() == (REAL_DIR / "inflection.jsonl").read_bytes()
