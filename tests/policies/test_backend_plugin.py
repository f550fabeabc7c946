"""A new generation backend is one file: the example plug-in works wherever specs are read."""

import importlib.util
from pathlib import Path

import pytest

import agentgym
from agentgym.errors import ConfigError
from agentgym.policies import TrainablePolicy, make_agent
from agentgym.policies.backends import backend_names, resolve
from agentgym.policies.factory import policy_specs
from agentgym.rollout import run_groups

PLUGIN = Path(__file__).parent / "plugins" / "canned_backend.py"


def _load_plugin():
    spec = importlib.util.spec_from_file_location("canned_backend_plugin", PLUGIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_load_plugin()


def test_listed_with_the_built_in_backends():
    assert {"hf", "vllm", "openai", "canned"} <= set(backend_names())
    assert "canned:TEXT" in policy_specs()
    info, target = resolve("canned:42")
    assert (info.name, info.trainable, target) == ("canned", True, "42")


def test_unknown_spec_names_every_backend():
    with pytest.raises(ConfigError, match=r"unknown policy 'caned:1'.*canned:TEXT"):
        make_agent("caned:1")


async def test_an_agent_from_the_spec_plays_episodes():
    agent = make_agent("canned:not a number")
    assert isinstance(agent.policy, TrainablePolicy)
    trajs = await run_groups(lambda: agentgym.make("agentgym/Arithmetic-v0", max_turns=1),
                             agent, seeds=[0, 1])
    # The canned answer reached the env, which judged it: not an answer, turn limit hit.
    assert [(t.status, t.outcome_reward, t.steps[0].valid, t.steps[0].action.content)
            for t in trajs] == [("truncated", 0.0, False, "not a number")] * 2


async def test_weight_sync_moves_the_version_recorded_in_completions():
    from agentgym.policies.base import GenerationRequest
    from agentgym.types import Message

    policy = make_agent("canned:x").policy
    assert await policy.update_weights({"w": None}, version=7) == 7
    [done] = await policy.generate([GenerationRequest((Message("user", "hi"),))])
    assert done.policy_version == 7 and policy.updates == [["w"]]
