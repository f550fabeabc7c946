"""The Ray engine on a local cluster: same trajectories as the embedded engine, workers that
die are replaced (their episodes marked error), persistent failure stops with a message."""

import asyncio
import functools
import os
import sys

import pytest

import agentgym
from agentgym.engines.config import RayConfig
from agentgym.policies.simple import ScriptedPolicy
from agentgym.rollout import RolloutConfig, run_groups

ray = pytest.importorskip("ray")
SOKOBAN = "agentgym/Sokoban-v0"


@pytest.fixture(scope="module")
def cluster():
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # test helpers travel by value
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def make_sokoban():
    return agentgym.make(SOKOBAN)


class SlowScripted:
    """The scripted expert, slowed down so that a worker can be killed mid-episode."""

    def __init__(self, delay, started=None):
        self.delay, self.started = delay, started

    def start(self, prompt, env):
        return _Slow(env.expert_action, self.delay, self.started)


class _Slow:
    def __init__(self, expert, delay, started):
        self.expert, self.delay, self.started = expert, delay, started

    async def act(self):
        if self.started:  # tells the test, across processes, that episodes are under way
            os.close(os.open(self.started, os.O_CREAT | os.O_WRONLY))
        await asyncio.sleep(self.delay)
        return self.expert(), None

    def observe(self, observation):
        pass


def crash_process():
    os._exit(1)  # an env constructor that takes its worker process down


def _engine(generation=None, **kwargs):
    from agentgym.engines.ray_engine import RayEngine

    return RayEngine(RayConfig(env_worker_cpus=0.5, generation_cpus=0.5, **kwargs),
                     generation=generation)


async def test_same_trajectories_as_embedded_engine_envs_built_in_workers(cluster):
    engine = _engine(env_workers=2, episodes_per_call=3)
    try:
        config = RolloutConfig(group_size=2)
        remote = await engine.run_groups(make_sokoban, ScriptedPolicy(), range(5), config,
                                         env_id=SOKOBAN)
        local = await run_groups(make_sokoban, ScriptedPolicy(), range(5), config,
                                 env_id=SOKOBAN)

        def key(t):
            return (t.seed, t.group_id, t.task_id, t.status, t.outcome_reward,
                    [s.action.to_dict() for s in t.steps])

        assert [key(t) for t in remote] == [key(t) for t in local]
        assert all(t.status == "terminated" and t.outcome_reward > 0 for t in remote)
        pids = {pid for _, pid in (await engine.nodes())["env"]}
        assert len(pids) == 2 and os.getpid() not in pids
    finally:
        await engine.aclose()


async def test_killed_env_worker_is_replaced_and_its_episodes_are_errors(cluster, tmp_path):
    engine = _engine(env_workers=2, episodes_per_call=4)
    started = tmp_path / "started"
    try:
        victim = engine.env_workers[0]
        run = asyncio.ensure_future(engine.run_groups(
            make_sokoban, SlowScripted(1.0, str(started)), range(8), RolloutConfig(),
            env_id=SOKOBAN))
        for _ in range(600):  # wait for the first policy call, however slow the start-up
            if started.exists():
                break
            await asyncio.sleep(0.1)
        ray.kill(victim)  # its episodes are queued or mid-way through 1 s policy calls
        trajs = await run
        errors = [t for t in trajs if t.status == "error"]
        assert len(trajs) == 8 and 1 <= len(errors) <= 4
        assert all("env worker failed" in t.error and t.outcome_reward is None for t in errors)
        assert engine.replaced == 1 and engine.env_workers[0] is not victim
        again = await engine.run_groups(make_sokoban, ScriptedPolicy(), range(4),
                                        env_id=SOKOBAN)
        assert [t.status for t in again] == ["terminated"] * 4  # the run goes on
    finally:
        await engine.aclose()


async def test_persistent_worker_failure_stops_with_a_message(cluster):
    from agentgym.engines.ray_engine import WorkerFailureError

    engine = _engine(env_workers=1, episodes_per_call=1, max_worker_failures=1)
    try:
        with pytest.raises(WorkerFailureError, match="max_worker_failures=1"):
            await engine.run_groups(crash_process, ScriptedPolicy(), range(4),
                                    RolloutConfig(concurrency=1))
    finally:
        await engine.aclose()


async def test_lm_agent_generates_on_workers_weights_sync_and_dead_worker(cluster,
                                                                          tiny_model_dir):
    """Generation workers: versions recorded per step, weights synced, a dead one replaced."""
    import torch

    from agentgym.engines.ray_engine import RemotePolicy
    from agentgym.engines.versioned import VersionedAgent
    from agentgym.policies.base import SamplingParams
    from agentgym.policies.hf import TransformersPolicy
    from agentgym.rollout import LMAgent

    factory = functools.partial(TransformersPolicy.load, str(tiny_model_dir), seed=0)
    engine = _engine(factory, env_workers=1, generation_workers=1)
    local = TransformersPolicy.load(str(tiny_model_dir), seed=0)
    try:
        agent = VersionedAgent(LMAgent(local, sampling=SamplingParams(max_tokens=4, seed=1)))
        env = functools.partial(agentgym.make, "agentgym/MentalMath-v0")
        first = await engine.run_groups(env, agent, range(2), RolloutConfig(group_size=2))
        assert all(t.status != "error" for t in first)
        assert {s.tokens.policy_version for t in first for s in t.steps} == {0}
        state = {n: p.detach() + 0.5 for n, p in local.model.named_parameters()}
        assert await engine.sync_weights(state) == 1
        second = await engine.run_groups(env, agent, range(2), RolloutConfig(group_size=2))
        assert {s.tokens.policy_version for t in second for s in t.steps} == {1}
        # A dead generation worker: episodes waiting on it end as errors ...
        dead = engine.generation_workers[0]
        ray.kill(dead)
        orphan = LMAgent(RemotePolicy([dead], local.tokenizer), sampling=agent.sampling)
        lost = await run_groups(env, orphan, [0])
        assert lost[0].status == "error" and lost[0].outcome_reward is None
        # ... and the engine replaces it, with the synced weights, before the next call.
        third = await engine.run_groups(env, agent, range(1))
        assert engine.generation_workers[0] is not dead and engine.replaced == 1
        assert third[0].status != "error" and third[0].steps[0].tokens.policy_version == 1
        tokens = third[0].steps[0].tokens
        local.load_weights(state)  # the worker's log-probs are those of the synced weights
        from agentgym.policies.hf import completion_logprobs

        expected = completion_logprobs(local.model, tokens.prompt_ids, tokens.completion_ids)
        assert torch.allclose(torch.tensor(tokens.logprobs), torch.tensor(expected), atol=1e-4)
    finally:
        await local.aclose()
        await engine.aclose()
