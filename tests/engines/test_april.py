"""APRIL partial rollouts: whole groups per round, carried episodes that resume token-exactly
with their versions, the same trained samples as a run without carry-over, and a short
training run on a tiny model."""

import asyncio
import hashlib
from dataclasses import replace

import pytest

import agentgym
from agentgym.engines.april import AprilConfig, PartialRollouts
from agentgym.engines.versioned import VersionedAgent
from agentgym.env import BaseEnv
from agentgym.errors import ConfigError
from agentgym.rollout import RolloutConfig, run_groups
from agentgym.types import Group, Message, StepResult, StepTokens

# Long-tailed base lengths by seed: most tasks end in one or two turns, a few take many.
LENGTHS = (1, 2, 1, 7, 1, 3, 1, 9, 2, 1, 5, 1)


class LongTailEnv(BaseEnv):
    """Ends after LENGTHS[seed] + (first action length mod 3) turns; the reward is the
    parity of the last action's length, so rollouts of one task differ."""

    prose_is_action = True

    async def _reset(self, seed, options):
        self.seed, self.length = seed or 0, None
        return [Message("user", f"task {self.seed}")], {}

    async def _step(self, action):
        await asyncio.sleep(0)  # yield, as a real env's I/O would
        if self.length is None:
            self.length = LENGTHS[self.seed % len(LENGTHS)] + len(action.content) % 3
        done = self.turn + 1 >= self.length
        reward = float(len(action.content) % 2 == 0) if done else None
        return StepResult((Message("user", f"turn {self.turn + 1}"),), reward, terminated=done)

    def state_key(self):
        return f"{getattr(self, 'seed', 0)}:{self.turn}"


def _digest(*parts):
    return int(hashlib.sha256(repr(parts).encode()).hexdigest()[:8], 16)


class FakeLM:
    """A deterministic policy: its tokens and log-probs depend on the episode number and
    what it saw, its version on a counter the test bumps between rounds."""

    def __init__(self):
        self.started, self.version = 0, 0

    def start(self, prompt, env):
        self.started += 1
        return _FakeEpisode(self, self.started, prompt[0].content)


class _FakeEpisode:
    def __init__(self, agent, number, prompt):
        self.agent, self.number, self.history = agent, number, [prompt]

    async def act(self):
        await asyncio.sleep(0)
        h = _digest(self.number, tuple(self.history))
        text = "x" * (1 + h % 5)
        prompt_ids = tuple(_digest(m) % 1000 for m in self.history)
        completion = (h % 1000, (h >> 10) % 1000)
        logprobs = (-(h % 7) / 7.0, -((h >> 3) % 5) / 5.0)
        self.history.append(text)
        return Message("assistant", text), StepTokens(prompt_ids, completion, logprobs,
                                                      policy_version=self.agent.version)

    def observe(self, observation):
        self.history.append(observation[0].content)


async def _april_rounds(agent, rounds, groups, group_size, *, bump=None):
    pool = PartialRollouts(AprilConfig(enabled=True, oversample=2.0))
    out, metrics = [], []
    try:
        for _ in range(rounds):
            trajs, m = await pool.round(LongTailEnv, agent, groups,
                                        RolloutConfig(group_size=group_size))
            out.append(trajs)
            metrics.append(m)
            if bump is not None:
                await bump()
    finally:
        launched = pool.next_seed
        await pool.aclose()
    return out, metrics, launched


def _by_task(trajs):
    return {(t.seed, t.group_id, i): t for i, t in enumerate(trajs)}


def _tokens(traj):
    return [(s.action.content, s.tokens.prompt_ids, s.tokens.completion_ids, s.result.reward)
            for s in traj.steps]


def _logprobs(traj):
    """Flat: a resumed episode's prompt runs over another cached prefix, so a multi-threaded
    CPU matmul may sum in another order; equal to float precision, not bitwise."""
    return [lp for s in traj.steps for lp in s.tokens.logprobs]


def _steps(traj):
    return [(s.action.content, s.tokens.prompt_ids, s.tokens.completion_ids,
             s.tokens.logprobs, s.result.reward) for s in traj.steps]


async def test_rounds_hand_over_whole_groups_and_carry_the_rest():
    agent = FakeLM()

    async def bump():
        agent.version += 1

    rounds, metrics, _ = await _april_rounds(agent, 6, groups=2, group_size=3, bump=bump)
    for trajs in rounds:
        groups = Group.from_trajectories(trajs)
        assert len(groups) == 2 and all(len(g.trajectories) == 3 for g in groups)
        assert all(t.status == "terminated" for t in trajs)
    assert sum(m["april/carried_out"] for m in metrics) > 0  # long episodes were carried
    carried = [t for trajs in rounds for t in trajs
               if len({s.tokens.policy_version for s in t.steps}) > 1]
    assert carried, "some episode should span rounds"
    for t in carried:  # versions never go back within an episode
        versions = [s.tokens.policy_version for s in t.steps]
        assert versions == sorted(versions)
    seeds = [t.seed for trajs in rounds for t in trajs]
    assert len(seeds) == len(set(zip(seeds, range(len(seeds)), strict=True)))


async def test_trained_samples_equal_a_run_without_carry_over():
    from agentgym.trainers.advantages import get_estimator
    from agentgym.trainers.batching import samples_from_groups

    rounds, _, launched = await _april_rounds(FakeLM(), 5, groups=2, group_size=2)
    april = [t for trajs in rounds for t in trajs]
    straight = await run_groups(LongTailEnv, FakeLM(), range(launched),
                                RolloutConfig(group_size=2))
    # Same episodes: the straight run's trajectory of each (seed, rollout index).
    index = {}
    for t in straight:
        index.setdefault(t.seed, []).append(t)
    rollout = {}
    for t in april:
        rollout[t.seed] = rollout.get(t.seed, -1) + 1
    assert len(rollout) == 10
    matched = []
    for trajs in rounds:
        seen = {}
        for t in trajs:
            k = seen[t.seed] = seen.get(t.seed, -1) + 1
            twin = index[t.seed][k]
            assert _steps(t) == _steps(twin)
            assert t.outcome_reward == twin.outcome_reward and t.status == twin.status
            matched.append((t, replace(twin, id=t.id)))

    def samples(trajs):
        groups = Group.from_trajectories(trajs)
        return samples_from_groups(groups, get_estimator("grpo")(groups))

    ours = samples([a for a, _ in matched])
    theirs = samples([b for _, b in matched])
    assert ours == theirs and len(ours) > 10


async def test_carried_episodes_resume_token_exactly(tiny_model_dir):
    """A real model: episodes parked across version bumps give the same tokens as in one go."""
    from agentgym.policies.base import SamplingParams
    from agentgym.policies.hf import TransformersPolicy
    from agentgym.rollout import LMAgent

    def agent(policy):
        return VersionedAgent(LMAgent(policy, sampling=SamplingParams(max_tokens=4, seed=3)))

    policy = TransformersPolicy.load(str(tiny_model_dir), seed=0, max_batch_size=1)
    lm = agent(policy)

    async def bump():  # a weight sync that keeps the weights: only the version moves
        await policy.update_weights([])

    try:
        rounds, metrics, launched = await _april_rounds(lm, 4, groups=1, group_size=2,
                                                        bump=bump)
        straight = await run_groups(LongTailEnv, agent(policy), range(launched),
                                    RolloutConfig(group_size=2))
    finally:
        await policy.aclose()
    assert sum(m["april/carried_in"] for m in metrics) > 0
    index = {}
    for t in straight:
        index.setdefault(t.seed, []).append(t)
    spanning = 0
    for trajs in rounds:
        seen = {}
        for t in trajs:
            k = seen[t.seed] = seen.get(t.seed, -1) + 1
            assert _tokens(t) == _tokens(index[t.seed][k])
            assert _logprobs(t) == pytest.approx(_logprobs(index[t.seed][k]), abs=1e-5)
            spanning += len({s.tokens.policy_version for s in t.steps}) > 1
    assert spanning > 0


def test_april_config_errors_name_the_fix():
    from agentgym.trainers.config import load_config

    with pytest.raises(ConfigError, match="oversample must be >= 1"):
        AprilConfig(oversample=0.5)
    with pytest.raises(ConfigError, match="engine=local"):
        load_config(None, ["rollout.april.enabled=true", "engine=ray"])


@pytest.fixture
def longtail_id():
    """LongTailEnv registered for the length of one test (both registries restored)."""
    import gymnasium

    from agentgym.registry import registry

    registry.load()  # the built-ins first, so that restoring keeps them
    ours, theirs = dict(registry._specs), dict(gymnasium.registry)
    agentgym.register("agtest/LongTail-v0", LongTailEnv)
    yield "agtest/LongTail-v0"
    registry._specs.clear()
    registry._specs.update(ours)
    gymnasium.registry.clear()
    gymnasium.registry.update(theirs)


def test_april_training_run_on_tiny_model(tmp_path, tiny_model_dir, longtail_id):
    """Carried episodes reach the trainer as stale turns, corrected and trained."""
    from agentgym.trainers.config import load_config
    from agentgym.trainers.loop import train
    from agentgym.trainers.metrics import read_metrics

    overrides = [f"run_dir={tmp_path / 'run'}", "steps=4", "save_every=4",
                 f"model.path={tiny_model_dir}", "rollout.tasks_per_step=2",
                 "rollout.group_size=2", "rollout.max_tokens=4", "tensorboard=false",
                 "optim.lr=0.01", f"env.id={longtail_id}", "rollout.april.enabled=true",
                 "rollout.april.max_staleness=8"]
    rows = read_metrics(train(load_config(None, overrides)))
    assert [r["policy_version"] for r in rows] == [1.0, 2.0, 3.0, 4.0]
    assert all(r["groups_trained"] <= 2 for r in rows)
    assert sum(r["april/carried_out"] for r in rows) > 0
    assert sum(r["async/stale_samples"] for r in rows) > 0
    assert any(r.get("async/is_weight_std", 0) > 0 for r in rows)
