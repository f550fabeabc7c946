"""SPA advantages: step rewards r_t = α·ĉ_t + β·g_t, return-to-go, batch whitening (by hand)."""

import math
from dataclasses import replace

import numpy as np
import pytest

from agentgym.errors import ConfigError, SchemaError
from agentgym.trainers.advantages import get_estimator, presets
from agentgym.trainers.advantages.spa import step_rewards
from agentgym.types import Group, Message, Step, StepResult, Trajectory


def traj(tid, steps, outcome=None, status="terminated", group="g"):
    """``steps``: (ĉ or None, valid) pairs; ĉ goes into info["progress"]."""
    out = tuple(Step(k, Message("assistant", "a"),
                     StepResult((), reward=5.0, info={} if c is None else {"progress": c}),
                     valid=v) for k, (c, v) in enumerate(steps))
    return Trajectory(tid, "task", group, (), out, status=status,
                      outcome_reward=None if status == "error" else outcome)


def test_step_rewards_follow_the_formula():
    t = traj("a", [(0.4, True), (-0.2, False), (0.8, True)], 1.0)
    np.testing.assert_allclose(step_rewards(t, 1.0, 0.5), [0.9, -0.2, 1.3])
    np.testing.assert_allclose(step_rewards(t, 2.0, 1.0), [1.8, -0.4, 2.6])


def test_return_to_go_whitened_over_the_batch():
    # r_a = [0.4+0.5, -0.2+0, 0.8+0.5] = [0.9, -0.2, 1.3]; γ = 0.5:
    #   G_a = [0.9 + 0.5·0.45, -0.2 + 0.5·1.3, 1.3] = [1.125, 0.45, 1.3]
    # r_b = [0.1+0.5] -> G_b = [0.6]; env rewards (5.0) and R do not enter.
    # batch mean 3.475/4 = 0.86875, deviations [0.25625, -0.41875, 0.43125, -0.26875],
    # unbiased var 0.49921875/3 = 0.16640625.
    groups = [Group("task", (traj("a", [(0.4, True), (-0.2, False), (0.8, True)], 1.0),
                             traj("b", [(0.1, True)], 0.0),
                             traj("c", [(None, True)], status="error")))]
    adv = get_estimator("spa", gamma=0.5)(groups)
    assert set(adv) == {"a", "b"}  # the error trajectory gets nothing and needs no ĉ
    std = math.sqrt(0.16640625) + 1e-6
    np.testing.assert_allclose(adv["a"], np.array([0.25625, -0.41875, 0.43125]) / std)
    np.testing.assert_allclose(adv["b"], np.array([-0.26875]) / std)
    centred = get_estimator("spa", gamma=0.5, mode="mean_norm")(groups)
    np.testing.assert_allclose(centred["a"], [0.25625, -0.41875, 0.43125])


def test_whitening_spans_groups_and_single_rollout_groups_train():
    groups = [Group("task", (traj("a", [(1.0, True)], group="g1"),)),
              Group("task", (traj("b", [(0.0, True)], group="g2"),))]
    adv = get_estimator("spa", mode="mean_norm")(groups)
    assert adv["a"][0] == pytest.approx(0.5) and adv["b"][0] == pytest.approx(-0.5)


def test_invalid_penalty_is_step_local():
    groups = [Group("task", (traj("a", [(0.0, True), (0.0, False)]),
                             traj("b", [(0.0, True), (0.0, True)])))]
    values = get_estimator("spa", gamma=1.0, invalid_penalty=0.1).values(groups)
    # G_a = [0.5 + 0, 0] - [0, 0.1]: the earlier step does not carry the penalty
    np.testing.assert_allclose(values["a"], [0.5, -0.1])
    np.testing.assert_allclose(values["b"], [1.0, 0.5])


def released_groups():
    # R = [1, 0, 0]; progress values (9.0) are discarded by the released code
    return [Group("task", (traj("a", [(9.0, True), (9.0, False), (9.0, True)], 1.0),
                           traj("b", [(9.0, False)], 0.0),
                           traj("c", [(9.0, False), (9.0, True)], 0.0)))]


def test_released_variant_matches_the_public_trainer_by_hand():
    # Numbers follow SPA-RL-Agent (github.com/WangHanLinHenry/SPA-RL-Agent):
    # - prm/rl_data_org.py lines 21-43: every turn value of trajectory i becomes
    #   c_i = R_i - mean of the other R of its task: c = [1 - 0, 0 - 0.5, 0 - 0.5];
    # - lines 77-90: + 0.5 grounding when the next observation is not "Nothing happens"
    #   (valid), 0 otherwise: s_a = [1.5, 1.0, 1.5], s_b = [-0.5], s_c = [-0.5, 0.0];
    # - ppo/step_ppotrainer.py lines 391-401: step k's reward is s_k·(len(score) - k - 1):
    #   r_a = [3.0, 1.0, 0.0], r_b = [0.0], r_c = [-0.5, 0.0] (the whole score weighted);
    # - then TRL's compute_advantages (GAE) and masked_whiten: (x - mean)/sqrt(var + 1e-8).
    est = get_estimator("spa", variant="released", gamma=1.0)
    rewards = est.rewards(released_groups())
    np.testing.assert_allclose(rewards["a"], [3.0, 1.0, 0.0])
    np.testing.assert_allclose(rewards["b"], [0.0])
    np.testing.assert_allclose(rewards["c"], [-0.5, 0.0])
    # return-to-go at γ = 1 (GAE with V = 0, λ = 1): G_a = [4, 1, 0], G_b = [0], G_c = [-0.5, 0]
    # mean 0.75, deviations [3.25, 0.25, -0.75, -0.75, -1.25, -0.75], unbiased var 13.875/5
    adv = est(released_groups())
    got = np.concatenate([adv["a"], adv["b"], adv["c"]])
    want = np.array([3.25, 0.25, -0.75, -0.75, -1.25, -0.75]) / math.sqrt(2.775 + 1e-8)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_released_variant_with_gae_by_hand():
    # V(s_t) written by the value head; a: V = [1.0, 0.5, 0.2], γ = 1, λ = 0.95:
    #   δ = [3 + 0.5 - 1, 1 + 0.2 - 0.5, 0 + 0 - 0.2] = [2.5, 0.7, -0.2]
    #   A = [2.5 + 0.95·0.51, 0.7 + 0.95·(-0.2), -0.2] = [2.9845, 0.51, -0.2]
    #   R̂ = A + V = [3.9845, 1.01, 0.0]
    groups = released_groups()
    values = {"a": [1.0, 0.5, 0.2], "b": [0.3], "c": [0.0, 0.0]}
    groups = [Group(g.task_id, tuple(replace(t, steps=tuple(
        replace(s, result=replace(s.result, info={**s.result.info, "value": v}))
        for s, v in zip(t.steps, values[t.id], strict=True))) for t in g.trajectories))
        for g in groups]
    est = get_estimator("spa", variant="released", advantage="gae", gamma=1.0, lam=0.95)
    assert est.uses_values
    raw = est.values(groups)
    np.testing.assert_allclose(raw["a"], [2.9845, 0.51, -0.2], rtol=1e-12)
    np.testing.assert_allclose(raw["b"], [-0.3])  # r = 0, V = 0.3, nothing after
    np.testing.assert_allclose(raw["c"], [-0.5 - 0.95 * 0.0, 0.0])
    np.testing.assert_allclose(est.returns(groups)["a"], [3.9845, 1.01, 0.0], rtol=1e-12)
    flat = np.array([2.9845, 0.51, -0.2, -0.3, -0.5, 0.0])
    want = (flat - flat.mean()) / math.sqrt(flat.var(ddof=1) + 1e-8)
    adv = est(groups)
    np.testing.assert_allclose(np.concatenate([adv["a"], adv["b"], adv["c"]]), want,
                               rtol=1e-12)
    assert not get_estimator("spa").uses_values
    assert get_estimator("spa", **presets.spa_released()).options == est.options


def test_missing_contributions_name_the_fix():
    groups = [Group("task", (traj("a", [(None, True)]), traj("b", [(0.1, True)])))]
    with pytest.raises(SchemaError, match="agentgym progress score"):
        get_estimator("spa")(groups)


def test_options_are_validated():
    with pytest.raises(ConfigError, match="variant"):
        get_estimator("spa", variant="verl")
    with pytest.raises(ConfigError, match="alpha"):
        get_estimator("spa", alpha=float("nan"))
