"""TextWorldExpress envs (twx/<Game>-v0) on the package's own engine, in a pooled JVM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys

import pytest

import agentgym
from agentgym import ConfigError, Message
from agentgym.envs.textworld_express import TextWorldExpressEnv, game_names
from agentgym.envs.textworld_express import engine as twx_engine

pytest.importorskip("textworld_express")

IDS = sorted(i for i in agentgym.registry if i.startswith("twx/"))


async def play_gold(env: TextWorldExpressEnv, seed: int) -> tuple[list[str], object]:
    """Replay the engine's gold path through the env, as the model's replies."""
    await env.reset(seed=seed)
    commands = []
    while True:
        command = (await env.expert_action()).content
        commands.append(command)
        result = await env.step(Message("assistant", f"<action>{command}</action>"))
        if result.done:
            return commands, result


def test_every_game_of_the_package_is_registered() -> None:
    games = {agentgym.registry[i].kwargs["game"] for i in IDS}
    assert games == set(game_names())


@pytest.mark.parametrize("game", game_names())
@pytest.mark.parametrize("split", ["train", "dev", "test"])
async def test_gold_path_wins_every_game_in_every_split(game: str, split: str) -> None:
    env = TextWorldExpressEnv(game, split=split)
    for seed in (0, 1):
        commands, result = await play_gold(env, seed)
        assert result.terminated and result.info["success"], (game, seed, commands)
        assert result.info["score"] == 1.0 and not result.info["failure"]
    await env.aclose()


def _package_replay(game: str, params: str, game_seed: int, fold: str,
                    commands: list[str]) -> list[tuple[str, float, bool, bool]]:
    """The same commands through the package's own, unmodified env in its own JVM."""
    code = f"""
import json
from textworld_express import TextWorldExpressEnv
env = TextWorldExpressEnv(envStepLimit=10**9)
env.reset(seed={game_seed}, gameFold={fold!r}, gameName={game!r}, gameParams={params!r})
out = []
for c in {commands!r}:
    obs, reward, done, info = env.step(c)
    out.append((obs.strip(), info["score"], info["tasksuccess"], info["taskfailure"]))
print(json.dumps(out))
env.close()
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    return [tuple(x) for x in json.loads(done.stdout.splitlines()[-1])]


@pytest.mark.parametrize(("game", "params", "breakage"), [
    ("coin", "numLocations=4", "stop_short"),        # never takes the coin
    ("cookingworld", "", "swap"),                    # prepares in the wrong order
    ("simonsays", "", "wrong"),                      # does what Simon did not say: a failure
    ("arithmetic", "", "wrong"),                     # puts the wrong item in the box
])
async def test_broken_solutions_agree_with_the_package(game: str, params: str,
                                                       breakage: str) -> None:
    env = TextWorldExpressEnv(game, params, split="dev")
    gold, _ = await play_gold(env, 3)
    if breakage == "stop_short":
        broken = gold[:-1]
    elif breakage == "swap":
        broken = gold[:-3] + [gold[-2], gold[-3], gold[-1]]
    else:
        broken = [*gold[:-1], "examine " + gold[-1].split()[-1] if game == "simonsays"
                  else "put 1 banana in box"]
    _, info = await env.reset(seed=3)
    ours = []
    for command in broken:
        result = await env.step(Message("assistant", command))
        ours.append((result.observation[-1].content, result.info["score"],
                     result.info["success"], result.info["failure"]))
        if result.done:
            break
    await env.aclose()
    theirs = _package_replay(game, params, info["game_seed"], "dev", broken)[: len(ours)]
    assert ours == theirs
    assert not ours[-1][2]  # the broken solution does not win, here as in the package


async def test_the_benchmarks_step_limit_truncates_where_the_package_ends_the_game() -> None:
    # The package's envStepLimit (100) ends the game on the step that takes it past 100.
    commands = ["look around"] * 105
    theirs = _package_dones("coin", "numLocations=3", 5, "train", commands, limit=100)
    env = agentgym.make("twx/CoinCollector-v0", game_params="numLocations=3")
    await env.reset(seed=5)
    for turn, command in enumerate(commands, 1):
        result = await env.step(Message("assistant", command))
        assert result.done == theirs[turn - 1], turn
        if result.done:
            break
    assert turn == 101 and result.truncated and not result.terminated
    assert "truncated_by" not in result.info  # the benchmark's limit, not the turn guard
    unlimited = TextWorldExpressEnv("coin", "numLocations=3", step_limit=None)
    await unlimited.reset(seed=5)
    for _ in range(101):
        assert not (await unlimited.step(Message("assistant", "look around"))).done
    with pytest.raises(ConfigError, match="step_limit must be a positive int"):
        TextWorldExpressEnv("coin", step_limit=0)
    await env.aclose()
    await unlimited.aclose()


def _package_dones(game: str, params: str, seed: int, fold: str, commands: list[str],
                   limit: int) -> list[bool]:
    """The package's own ``done`` for each command, at its step limit ``limit``."""
    code = f"""
import json
from textworld_express import TextWorldExpressEnv
env = TextWorldExpressEnv(envStepLimit={limit})
env.reset(seed={seed}, gameFold={fold!r}, gameName={game!r}, gameParams={params!r})
seeds = {{"train": env.getValidSeedsTrain}}[{fold!r}]()
env.reset(seed=seeds[{seed}], gameFold={fold!r}, gameName={game!r}, gameParams={params!r})
print(json.dumps([env.step(c)[2] for c in {commands!r}]))
env.close()
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("env_id", IDS)
async def test_check_env(env_id: str) -> None:
    await agentgym.check_env(agentgym.make(env_id))


async def test_same_seed_same_game_and_splits_are_the_benchmark_seed_ranges() -> None:
    a, b = TextWorldExpressEnv("twc", split="test"), TextWorldExpressEnv("twc", split="test")
    (obs_a, info_a), (obs_b, info_b) = await a.reset(seed=7), await b.reset(seed=7)
    assert obs_a == obs_b and info_a == info_b
    assert info_a["game_seed"] == 20007 and info_a["task_id"] == "twx-twc-test-20007"
    _, train = await a.reset(seed=1007)  # seed s plays game seed s % 1000 of the split
    assert train["game_seed"] == 20007
    _, dev = await TextWorldExpressEnv("twc", split="dev").reset(seed=7)
    assert dev["game_seed"] == 10007
    await a.aclose()
    await b.aclose()


async def test_game_params_reach_the_generator_and_bad_ones_are_config_errors() -> None:
    env = TextWorldExpressEnv("coin", {"numLocations": 3, "includeDoors": False})
    _, info = await env.reset(seed=0)
    assert info["generation"]["numLocations"] == 3 and info["generation"]["includeDoors"] == 0
    assert info["task_id"] == "twx-coin-numLocations=3-includeDoors=0-train-0"
    bad = TextWorldExpressEnv("coin", "numLocatons=3")
    with pytest.raises(ConfigError, match="Unrecognized property name"):
        await bad.reset(seed=0)
    with pytest.raises(ConfigError, match="did you mean 'coin'"):
        TextWorldExpressEnv("coins")
    with pytest.raises(ConfigError, match="did you mean 'test'"):
        TextWorldExpressEnv("coin", split="tset")
    await env.aclose()
    await bad.aclose()


async def test_agent_mistakes_are_observations_and_cost_nothing_when_empty() -> None:
    env = TextWorldExpressEnv("coin", "numLocations=3")
    await env.reset(seed=0)
    for reply in ["", "   \n\t", "\x00\x01\x02", "🌍" * 1000]:
        result = await env.step(Message("assistant", reply))
        assert not result.valid and not result.done and result.reward == 0.0
        assert "no command" in result.observation[-1].content
    for reply in ["dance wildly", "x" * 100_000, "<action>fly to the moon</action>"]:
        result = await env.step(Message("assistant", reply))
        assert not result.valid and result.reward == 0.0
        assert result.observation[-1].content.startswith("Unknown action")
    result = await env.step(Message("assistant", "I will look.\n<action>look around</action>"))
    assert result.valid and result.info["valid_actions"]
    await env.aclose()


async def test_state_key_names_the_state_and_recurs_on_revisits() -> None:
    env = TextWorldExpressEnv("coin", "numLocations=4,includeDoors=0")
    _, info = await env.reset(seed=2)
    start = info["state_key"]
    moves = [a for a in (await env.step(Message("assistant", "look around"))).info[
        "valid_actions"] if a.startswith("move ")]
    there = await env.step(Message("assistant", moves[0]))
    assert there.info["state_key"] != start
    back = {"north": "south", "south": "north", "east": "west", "west": "east"}
    home = await env.step(Message("assistant", "move " + back[moves[0].split()[1]]))
    assert home.info["state_key"] == start
    assert "coin" in env.render().lower()
    await env.aclose()


async def test_episodes_share_one_jvm() -> None:
    envs = [TextWorldExpressEnv("sorting") for _ in range(5)]
    for i, env in enumerate(envs):
        await env.reset(seed=i)
    pool = twx_engine.pool()
    assert len(pool.stats()) == 1 and pool.stats()[0][2] >= 5
    before = pool.stats()[0][2]
    for env in envs:
        await env.aclose()
    assert pool.stats()[0][2] == before - 5


async def test_a_reset_cancelled_while_leasing_gives_its_lease_back() -> None:
    # A reset that runs past the rollout's step timeout is cancelled while its worker thread
    # is still leasing (starting a JVM, loading an isolate). The lease that thread then got
    # belonged to no episode and stayed out for good, its isolate with it.
    pool = twx_engine.pool()
    held = sum(n for _, _, n in pool.stats())
    env = TextWorldExpressEnv("coin")
    reset = asyncio.create_task(env.reset(seed=0))
    for _ in range(5):  # the reset runs up to its wait on the leasing thread
        await asyncio.sleep(0)
    reset.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reset
    await env.aclose()
    await asyncio.get_running_loop().shutdown_default_executor()  # the leasing thread ends
    for _ in range(5):  # and what it leased is handed back on the loop
        await asyncio.sleep(0)
    assert sum(n for _, _, n in pool.stats()) == held


class _KillTheJVMFirst:
    """An agent whose first move kills the pooled JVM (an infrastructure fault), then looks."""

    def start(self, prompt, env):
        return self

    async def act(self):
        for _, pid, _ in twx_engine.pool().stats():
            os.kill(pid, signal.SIGKILL)
        await asyncio.sleep(0.5)
        return Message("assistant", "look around"), None

    def observe(self, observation):
        pass


async def test_a_dead_jvm_ends_the_episode_as_an_error_trajectory() -> None:
    from agentgym.policies.simple import ScriptedPolicy
    from agentgym.rollout import run_episode

    env = TextWorldExpressEnv("coin", "numLocations=3")
    trajectory = await run_episode(env, _KillTheJVMFirst(), seed=0, group_id="g")
    assert trajectory.status == "error" and trajectory.outcome_reward is None
    assert "EngineFault" in trajectory.error
    await env.aclose()

    env = TextWorldExpressEnv("coin", "numLocations=3")  # the pool starts a fresh JVM
    trajectory = await run_episode(env, ScriptedPolicy(), seed=0, group_id="g")
    assert trajectory.status == "terminated" and trajectory.outcome_reward == 1.0
    await env.aclose()


def test_suite_covers_every_game_on_the_test_seeds() -> None:
    from agentgym.evaluation.suites import get_suite

    suite = get_suite("textworld-express")
    assert suite.tag == "textworld-express@1"
    assert sorted(e.env for e in suite.entries) == IDS
    assert all(e.split == "test" and len(e.seeds) == 20 for e in suite.entries)
