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
