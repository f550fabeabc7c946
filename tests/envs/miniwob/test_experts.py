"""The scripted solvers reach MiniWoB's own success, and broken solutions get its own failure.

MiniWoB ships no gold actions, so the solvers stand in for them (see
``agentgym.envs.miniwob.experts``). The default run plays a fixed sample of seeds per task
and needs every one won; the ``sweep`` run plays 40 seeds per task and needs >= 95%.
"""

from __future__ import annotations

import dataclasses

import pytest

from agentgym import Message, ToolCall
from agentgym.envs.miniwob import MiniWoBEnv
from agentgym.envs.miniwob.experts import SOLVERS
from agentgym.policies.factory import make_agent
from agentgym.rollout import RolloutConfig, run_groups

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

SAMPLE_SEEDS = (1000, 1001)
SWEEP_SEEDS = range(40)


async def solve(env: MiniWoBEnv, seed: int) -> tuple[bool, float]:
    """Play the solver on one seed: (MiniWoB's success, raw reward)."""
    await env.reset(seed=seed)
    for _ in range(40):
        result = await env.step(await env.expert_action())
        if result.done:
            return bool(result.info["success"]), float(result.info["raw_reward"])
    return False, 0.0


@pytest.mark.parametrize("task", sorted(SOLVERS))
async def test_solver_wins_a_fixed_sample(browser, task: str) -> None:
    async with MiniWoBEnv(task) as env:
        for seed in SAMPLE_SEEDS:
            won, raw = await solve(env, seed)
            assert won and raw == 1.0, f"{task} seed {seed}: raw reward {raw}"


@pytest.mark.sweep
@pytest.mark.parametrize("task", sorted(SOLVERS))
async def test_solver_reaches_95_percent(browser, task: str) -> None:
    async with MiniWoBEnv(task) as env:
        wins = [(await solve(env, seed))[0] for seed in SWEEP_SEEDS]
    assert sum(wins) / len(wins) >= 0.95, f"{task}: {sum(wins)}/{len(wins)}"


def _break(action: Message, **changes: str) -> Message:
    """The action with each call's arguments changed where named."""
    calls = tuple(dataclasses.replace(c, arguments={
        k: changes.get(f"{c.name}.{k}", v) for k, v in c.arguments.items()})
        for c in action.tool_calls)
    return dataclasses.replace(action, tool_calls=calls)


@pytest.mark.parametrize(("task", "change"), [
    ("enter-text", {"type.text": "wrong text"}),
    ("login-user", {"type.text": "nobody"}),
    ("choose-list", {"select.option": "__first__"}),
    ("click-checkboxes", {"__skip__": "first"}),
])
async def test_broken_solutions_fail_by_miniwobs_own_check(browser, task: str,
                                                          change: dict[str, str]) -> None:
    async with MiniWoBEnv(task) as env:
        for seed in SAMPLE_SEEDS:
            await env.reset(seed=seed)
            action = await env.expert_action()
            if "__skip__" in change:  # one box wrong: leave out a tick, or tick one too many
                calls = action.tool_calls
                box = next(e.ref for e in env.elements.values() if e.role == "checkbox")
                wrong = calls[1:] if len(calls) > 1 else (
                    ToolCall("x", "click", {"ref": box}), *calls)
                action = dataclasses.replace(action, tool_calls=wrong)
            elif "select.option" in change:
                box = next(e for e in env.elements.values() if e.role == "combobox")
                wanted = action.tool_calls[0].arguments["option"]
                action = _break(action, **{"select.option": next(
                    o for o in box.options if o != wanted)})
            else:
                action = _break(action, **change)
            result = await env.step(action)
            assert result.done and not result.info["success"], (task, seed, action)
            assert result.info["raw_reward"] < 1.0  # -1, or partial credit for checkboxes


async def test_expert_and_random_through_the_rollout_engine(browser) -> None:
    config = RolloutConfig(concurrency=4, max_steps=8)
    for spec, task in (("expert", "click-tab"), ("expert", "login-user"),
                       ("random", "click-button")):
        trajectories = await run_groups(lambda t=task: MiniWoBEnv(t), make_agent(spec, seed=0),
                                        SAMPLE_SEEDS, config, env_id=f"miniwob/{task}")
        assert all(t.status in ("terminated", "truncated") for t in trajectories), \
            [t.error for t in trajectories]
        if spec == "expert":
            assert all(t.outcome_reward == 1.0 for t in trajectories)
