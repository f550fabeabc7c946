"""The two sampling plug-ins: DAPO's dynamic sampling (degenerate groups refilled with fresh
tasks) and a difficulty-pool curriculum (tasks re-drawn by how they went), in isolation and
in real training runs on a tiny model."""

import asyncio

import pytest

from agentgym.errors import ConfigError
from agentgym.trainers.config import load_config
from agentgym.trainers.hooks import StepContext
from agentgym.types import Group, Message, Step, StepResult, Trajectory


def traj(seed, reward, success=None, status="terminated"):
    info = {} if success is None else {"success": success}
    steps = (Step(0, Message("assistant", "x"), StepResult((), reward=reward, info=info)),)
    return Trajectory(f"t{seed}-{reward}-{id(info)}", f"seed-{seed}", f"g{seed}", (), steps,
                      status=status, outcome_reward=None if status == "error" else reward,
                      seed=seed)


def group(seed, *rewards):
    return Group(f"seed-{seed}", tuple(traj(seed, r, success=r > 0) for r in rewards))


def ctx(draws, trajectories=()):
    seen = []

    async def draw(n):
        seen.append(n)
        return [t for g in draws.pop(0)[:n] for t in g.trajectories]
    return StepContext(0, None, tuple(trajectories), draw=draw), seen


def test_dynamic_sampling_replaces_degenerate_groups_up_to_its_budget():
    from agentgym.trainers.methods.dynamic_sampling import DynamicSamplingOptions, Refill

    groups = [group(0, 1.0, 0.0), group(1, 0.0, 0.0), group(2, 1.0, 1.0), group(3, 0.0)]
    # round 1 (3 asked): one informative, two not; round 2 (2 asked): one informative
    context, seen = ctx([[group(10, 1.0, 0.0), group(11, 0.0, 0.0), group(12, 1.0, 1.0)],
                         [group(13, 0.0, 1.0), group(14, 0.0, 0.0)]])
    metrics = {}
    out = asyncio.run(Refill(DynamicSamplingOptions(max_groups=5)).transform(
        context, groups, metrics))
    assert seen == [3, 2]  # every degenerate group asked for, then the budget's rest
    assert [g.task_id for g in out] == ["seed-0", "seed-10", "seed-13", "seed-3"]  # 1 unfilled
    assert metrics == {"dynamic/degenerate_groups": 3.0, "dynamic/drawn_groups": 5.0,
                       "dynamic/refilled_groups": 2.0, "dynamic/unfilled_groups": 1.0}
    # nothing degenerate: nothing drawn
    context, seen = ctx([])
    out = asyncio.run(Refill(DynamicSamplingOptions()).transform(context, groups[:1], {}))
    assert seen == [] and out == groups[:1]


def test_dynamic_sampling_options_are_checked_when_read():
    with pytest.raises(ConfigError, match="max_groups must be an integer in"):
        load_config(None, ["methods.dynamic_sampling.max_groups=0"])
    with pytest.raises(ConfigError, match="dynamic_sampling.*async_training.enabled=true"):
        load_config(None, ["methods.dynamic_sampling.max_groups=2",
                           "async_training.enabled=true"])


def test_difficulty_pools_sort_tasks_and_redraw_them_by_share(tmp_path):
    from agentgym.trainers.methods.difficulty_pool import DifficultyPoolOptions, DifficultyPools

    pools = DifficultyPools(DifficultyPoolOptions(easy=0.25, medium=0.5, hard=0.25), seed=3)
    assert pools.tasks(0, 100, 4) == ([100, 101, 102, 103], 104)  # empty pools: all fresh
    seen = [traj(100, 1.0, True), traj(100, 1.0, True), traj(101, 0.0, False),
            traj(101, 1.0, True), traj(102, 0.0, False), traj(102, 0.0, False),
            traj(103, 1.0, True), traj(103, 0.0, status="error")]  # errors do not count
    metrics = {}
    asyncio.run(pools.transform(StepContext(0, None, tuple(seen)), [], metrics))
    assert pools.pools == {"easy": [100, 103], "medium": [101], "hard": [102]}
    assert metrics["pool/easy"] == 2.0 and metrics["pool/revisited"] == 0.0
    pools.save(tmp_path, 1)
    tasks, nxt = pools.tasks(1, 104, 4)  # 1 easy, 2 medium (only 1 there), 1 hard, 1 fresh
    assert sorted(tasks[:3]) in ([100, 101, 102], [101, 102, 103]) and tasks[3:] == [104]
    assert nxt == 105 and pools.revisited == 3
    assert sum(map(len, pools.pools.values())) == 1  # a drawn task leaves its pool
    again = DifficultyPools(DifficultyPoolOptions(easy=0.25, medium=0.5, hard=0.25), seed=3)
    again.load(tmp_path, 1)
    assert again.tasks(1, 104, 4) == (tasks, nxt)  # the same draw from the saved pools
    with pytest.raises(ConfigError, match="difficulty pools of step 2 were not saved"):
        again.load(tmp_path, 2)
    with pytest.raises(ConfigError, match="shares in \\[0, 1\\] summing to at most 1"):
        load_config(None, ["methods.difficulty_pool.medium=0.9",
                           "methods.difficulty_pool.hard=0.2"])


def _args(tmp_path, tiny_model_dir, *extra):
    return [f"run_dir={tmp_path / 'run'}", f"model.path={tiny_model_dir}", "save_every=1",
            "tensorboard=false", "env.id=agentgym/MentalMath-v0", "rollout.tasks_per_step=2",
            "rollout.group_size=2", "rollout.max_tokens=4", "resumable_checkpoints=true",
            *extra]


def test_dynamic_sampling_draws_fresh_tasks_in_a_training_run(tmp_path, tiny_model_dir):
    """A tiny random model never answers a sum: every group is degenerate, so the step
    draws its whole budget, and the seed stream moves past the drawn tasks."""
    from agentgym.trainers.loop import build, train
    from agentgym.trainers.metrics import read_metrics

    args = _args(tmp_path, tiny_model_dir, "steps=1", "methods.dynamic_sampling.max_groups=3")
    [row] = read_metrics(train(load_config(None, args)))
    assert row["dynamic/degenerate_groups"] == 2.0 and row["dynamic/drawn_groups"] == 3.0
    assert row["dynamic/unfilled_groups"] == 2.0
    run = build(load_config(None, [*args[:-1], "steps=2", args[-1]]), resume=True)
    assert run.state.next_seed == run.config.env.first_seed + 2 + 3


def test_difficulty_pool_trains_checkpoints_and_resumes(tmp_path, tiny_model_dir):
    from agentgym.trainers.loop import train
    from agentgym.trainers.metrics import read_metrics

    args = _args(tmp_path, tiny_model_dir, "methods.difficulty_pool.hard=0.5")
    train(load_config(None, ["steps=1", *args]))
    assert (tmp_path / "run" / "difficulty_pool" / "step-000001.json").is_file()
    train(load_config(None, ["steps=2", *args]), resume=True)
    rows = read_metrics(tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2]
    # step 1 put both tasks in the hard pool (nothing solved); step 2 re-drew one of them
    assert rows[0]["pool/hard"] == 2.0 and rows[1]["pool/revisited"] == 1.0
