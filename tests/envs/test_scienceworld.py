"""ScienceWorld env (scienceworld/ScienceWorld-v0) on the package's own engine, in a pooled JVM.

Replaying a gold path takes several seconds a task type on a loaded 2-core machine, so the
default run replays a fixed sample of task types and the ``sweep`` marker replays all 30.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

import agentgym
from agentgym import ConfigError, Message
from agentgym.envs.scienceworld import ScienceWorldEnv, resolve_task, task_names

pytest.importorskip("scienceworld")

SAMPLE = ("find-living-thing", "identify-life-stages-1", "chemistry-mix")
"""Task types with short gold paths from three topics, replayed in every default run."""


async def play_gold(env: ScienceWorldEnv, **options: object) -> tuple[list[str], object]:
    """Replay the engine's gold path through the env, as the model's replies."""
    await env.reset(seed=0, options=options)
    commands = []
    while True:
        command = (await env.expert_action()).content
        commands.append(command)
        result = await env.step(Message("assistant", f"<action>{command}</action>"))
        if result.done:
            return commands, result


async def assert_gold_scores_100(task: str) -> None:
    env = ScienceWorldEnv(task=task, valid_actions_in_info=False)
    commands, result = await play_gold(env, variation=0)
    await env.aclose()
    assert result.terminated and result.info["success"], (task, commands)
    assert result.info["score"] == 100


@pytest.mark.slow
@pytest.mark.parametrize("task", SAMPLE)
async def test_gold_path_scores_100_on_a_sample_of_task_types(task: str) -> None:
    await assert_gold_scores_100(task)


@pytest.mark.sweep
@pytest.mark.parametrize("task", task_names())
async def test_gold_path_scores_100_on_the_first_variation_of_every_task_type(task: str
                                                                              ) -> None:
    await assert_gold_scores_100(task)


def _package_replay(task: str, variation: int, commands: list[str]) -> list[list]:
    """The same commands through the package's own, unmodified env in its own JVM."""
    code = f"""
import json
from scienceworld import ScienceWorldEnv
env = ScienceWorldEnv(envStepLimit=10**9)
env.load({task!r}, {variation}, "")
env.reset()
out = []
for c in {commands!r}:
    obs, reward, done, info = env.step(c)
    out.append([obs.strip(), reward, done, info["score"]])
print(json.dumps(out))
env.close()
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=True)
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.slow
async def test_broken_solutions_agree_with_the_package() -> None:
    env = ScienceWorldEnv(task="find-living-thing", valid_actions_in_info=False)
    gold, _ = await play_gold(env, variation=0)
    focus = next(i for i, c in enumerate(gold) if c.startswith("focus on"))
    wrong_focus = [*gold[:focus], "focus on door to kitchen"]  # a failure state
    stop_short = gold[:-2]                                    # never completes
    for broken in (wrong_focus, stop_short):
        await env.reset(seed=0, options={"variation": 0})
        ours = []
        for command in broken:
            result = await env.step(Message("assistant", command))
            ours.append([result.observation[-1].content, result.reward, result.terminated,
                         result.info["score"]])
        theirs = _package_replay("find-living-thing", 0, broken)
        assert ours == [[o, float(r), d, s] for o, r, d, s in theirs]
        assert not result.info["success"]
    assert ours[-1][2] is False                 # stopping short leaves the task open ...
    assert theirs[-1][3] < 100
    await env.aclose()


async def _expert_play(env: ScienceWorldEnv, between: ScienceWorldEnv | None = None,
                       ) -> list[tuple[str, str, float, bool, int]]:
    """The expert's episode on ``env``; ``between`` starts a new episode before every move."""
    play: list[tuple[str, str, float, bool, int]] = []
    while not (play and play[-1][3]):
        command = (await env.expert_action()).content
        if between is not None:
            await between.reset(seed=len(play) + 1)
        result = await env.step(Message("assistant", f"<action>{command}</action>"))
        play.append((command, result.observation[-1].content, result.reward, result.done,
                     result.info["score"]))
    return play


@pytest.mark.slow
async def test_concurrent_episodes_on_one_pool_play_as_each_alone() -> None:
    # Boiling makes new objects (steam) as it plays. When every episode of a JVM shared the
    # engine's object counter and Random, each load by another episode reset them: the new
    # objects took ids of existing ones, and the gold path ended with "focus on substance in
    # metal pot" unknown, its sequence exhausted at score 22.
    env = ScienceWorldEnv(task="boil", valid_actions_in_info=False)
    other = ScienceWorldEnv(task="find-living-thing", valid_actions_in_info=False)
    await env.reset(seed=3)
    together = await _expert_play(env, between=other)
    assert env._lease is not None and other._lease is not None
    assert env._lease.jvm_id == other._lease.jvm_id  # one JVM of the shared pool
    await other.aclose()
    await env.reset(seed=3)
    alone = await _expert_play(env)
    await env.aclose()
    assert together == alone
    assert alone[-1][4] == 100


async def _package_gold(task: str, variation: int) -> list[str]:
    """The gold path the package's own env makes in a fresh JVM of its own, in the package's
    documented order (load with the gold path, reset, read it), hashing as the pool does."""
    from agentgym.envs.jvm import REFERENCE_JAVA_OPTIONS

    code = f"""
import json
from scienceworld import ScienceWorldEnv
env = ScienceWorldEnv()
env.load({task!r}, {variation}, "", generateGoldPath=True)
env.reset()
print(json.dumps(env.get_gold_action_sequence()))
env.close()
"""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "JAVA_TOOL_OPTIONS": REFERENCE_JAVA_OPTIONS})
    try:
        out, _ = await asyncio.wait_for(process.communicate(), 300)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0
    return json.loads(out.decode().splitlines()[-1])


@pytest.mark.slow
async def test_an_isolate_plays_an_episode_as_a_fresh_engine_after_a_gold_path() -> None:
    # The engine's gold agent caches a room-search pattern per start room for the life of its
    # classes. A pooled isolate that had made variation 50's gold path then gave variation
    # 47 another route and other wires than the package's engine does.
    reference = asyncio.ensure_future(_package_gold("test-conductivity", 47))
    before = ScienceWorldEnv(task="test-conductivity", valid_actions_in_info=False)
    await before.reset(seed=0, options={"variation": 50})
    await before.expert_action()  # the engine makes variation 50's gold path
    assert before._lease is not None
    isolate = (before._lease.jvm_id, before._lease.isolate_id)
    await before.aclose()  # the isolate goes back to the pool, idle
    env = ScienceWorldEnv(task="test-conductivity", valid_actions_in_info=False)
    await env.reset(seed=0, options={"variation": 47})
    assert env._lease is not None and (env._lease.jvm_id, env._lease.isolate_id) == isolate
    # The engine's reset made no gold path for this episode, which asked for none (it used
    # to, on every reset of an isolate that had once made one).
    assert list(env._engine.server.getGoldActionSequence()) == []
    commands, result = [], None
    while result is None or not result.done:
        commands.append((await env.expert_action()).content)
        result = await env.step(Message("assistant", f"<action>{commands[-1]}</action>"))
    await env.aclose()
    assert result.terminated and result.info["score"] == 100
    gold = await reference
    assert commands == gold[:len(commands)]  # the path's last wait comes after the end


@pytest.mark.slow
async def test_an_engine_call_cut_off_by_a_timeout_keeps_its_isolate_from_the_next_episode(
        ) -> None:
    # A step timeout cancels the awaiting coroutine, not the engine call in its worker thread.
    # Closing the env used to hand the isolate straight to the next episode while that call
    # ran on: when a cut-off gold load ended, it left its own world in the isolate, and the
    # next episode (boil) went on in the other task's world.
    import threading

    from agentgym.envs.scienceworld import engine

    pool = engine.pool()
    first = ScienceWorldEnv(task="find-living-thing", valid_actions_in_info=False)
    await first.reset(seed=0, options={"variation": 0})
    assert first._lease is not None and first._engine is not None
    isolate = (first._lease.jvm_id, first._lease.isolate_id)
    leases = sum(n for _, _, n in pool.stats())
    entered, go_on = threading.Event(), threading.Event()
    load = first._engine.load

    def held_load(*args: object) -> None:  # the engine call, held until the test lets it go
        entered.set()
        go_on.wait(300)
        load(*args)

    first._engine.load = held_load
    env = ScienceWorldEnv(task="boil", valid_actions_in_info=False)
    try:
        gold = asyncio.ensure_future(first.expert_action())  # its gold load runs held_load
        assert await asyncio.to_thread(entered.wait, 300)
        gold.cancel()  # as a step timeout does
        with pytest.raises(asyncio.CancelledError):
            await gold
        await first.aclose()
        await env.reset(seed=0, options={"variation": 3})
        assert env._lease is not None
        assert (env._lease.jvm_id, env._lease.isolate_id) != isolate
        assert sum(n for _, _, n in pool.stats()) == leases + 1  # first's is still out
    finally:
        go_on.set()
    for _ in range(600):  # the cut-off call ends, then its isolate goes back to the pool
        if sum(n for _, _, n in pool.stats()) == leases:
            break
        await asyncio.sleep(0.5)
    assert sum(n for _, _, n in pool.stats()) == leases  # first's lease back; env's out
    result = await env.step(Message("assistant", "<action>look around</action>"))
    assert result.observation[-1].content.startswith("This outside location is called the "
                                                     "outside.")
    assert "Your task is to boil" in env.render()  # the engine's task, read by the step
    await env.aclose()


@pytest.mark.slow
async def test_the_benchmarks_step_limit_truncates_and_none_lets_the_gold_path_finish() -> None:
    # This gold path is 178 actions, longer than the benchmark's 100 moves: on the package's
    # engine too it ends at the move past 100, with part of the score.
    limited = agentgym.make("scienceworld/ScienceWorld-v0",
                            task="inclined-plane-friction-unnamed-surfaces",
                            valid_actions_in_info=False)
    await limited.reset(seed=0, options={"variation": 0})
    moves = 0
    while True:
        command = (await limited.expert_action()).content
        result = await limited.step(Message("assistant", command))
        if result.done:
            break
        moves = result.info["moves"]
    assert moves <= 100 < result.info["moves"] and result.truncated and not result.terminated
    assert 0 < result.info["score"] < 100 and "truncated_by" not in result.info
    await limited.aclose()
    unlimited = ScienceWorldEnv(task="inclined-plane-friction-unnamed-surfaces",
                                valid_actions_in_info=False, step_limit=None)
    _, result = await play_gold(unlimited, variation=0)
    assert result.terminated and result.info["score"] == 100
    await unlimited.aclose()
    with pytest.raises(ConfigError, match="step_limit must be a positive int"):
        ScienceWorldEnv(step_limit=-1)


@pytest.mark.slow
async def test_the_outcome_is_the_benchmarks_score_when_a_task_starts_with_points() -> None:
    from agentgym.policies.factory import make_agent
    from agentgym.rollout import run_groups

    # Variation 3 of lifespan (longest lived) starts where the animals are: 50 points at
    # reset, so the one rewarded move is worth 50 and the benchmark's score is 100.
    (trajectory,) = await run_groups(
        lambda: agentgym.make("scienceworld/ScienceWorld-v0", task="lifespan-longest-lived",
                              valid_actions_in_info=False), make_agent("expert"), [3])
    assert sum(trajectory.step_rewards) == 50.0 and trajectory.outcome_reward == 100.0
    assert trajectory.steps[-1].result.info["success"]


@pytest.mark.slow
async def test_check_env() -> None:
    def make() -> agentgym.Env:
        return agentgym.make("scienceworld/ScienceWorld-v0", task="melt")

    await agentgym.check_env(make(), make_env=make)  # the second env needs the same task


async def test_task_names_ids_and_typos() -> None:
    assert len(task_names()) == 30
    assert resolve_task("1-1") == "boil"
    assert resolve_task("boil") == "boil"
    with pytest.raises(ConfigError, match="did you mean 'boil'"):
        ScienceWorldEnv(task="boill")
    with pytest.raises(ConfigError, match="did you mean 'dev'"):
        ScienceWorldEnv(split="deev")
    with pytest.raises(ConfigError, match="expected reset options"):
        await ScienceWorldEnv().reset(seed=0, options={"taks": "boil"})


async def test_seeds_cover_task_types_and_splits_are_the_benchmarks() -> None:
    env = ScienceWorldEnv(split="test", valid_actions_in_info=False)
    _, first = await env.reset(seed=0)
    _, second = await env.reset(seed=1)
    _, wrapped = await env.reset(seed=30)
    assert (first["task"], second["task"]) == (task_names()[0], task_names()[1])
    assert wrapped["task"] == first["task"] and wrapped["variation"] != first["variation"]
    train = ScienceWorldEnv(task="boil", split="train", valid_actions_in_info=False)
    variations = {(await train.reset(seed=s))[1]["variation"] for s in range(40)}
    assert first["variation"] not in variations and len(variations) > 1
    await env.aclose()
    await train.aclose()


async def test_actions_rewards_state_key_and_mistakes() -> None:
    env = ScienceWorldEnv(task="boil")
    messages, info = await env.reset(seed=0, options={"variation": 0})  # boil water
    assert "boil water" in messages[0].content and "focus on OBJ" in messages[0].content
    assert info["state_key"].startswith("hallway|") and info["benchmark"].startswith("sci")
    look = await env.step(Message("assistant", "First I look.\n<action>look around</action>"))
    assert look.valid and look.reward == 0.0 and look.info["valid_actions"]
    assert look.info["state_key"] == info["state_key"]  # nothing changed: the same state
    for reply in ["", "\x00\x01", "🌍" * 500]:
        result = await env.step(Message("assistant", reply))
        assert not result.valid and not result.done and result.reward == 0.0
    unknown = await env.step(Message("assistant", "x" * 100_000))
    assert not unknown.valid and unknown.observation[-1].content.startswith("No known action")
    opened = await env.step(Message("assistant", "open door to kitchen"))
    assert opened.valid and opened.info["state_key"] != info["state_key"]
    assert "hallway" in env.render()
    failed = await env.step(Message("assistant", "focus on agent"))  # not the water
    assert failed.terminated and failed.reward < 0 and not failed.info["success"]
    await env.aclose()


def test_suite_covers_every_task_type_on_test_variations() -> None:
    from agentgym.evaluation.suites import get_suite

    (entry,) = get_suite("scienceworld").entries
    assert entry.env == "scienceworld/ScienceWorld-v0" and entry.split == "test"
    assert len(entry.seeds) == 2 * len(task_names())  # every task type, two variations
