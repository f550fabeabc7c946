"""Reasoning Gym datasets: gold answers score 1; broken ones agree with the dataset's scorer."""

from __future__ import annotations

import pytest

import agentgym
from agentgym import ConfigError, EnvArgumentError, Message
from agentgym.envs.reasoning_gym import CURATED, ReasoningGymEnv


def answer(text: str) -> Message:
    return Message("assistant", f"Let me think. <answer>{text}</answer>")


@pytest.mark.parametrize("dataset", sorted(CURATED.values()))
async def test_gold_answers_score_one_and_broken_ones_match_the_datasets_scorer(
        dataset: str) -> None:
    env = ReasoningGymEnv(dataset, split="test")
    for seed in range(3):
        await env.reset(seed=seed)
        gold = await env.step(env.expert_action())
        assert gold.reward == 1.0 and gold.terminated and gold.info["success"], env.task_id
        assert gold.info["benchmark"].startswith("reasoning-gym 0.")
        for broken in (f"{env.entry['answer']}9", "", "no idea"):
            await env.reset(seed=seed)
            result = await env.step(answer(broken))
            expected = env.data.score_answer(broken, env.entry)  # the dataset's own verdict
            assert result.reward == expected and result.info["score"] == expected
            assert result.info["success"] is (expected >= 1.0)


async def test_retries_feed_back_the_verifiers_score() -> None:
    env = ReasoningGymEnv("chain_sum", attempts=3)
    obs, _ = await env.reset(seed=0)
    assert [m.role for m in obs] == ["system", "user"] and "<answer>" in obs[0].content
    first = await env.step(answer("-1"))
    assert first.reward is None and not first.done and first.valid
    assert "scored your answer 0 out of 1" in first.observation[0].content
    assert "2 tries left" in first.observation[0].content
    missing = await env.step(Message("assistant", "the answer is 5"))
    assert not missing.valid and missing.info["score"] is None and not missing.done
    last = await env.step(env.expert_action())
    assert last.terminated and last.reward == 1.0


async def test_the_last_failed_try_ends_with_its_score() -> None:
    env = ReasoningGymEnv("chain_sum", attempts=2)
    await env.reset(seed=1)
    await env.step(answer("0"))
    result = await env.step(Message("assistant", "no tags"))
    assert result.terminated and result.reward == 0.0 and not result.info["success"]


async def test_splits_are_disjoint_and_seeds_reproducible() -> None:
    train, test = ReasoningGymEnv("basic_arithmetic"), ReasoningGymEnv("basic_arithmetic",
                                                                        split="test")
    train_q = {(await train.reset(seed=s))[0][1].content for s in range(30)}
    test_q = {(await test.reset(seed=s))[0][1].content for s in range(30)}
    assert not train_q & test_q
    again = ReasoningGymEnv("basic_arithmetic")
    assert (await again.reset(seed=4))[0] == (await train.reset(seed=4))[0]


async def test_any_dataset_through_the_generic_id_with_its_config() -> None:
    env = agentgym.make("reasoning-gym/Dataset-v0", dataset="letter_counting",
                        config={"min_words": 3, "max_words": 3})
    _, info = await env.reset(seed=2)
    assert info["dataset"] == "letter_counting" and info["reasoning_gym_version"]
    assert (await env.step(env.expert_action())).reward == 1.0


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"dataset": "chain_summ"}, "did you mean 'chain_sum'"),
    ({"split": "dev"}, "expected split"),
    ({"attempts": 0}, "attempts"),
    ({"config": {"no_such_field": 1}}, "rejected the config"),
])
def test_bad_arguments_name_the_fix(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ReasoningGymEnv(**kwargs)


def test_unknown_make_kwargs_are_rejected() -> None:
    with pytest.raises(EnvArgumentError):
        agentgym.make("reasoning-gym/ChainSum-v0", datasett="x")


async def test_state_key_and_render() -> None:
    env = ReasoningGymEnv("chain_sum", attempts=2)
    _, info = await env.reset(seed=0)
    assert info["state_key"] == "reasoning-gym-chain_sum-train-0|tries=0"
    assert env.render() in (await env.reset(seed=0))[0][1].content
    result = await env.step(answer("1"))
    assert result.info["state_key"].endswith("tries=1")


async def test_passes_the_contract_checker_with_the_gold_answer() -> None:
    probe = ReasoningGymEnv("leg_counting")
    await probe.reset(seed=0)
    ran = await agentgym.check_env(agentgym.make("reasoning-gym/LegCounting-v0"),
                                   actions=[probe.expert_action()])
    assert "determinism" in ran


def test_registered_curated_ids_match_the_family_list() -> None:
    ids = {i.split("/")[1].removesuffix("-v0") for i in agentgym.registry
           if i.startswith("reasoning-gym/")}
    assert ids == set(CURATED) | {"Dataset"}


async def test_a_reply_without_an_answer_block_gets_the_datasets_own_verdict() -> None:
    """countdown gives format credit (0.01) to any reply, with or without an answer."""
    env = ReasoningGymEnv("countdown")
    await env.reset(seed=3)
    result = await env.step(Message("assistant", "I do not know."))
    assert result.reward == env.data.score_answer(None, env.entry) == 0.01
    assert not result.valid and result.info["score"] is None


async def test_word_ladder_builds_with_its_own_size_limit() -> None:
    env = agentgym.make("reasoning-gym/Dataset-v0", dataset="word_ladder", split="test")
    _, info = await env.reset(seed=25_000)  # wraps around its 20,000 entries
    assert info["task_id"] == "reasoning-gym-word_ladder-test-5000"
    assert (await env.step(env.expert_action())).reward == 1.0


async def test_datasets_leave_the_global_generators_alone_and_entries_reproduce() -> None:
    """pool_matrix seeds numpy's global generator (and its seed must stay below 2**32);
    list_functions draws from Python's: an episode changes neither, and entry 0 of
    list_functions (which uses the global draw) is the same whatever the global state."""
    import random

    import numpy as np

    for split in ("train", "test"):
        env = ReasoningGymEnv("pool_matrix", split=split)
        np.random.seed(123)
        await env.reset(seed=7)
        await env.step(env.expert_action())
        assert np.random.randint(1 << 30) == np.random.RandomState(123).randint(1 << 30)
    questions = set()
    for state in (1, 2):
        random.seed(state)
        env = ReasoningGymEnv("list_functions")
        questions.add((await env.reset(seed=0))[0][1].content)
        assert random.random() == random.Random(state).random()
    assert len(questions) == 1


def test_envs_of_one_dataset_share_its_object() -> None:
    """Building a dataset can take long (acre precomputes every question): once per process."""
    first, second = ReasoningGymEnv("basic_arithmetic"), ReasoningGymEnv("basic_arithmetic")
    assert first.data is second.data
    assert ReasoningGymEnv("basic_arithmetic", split="test").data is not first.data
