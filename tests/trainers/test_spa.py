"""SPA advantages: step rewards r_t = α·ĉ_t + β·g_t, return-to-go, batch whitening (by hand)."""

import math

import numpy as np
import pytest

from agentgym.errors import ConfigError, SchemaError
from agentgym.trainers.advantages import get_estimator
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


def test_released_variant_uses_leave_one_out_and_weights():
    # R = [1, 0, 0] -> c = [1 - 0, 0 - 0.5, 0 - 0.5]; v_k = (n-1-k)·c + 0.5·g_k
    groups = [Group("task", (traj("a", [(9.0, True), (9.0, True)], 1.0),
                             traj("b", [(9.0, False)], 0.0),
                             traj("c", [(9.0, True), (9.0, False)], 0.0)))]
    est = get_estimator("spa", variant="released", mode="mean_norm")
    values = est.values(groups)
    np.testing.assert_allclose(values["a"], [1.5, 0.5])
    np.testing.assert_allclose(values["b"], [0.0])
    np.testing.assert_allclose(values["c"], [0.0, 0.0])
    adv = est(groups)
    np.testing.assert_allclose(np.concatenate([adv["a"], adv["b"], adv["c"]]),
                               [1.1, 0.1, -0.4, -0.4, -0.4])


def test_missing_contributions_name_the_fix():
    groups = [Group("task", (traj("a", [(None, True)]), traj("b", [(0.1, True)])))]
    with pytest.raises(SchemaError, match="agentgym progress score"):
        get_estimator("spa")(groups)


def test_options_are_validated():
    with pytest.raises(ConfigError, match="variant"):
        get_estimator("spa", variant="verl")
    with pytest.raises(ConfigError, match="alpha"):
        get_estimator("spa", alpha=float("nan"))
