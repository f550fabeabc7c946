"""Every registered env is a real gymnasium.Env that passes Gymnasium's checker silently."""

import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym
from agentgym.gym_bridge import GymnasiumEnv, UnicodeText

# Aliases (one id per task of a family env, e.g. miniwob/<task>-v0) run as a sample: the
# first of each family here, more in the family's own tests.
BASE_IDS = [i for i, s in agentgym.registry.items() if s.alias_of is None]
ALIAS_SAMPLE = sorted({s.alias_of: i for i, s in reversed(list(agentgym.registry.items()))
                       if s.alias_of}.values())


@pytest.mark.parametrize("env_id", BASE_IDS + ALIAS_SAMPLE, ids=str)
def test_gymnasium_check_env_has_no_warnings(env_id):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gymnasium.make(env_id)
        check_env(env.unwrapped)
        env.close()
    assert [str(w.message) for w in caught] == []


@pytest.mark.parametrize("env_id", list(agentgym.registry), ids=str)
def test_registered_in_gymnasium_registry(env_id):
    assert env_id in gymnasium.registry
    env = gymnasium.make(env_id)
    assert isinstance(env.unwrapped, GymnasiumEnv)
    env.close()


def test_module_prefix_imports_agentgym_and_passes_kwargs():
    env = gymnasium.make("agentgym:agentgym/Arithmetic-v0", split="test")
    obs, info = env.reset(seed=5)
    assert info["task_id"] == "arithmetic-test-5"
    assert obs == info["messages"][0]["content"]
    assert [t["name"] for t in info["tools"]] == ["calculator", "answer"]
    env.close()


def test_step_reports_unscored_reward_as_zero_with_flag():
    env = gymnasium.make("agentgym/Arithmetic-v0")
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(
        '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>')
    assert (obs, reward, terminated, truncated) == ("42", 0.0, False, False)
    assert info["scored"] is False and info["valid"] is True
    obs, reward, terminated, truncated, info = env.step("gibberish")
    assert info["valid"] is False and "no tool call" in obs
    env.close()


def test_same_seed_same_episode_and_none_seed_follows_generator():
    env = gymnasium.make("agentgym/Arithmetic-v0").unwrapped
    first = env.reset(seed=11)[0]
    after_1 = env.reset()[0]
    assert env.reset(seed=11)[0] == first
    assert env.reset()[0] == after_1
    assert env.reset(seed=12)[0] != first
    env.close()


def test_unicode_text_space_holds_any_text():
    space = UnicodeText(50, seed=0)
    for text in ["", "héllo 🌍 \x00 \u200b", "日本語", "a" * 50]:
        assert space.contains(text)
    assert not space.contains("a" * 51)
    assert not space.contains("\udcff")  # a lone surrogate is not valid text
    assert not space.contains(b"bytes")
    samples = [space.sample() for _ in range(20)]
    assert all(space.contains(s) for s in samples)
    assert len(set(samples)) > 1


def test_huge_and_non_utf8_observations_are_capped_not_crashing():
    env = GymnasiumEnv(agentgym.make("agentgym/Arithmetic-v0"), max_observation_length=1000)
    env.reset(seed=0)
    huge = "9" * 5000
    obs, *_ = env.step('<tool_call>{"name": "calculator", "arguments": {"expression": "'
                       + huge + '"}}</tool_call>')
    assert len(obs) <= 1000 and env.observation_space.contains(obs)
    env.close()


def test_render_ansi_returns_last_observation():
    env = gymnasium.make("agentgym/Arithmetic-v0", render_mode="ansi")
    obs, _ = env.reset(seed=0)
    assert env.render() == obs
    env.close()
