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
@pytest.mark.parametrize("package", sorted(load_recipes().recipes))
async def test_mining_reproduces_every_package(docker_engine, sandbox_image, tmp_path,
                                               package):
    """The whole shipped file, byte for byte, from the recorded recipe (its dropped tasks
    mined again and left out)."""
    from agentgym.envs.swe.mining.cli import mine_to

    recipe = load_recipes().get(package)
    path = await mine_to(recipe, tmp_path, log=lambda line: None)
    assert path.read_bytes() == (REAL_DIR / f"{recipe.slug}.jsonl").read_bytes()


def test_recorded_drops_are_mined_tasks_with_reasons():
    """Each recipe's dropped ids name tasks of that package, with a reason, none shipped."""
    for recipe in load_recipes().recipes.values():
        for instance_id, reason in recipe.dropped.items():
            assert instance_id.startswith(f"{recipe.slug}-{recipe.version}__"), instance_id
            assert len(reason) > 20 and instance_id not in TASKS, (instance_id, reason)


def test_drop_recorded_leaves_out_exactly_the_recorded_ids():
    from agentgym.envs.swe.mining.cli import drop_recorded

    recipe = dataclasses.replace(load_recipes().get("inflection"),
                                 dropped={"inflection-0.5.1__x-1": "hangs at the base only "
                                          "sometimes (a race)"})
    mined = [{"instance_id": "inflection-0.5.1__x-0"}, {"instance_id": "inflection-0.5.1__x-1"},
             {"instance_id": "inflection-0.5.1__x-2"}]
    lines: list[str] = []
    kept = drop_recorded(recipe, mined, lines.append)
    assert [i["instance_id"] for i in kept] == ["inflection-0.5.1__x-0", "inflection-0.5.1__x-2"]
    assert lines == ["inflection==0.5.1: dropped inflection-0.5.1__x-1: hangs at the base only "
                     "sometimes (a race)"]
