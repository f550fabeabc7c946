"""agentgym envs served through openenv-core's server and read back through its client.

Each env's expert is played in process; the same seeds and actions are then replayed on the
env served by ``build_app`` (openenv-core's ``create_app``) over 127.0.0.1 and consumed back
through :class:`OpenEnvEnv` (openenv-core's ``GenericEnvClient`` underneath). Prompts, tools,
every step's messages, reward, terminated/truncated and info (success, state key) must be
equal, for several sessions at once.
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("openenv")

from openenv_helpers import expert_episode, replay, served  # noqa: E402

import agentgym  # noqa: E402
from agentgym.envs.openenv.server import build_app  # noqa: E402

# Own envs and recognised benchmarks (BabyAI, Reasoning Gym, TextArena, BFCL); tool envs
# (Arithmetic, BFCL) carry tool specs and tool calls, the others text.
CASES = [
    ("agentgym/Arithmetic-v0", {}, (0, 1, 2)),
    ("babyai/GoToObj-v0", {}, (0, 1)),
    ("reasoning-gym/ChainSum-v0", {}, (0, 1, 2)),
    ("textarena/TowerOfHanoi-v0", {}, (0, 1)),
    ("bfcl/SingleTurn-v0", {}, (0, 1)),
]


def _needs(env_id: str) -> None:
    for extra in agentgym.spec(env_id).extras:
        module = {"games": "reasoning_gym", "bfcl": "bfcl_eval"}.get(extra)
        if module is not None:
            pytest.importorskip(module)


@pytest.mark.parametrize(("env_id", "kwargs", "seeds"), CASES, ids=[c[0] for c in CASES])
async def test_expert_replays_to_the_same_results_through_openenv(env_id, kwargs, seeds):
    _needs(env_id)
    local = [await expert_episode(env_id, seed, **kwargs) for seed in seeds]
    assert any(r["info"].get("success") for e in local for r in e.results), \
        "the expert should succeed somewhere, or the comparison proves little"
    with served(build_app(env_id, kwargs)) as url:
        remotes = [agentgym.make(f"openenv:{url}") for _ in seeds]
        try:  # one session per env, all at once
            replayed = await asyncio.gather(*(replay(env, seed, episode.actions) for env, seed,
                                              episode in zip(remotes, seeds, local, strict=True)))
        finally:
            await asyncio.gather(*(env.aclose() for env in remotes))
    for seed, mine, theirs in zip(seeds, local, replayed, strict=True):
        assert theirs.prompt == mine.prompt, seed
        assert theirs.reset_info == mine.reset_info, seed
        assert theirs.tools == mine.tools, seed
        assert theirs.results == mine.results, seed  # messages, reward, ends, info
        assert [r["reward"] for r in theirs.results] == [r["reward"] for r in mine.results]
        assert theirs.results[-1]["info"].get("success") == mine.results[-1]["info"].get(
            "success")


async def test_one_session_plays_several_episodes_and_state_names_the_seed():
    from openenv.core.generic_client import GenericEnvClient

    with served(build_app("agentgym/Arithmetic-v0", {"split": "test"})) as url:
        client = GenericEnvClient(base_url=url)
        try:
            for seed in (4, 5):  # kwargs and seed reach the env: the test split's task
                first = await client.reset(seed=seed)
                assert first.observation["info"]["task_id"] == f"arithmetic-test-{seed}"
                await client.step({"content": "", "tool_calls": [
                    {"id": "c0", "name": "calculator", "arguments": {"expression": "1+1"}}]})
                state = await client.state()
                assert (state["env_id"], state["env_kwargs"], state["seed"],
                        state["step_count"]) == ("agentgym/Arithmetic-v0", {"split": "test"},
                                                 seed, 1)
        finally:
            await client.close()


async def test_openenv_client_sees_rewards_done_and_a_bad_action_as_an_observation():
    """openenv-core's own client, with plain dict actions, as a TRL or SkyRL user writes them."""
    from openenv.core.generic_client import GenericEnvClient

    episode = await expert_episode("agentgym/MentalMath-v0", 3)
    with served(build_app("agentgym/MentalMath-v0")) as url:
        client = GenericEnvClient(base_url=url)
        try:
            reset = await client.reset(seed=3)
            assert reset.observation["messages"] == episode.prompt
            assert reset.reward is None and reset.done is False
            bad = await client.step({"content": "no number here"})
            assert bad.observation["info"]["valid"] is False and bad.done is False
            assert "no number" in bad.observation["messages"][0]["content"]
            good = await client.step({"content": episode.actions[0].content})
            assert good.done is True and good.observation["terminated"] is True
            assert good.reward == 0.5  # right on the second try, as in process
        finally:
            await client.close()
