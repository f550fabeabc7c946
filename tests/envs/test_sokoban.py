"""Tests for the built-in Sokoban env (agentgym/Sokoban-v0)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import agentgym
from agentgym import ConfigError, EnvArgumentError, Message, StepResult, ToolCall
from agentgym.envs.sokoban import Level, SokobanEnv, generate, move, solve

# P at (1, 1); one box two cells right of it; the target at the end of the corridor.
CORRIDOR = """
# # # # # # #
# P _ X _ O #
# _ _ _ _ _ #
# # # # # # #
"""


def act(*names: str) -> Message:
    return Message("assistant", "".join(f"<action>{n}</action>" for n in names))


async def reset(level: str | None = None, seed: int | None = 0, **kwargs: int) -> SokobanEnv:
    env = SokobanEnv(**kwargs)
    await env.reset(seed=seed, options=None if level is None else {"level": level})
    return env


def board(result: StepResult) -> str:
    """The grid text shown in the step's last (user) message."""
    assert result.observation[-1].role == "user"
    return result.observation[-1].content


# -- generation and determinism ------------------------------------------------------------
async def test_same_seed_gives_same_level_and_task_id() -> None:
    a, b = SokobanEnv(), SokobanEnv()
    obs_a, info_a = await a.reset(seed=7)
    obs_b, info_b = await b.reset(seed=7)
    assert obs_a == obs_b and info_a == info_b
    assert info_a["task_id"] == "sokoban-6x6-b1-seed7"
    # Later unseeded resets continue the seeded stream, so they match too.
    assert (await a.reset())[1] == (await b.reset())[1]


async def test_different_seeds_give_different_levels() -> None:
    env = SokobanEnv()
    keys = {(await env.reset(seed=s))[1]["state_key"] for s in range(20)}
    assert len(keys) >= 18


async def test_unseeded_reset_names_a_reproducible_seed() -> None:
    env = SokobanEnv(size=7, num_boxes=2)
    _, info = await env.reset()
    seed = int(info["task_id"].rsplit("seed", 1)[1])
    assert info["task_id"] == f"sokoban-7x7-b2-seed{seed}"
    assert (await SokobanEnv(size=7, num_boxes=2).reset(seed=seed))[1] == info


@pytest.mark.parametrize(("size", "num_boxes", "seeds"), [(6, 1, 50), (7, 2, 10), (8, 3, 5)])
async def test_generated_levels_are_solved_by_the_solver_through_the_env(
        size: int, num_boxes: int, seeds: int) -> None:
    env = SokobanEnv(size=size, num_boxes=num_boxes)
    for seed in range(seeds):
        await env.reset(seed=seed)
        start = env.level
        assert start.height == start.width == size and len(start.boxes) == num_boxes
        assert not start.solved
        moves = solve(start)
        assert moves, f"seed {seed}: no solution for\n{start.render()}"
        total = 0.0
        for i, direction in enumerate(moves):
            result = await env.step(act(direction))
            assert result.valid and result.reward is not None
            assert result.terminated == (i == len(moves) - 1)
            total += result.reward
        assert result.info["success"] is True and result.info["boxes_on_target"] == num_boxes
        expected = -0.1 * len(moves) + (num_boxes - start.boxes_on_target) + 10.0
        assert total == pytest.approx(expected)


def test_generator_is_a_pure_function_of_the_rng() -> None:
    one = generate(8, 2, np.random.default_rng(3), max_steps=50)
    two = generate(8, 2, np.random.default_rng(3), max_steps=50)
    assert one == two and one.render() == two.render()
    assert all(not one.blocked(b) for b in one.boxes | one.targets | {one.player})


# -- moves and rewards ---------------------------------------------------------------------
async def test_walking_into_a_wall_is_a_valid_no_op() -> None:
    env = await reset(CORRIDOR)
    before = env.state_key()
    result = await env.step(act("up"))
    assert result.valid and result.reward == pytest.approx(-0.1) and not result.terminated
    assert env.state_key() == before == result.info["state_key"]
    assert result.observation[0].content == "up: blocked, nothing moved"


async def test_pushing_a_box_onto_its_target_solves_the_level() -> None:
    env = await reset(CORRIDOR)
    r1 = await env.step(act("right"))  # walk
    r2 = await env.step(act("right"))  # push the box along the floor
    r3 = await env.step(act("right"))  # push it onto the target
    assert [r.reward for r in (r1, r2)] == [pytest.approx(-0.1)] * 2
    assert r3.reward == pytest.approx(-0.1 + 1.0 + 10.0)
    assert r3.terminated and not r3.truncated
    assert r3.info == {**r3.info, "valid": True, "boxes_on_target": 1, "success": True}
    assert "# _ _ _ P √ #" in board(r3) and "solved" in board(r3)
    assert r3.observation[0].content == "right: pushed a box onto a target"


@pytest.mark.parametrize("level", [
    "# # # # #\n# P X # #\n# O _ _ #\n# # # # #",  # box against a wall
    "# # # # # # #\n# P X X O O #\n# # # # # # #",  # box against another box
])
async def test_a_box_that_cannot_move_blocks_the_player(level: str) -> None:
    env = await reset(level)
    before = env.level
    result = await env.step(act("right"))
    assert result.valid and result.reward == pytest.approx(-0.1)
    assert env.level == before


async def test_pushing_a_box_off_a_target_costs_one() -> None:
    env = await reset("# # # # # # #\n# P √ _ _ _ #\n# X O _ _ _ #\n# # # # # # #")
    result = await env.step(act("right"))
    assert result.reward == pytest.approx(-0.1 - 1.0)
    assert result.info["boxes_on_target"] == 0 and result.info["success"] is False


async def test_pushing_a_box_from_target_to_target_is_neutral() -> None:
    env = await reset("# # # # # # #\n# P √ O _ _ #\n# X _ _ _ _ #\n# # # # # # #")
    result = await env.step(act("right"))
    assert result.reward == pytest.approx(-0.1) and result.info["boxes_on_target"] == 1


def test_move_and_solve_on_hand_made_levels() -> None:
    level = Level.from_text(CORRIDOR)
    assert solve(level) == ["right", "right", "right"]
    assert move(level, "left") == (level, "blocked")
    assert solve(Level.from_text("# # # # #\n# X _ O #\n# _ P _ #\n# # # # #")) is None  # cornered
    assert solve(Level.from_text("# # # #\n# P √ #\n# # # #")) == []
    assert solve(generate(10, 3, np.random.default_rng(0)), max_states=3) is None


# -- tool calls: formats, several per turn, mistakes ----------------------------------------
async def test_several_calls_in_one_message_run_in_order() -> None:
    env = await reset(CORRIDOR)
    calls = "".join(f'<tool_call>{{"name": "{d}", "arguments": {{}}}}</tool_call>'
                    for d in ("down", "right", "up"))
    result = await env.step(Message("assistant", calls))
    assert result.valid and result.reward == pytest.approx(-0.3)
    assert [m.role for m in result.observation] == ["tool", "tool", "tool", "user"]
    assert [m.name for m in result.observation[:3]] == ["down", "right", "up"]
    assert env.level.player == (1, 2)


async def test_structured_tool_calls_solve_in_one_turn_and_later_moves_do_not_run() -> None:
    env = await reset(CORRIDOR)
    calls = tuple(ToolCall(f"c{i}", "right", {}) for i in range(4))
    result = await env.step(Message("assistant", "", tool_calls=calls))
    assert result.terminated and result.info["success"] is True
    assert result.reward == pytest.approx(-0.3 + 1.0 + 10.0)  # the fourth call is not a move
    assert [m.tool_call_id for m in result.observation[:4]] == ["c0", "c1", "c2", "c3"]
    assert result.observation[3].content.startswith("not run")


@pytest.mark.parametrize("text", [
    "I will go up.",  # no call
    "<action>jump</action>",  # unknown tool
    '<tool_call>{"name": "up", "arguments": {"steps": 2}}</tool_call>',  # extra argument
    "<action>right</action><action>jump</action>",  # one bad call voids the turn
    "<action>right</action><action>{oops</action>",  # malformed block beside a good one
    "<action>down</action>" * 9,  # more calls than the ToolBox runs
])
async def test_agent_mistakes_are_invalid_observations_with_zero_reward(text: str) -> None:
    env = await reset(CORRIDOR)
    before = env.state_key()
    result = await env.step(Message("assistant", text))
    assert not result.valid and result.info["valid"] is False
    assert result.reward == 0.0 and not result.done
    assert env.state_key() == before and before in board(result)
    shown = "\n".join(m.content for m in result.observation)
    assert "error" in shown and "No move was made" in shown
    assert sum(m.role == "user" for m in result.observation) == 1


# -- observations, state keys, tools, registration ------------------------------------------
async def test_first_observation_and_state_key() -> None:
    env = SokobanEnv()
    obs, info = await env.reset(seed=1)
    assert [m.role for m in obs] == ["user"]
    text = obs[0].content
    for needle in ("Push every box onto a target", "# wall", "√ box on target", "<action>up"):
        assert needle in text
    assert env.state_key() == info["state_key"] == env.level.render()
    assert info["state_key"] in text and "Current board" not in info["state_key"]
    assert len(info["state_key"].splitlines()) == 6


def test_tools_are_four_zero_argument_specs() -> None:
    env = SokobanEnv()
    assert [t.name for t in env.tools] == ["up", "down", "left", "right"]
    for spec in env.tools:
        assert spec.parameters == {"type": "object", "properties": {}}
        json.dumps(spec.to_openai())


async def test_registered_env_truncates_after_forty_turns() -> None:
    env = agentgym.make("agentgym/Sokoban-v0")
    await env.reset(options={"level": CORRIDOR})
    results = [await env.step(act("up")) for _ in range(40)]
    assert not any(r.done for r in results[:-1]) and results[-1].truncated
    assert not results[-1].terminated and results[-1].info["success"] is False


async def test_expert_action_solves_through_the_registered_env_and_replans() -> None:
    env = agentgym.make("agentgym/Sokoban-v0")
    await env.reset(seed=6)
    first = env.expert_action().tool_calls[0].name
    detour = await env.step(act("right" if first == "left" else "left"))
    assert detour.observation[0].content.endswith("moved")  # a walk, so still solvable
    for _ in range(39):
        result = await env.step(env.expert_action())
        if result.done:
            break
    assert result.terminated and result.info["success"] is True
    with pytest.raises(RuntimeError, match="solved"):
        env.expert_action()


async def test_passes_the_contract_checker_with_a_real_solution() -> None:
    probe = SokobanEnv()
    await probe.reset(seed=0)
    solution = [act(d) for d in solve(probe.level)]
    ran = await agentgym.check_env(agentgym.make("agentgym/Sokoban-v0"), actions=solution)
    assert "determinism" in ran and "agent mistakes are observations" in ran


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"size": 4}, "expected size"),
    ({"size": "6"}, "expected size"),
    ({"size": True}, "expected size"),
    ({"num_boxes": 0}, "expected num_boxes"),
    ({"size": 6, "num_boxes": 5}, r"num_boxes to be an int in \[1, 4\]"),
    ({"max_steps_generation": 0}, "expected max_steps_generation"),
])
def test_bad_kwargs_say_what_was_expected_and_how_to_fix(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as err:
        SokobanEnv(**kwargs)
    assert "fix:" in str(err.value)


def test_unknown_kwargs_are_rejected_by_make() -> None:
    with pytest.raises(EnvArgumentError, match="num_boxes"):
        agentgym.make("agentgym/Sokoban-v0", num_box=2)


async def test_bad_reset_options_and_levels_raise() -> None:
    with pytest.raises(ValueError, match="reset options"):
        await SokobanEnv().reset(options={"difficulty": 3})
    with pytest.raises(ValueError, match="exactly one player"):
        Level.from_text("# # # #\n# P P #\n# X O #\n# # # #")
    with pytest.raises(ValueError, match="got 'Z'"):
        Level.from_text("# Z #")
    with pytest.raises(ValueError, match="as many boxes as targets"):
        Level.from_text("# P X X O #")
