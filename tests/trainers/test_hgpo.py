"""HGPO on the spec's worked example (every value by hand), options, errors and properties.

Worked example (spec §3): γ = .95, K = 2, α = 1, offset 1, population std, ε = 1e-6.
Returns-to-go: t1 (9.025, 9.5, 10); t2 (8.57375, 9.025, 9.5, 10); t3 = t4 = 0.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgym.errors import ConfigError, SchemaError
from agentgym.trainers.advantages import (
    HGPOOptions,
    get_estimator,
    options_class,
    parse_options,
    reference,
)
from agentgym.trainers.advantages import hgpo as hgpo_mod
from agentgym.trainers.advantages.base import flatten, normalize
from agentgym.trainers.advantages.gigpo import state_clusters
from agentgym.types import Group, Message, Step, StepResult, Trajectory

from .test_advantages import check, error, groups_st, grp, traj


def run(groups, **options):
    return get_estimator("hgpo", **options)(groups)


EXAMPLE = [grp(traj("t1", [0, 0, 10], ["s0", "A", "B"]),
               traj("t2", [0, 0, 0, 10], ["s0", "C", "A", "B"]),
               traj("t3", [0, 0, 0, 0], ["s0", "A", "B", "D"]),
               traj("t4", [0, 0, 0, 0], ["s0", "C", "C", "A"]))]


def test_worked_example_spec_values():
    result = run(EXAMPLE, history_length=2)
    assert result["t1"][2] == pytest.approx(0.8373, abs=1e-4)  # (2·.7071 + 3·.7071 + 4·1)/9
    assert result["t3"][3] == 0.0  # D is unique at every level: no pair left
    assert result["t4"][2] == pytest.approx(-0.7071, abs=1e-4)  # (C, C) unique: level 1 only


def test_worked_example_every_step_by_hand():
    # s0 (level 1 only): G = 9.025, 8.57375, 0, 0; mean 4.39969, pop std 4.40258
    #   → +1.05059, +.94809, −.99934, −.99934 (one pair: 2A/(2 + ε))
    # A (t1·1): level 1 {9.5, 9.5, 0, 0} → +1; (s0, A) {t1, t3} → +1 → 1
    # C (t2·1): level 1 {9.025, 0, 0} → +1.41421; (s0, C) {t2, t4} → +1 → (2.82843 + 3)/5
    # t2·2 (A): +1, (C, A) {t2, t4} +1, (s0, C, A) unique → 1;  t2·3 (B): (A, B) +.7071 twice
    # t3·2 (B): −1.41421 twice, (s0, A, B) {t1, t3} −1 → (−7.07107 − 4)/9 = −1.23012
    # t4·1 (C): −.70711, (s0, C) −1 → (−1.41421 − 3)/5;  t4·3 (A): −1, (C, A) −1 → −1
    check(run(EXAMPLE, history_length=2),
          {"t1": [1.050590, 1.0, 0.837327], "t2": [0.948093, 1.165685, 1.0, 0.707107],
           "t3": [-0.999340, -1.0, -1.230118, 0.0], "t4": [-0.999340, -0.882843, -0.707107, -1.0]})


def test_weights_alpha_and_offset():
    # t1·2 pairs: (1, .70711), (2, .70711), (3, 1)
    paper = run(EXAMPLE, history_length=2, weight_offset=0.0)  # w = 1, 2, 3
    assert paper["t1"][2] == pytest.approx((3 * 0.707107 + 3) / 6, abs=1e-5)
    squared = run(EXAMPLE, history_length=2, alpha=2.0)  # w = 4, 9, 16
    assert squared["t1"][2] == pytest.approx((13 * 0.707107 + 16) / 29, abs=1e-5)
    flat = run(EXAMPLE, history_length=2, alpha=0.0)  # equal weights
    assert flat["t1"][2] == pytest.approx((2 * 0.707107 + 1) / 3, abs=1e-5)


def test_history_length_caps_levels():
    # K = 1: t1·2 keeps levels 1, 2 → .7071; K = 0: level 1 only
    assert run(EXAMPLE, history_length=1)["t1"][2] == pytest.approx(0.707107, abs=1e-5)
    assert run(EXAMPLE, history_length=0)["t3"][2] == pytest.approx(-1.414214, abs=1e-5)


def test_mean_norm():
    # t1·2: level 1 dev 10 − 6.6667, level 2 the same, level 3 dev 5 → (2·3.3333 + 3·3.3333 + 4·5)/9
    result = run(EXAMPLE, history_length=2, mode="mean_norm")
    assert result["t1"][2] == pytest.approx((5 * 10 / 3 + 20) / 9, abs=1e-5)


def test_base_group_adds_gigpo_episode_level():
    # episode stats per step: R = 10, 10, 0, 0 over 3 + 4 + 4 + 4 entries; mean 70/15,
    # unbiased std sqrt((7·(16/3)² + 8·(14/3)²)/14) = 5.16398 → +1.03280, −.90370
    result = run(EXAMPLE, history_length=2, base_group=True)
    assert result["t1"][2] == pytest.approx((7.535534 + 1.032796) / 10, abs=1e-5)
    assert result["t3"][3] == pytest.approx(-0.903696, abs=1e-5)  # only the episode pair
    assert result["t4"][2] == pytest.approx((-1.414214 - 0.903696) / 3, abs=1e-5)


def test_invalid_penalty_enters_own_return_only():
    # γ = 1, λ = .5; s0: G = 1, 1 − .5 (b·0 invalid) → pop std .25 → ±1; A: G = 1, 1 → 0
    g = grp(traj("a", [0, 1], ["s0", "A"]), traj("b", [0, 1], ["s0", "A"], invalid=[0]))
    check(run([g], history_length=1, gamma=1.0, invalid_penalty=0.5),
          {"a": [1.0, 0.0], "b": [-1.0, 0.0]})
    # with the episode level: episode term 0 (equal R), less λ on b·0 → (2·−1 − .5)/3
    check(run([g], history_length=1, gamma=1.0, invalid_penalty=0.5, base_group=True),
          {"a": [1.0, 0.0], "b": [-2.5 / 3, 0.0]})


def test_groups_stay_apart_and_errors_are_skipped():
    g2 = grp(traj("u", [0, 5], ["s0", "A"], group="y"), traj("v", [0, 0], ["s0", "A"], group="y"),
             error("e", group="y"))
    together = run([*EXAMPLE, g2], history_length=2)
    check(together, {**run(EXAMPLE, history_length=2), **run([g2], history_length=2)})
    assert "e" not in together
    alone = grp(traj("w", [1.0, 0.0], ["s0", "A"], group="z"), error("e2", group="z"))
    check(run([alone], history_length=2), {"w": [0.0, 0.0]})


def with_k(groups, k):
    return [Group(g.task_id, tuple(
        Trajectory(t.id, t.task_id, t.group_id, t.prompt, t.steps, status=t.status,
                   outcome_reward=t.outcome_reward, metrics={} if k is None else
                   {"history_length": k}) for t in g.trajectories)) for g in groups]


def test_history_length_is_read_from_trajectories():
    check(run(with_k(EXAMPLE, 2.0)), run(EXAMPLE, history_length=2))
    check(run(with_k(EXAMPLE, 2.0), history_length=0), run(EXAMPLE, history_length=0))
    assert run([]) == {}


@pytest.mark.parametrize(("groups", "match"), [
    (EXAMPLE, "set the option history_length.*rollout.context=window"),
    (with_k(EXAMPLE, 2.0) + with_k([grp(traj("x", [1.0], group="x"), traj("y", [0.0],
                                                                           group="x"))], 3.0),
     "different or invalid history windows"),
    (with_k(EXAMPLE, 1.5), "different or invalid"),
])
def test_missing_or_inconsistent_history_length(groups, match):
    with pytest.raises(ConfigError, match=match):
        run(groups)


def test_steps_out_of_order_raise():
    steps = traj("a", [0, 1], ["s0", "A"]).steps
    shuffled = Trajectory("a", "g", "g", (), steps[::-1])
    with pytest.raises(SchemaError, match="'a' has its steps out of order"):
        run([grp(shuffled, traj("b", [0, 0], ["s0", "A"]))], history_length=1)


@pytest.mark.parametrize(("options", "match"), [
    ({"history_length": -1}, "history_length must be an integer >= 0"),
    ({"history_length": 1.5}, "history_length expects an integer or none"),
    ({"alpha": -1.0}, "alpha must be a finite number >= 0"),
    ({"weight_offset": float("inf")}, "weight_offset must be"),
    ({"base_group": "yes"}, "base_group expects a boolean"),
    ({"histroy_length": 2}, "did you mean 'history_length'"),
])
def test_bad_options(options, match):
    with pytest.raises(ConfigError, match=match):
        get_estimator("hgpo", **options)


def test_options_defaults_and_parsing():
    o = HGPOOptions()
    assert (o.gamma, o.history_length, o.alpha, o.weight_offset, o.base_group) == (
        0.95, None, 1.0, 1.0, False)
    assert options_class("hgpo") is HGPOOptions
    assert parse_options(HGPOOptions, {"history_length": "3", "base_group": "true"}) == {
        "history_length": 3, "base_group": True}
    assert parse_options(HGPOOptions, {"history_length": "none"}) == {"history_length": None}


def test_doctest():
    import doctest
    assert doctest.testmod(hgpo_mod).failed == 0


# ---------------------------------------------------------------- properties

hgpo_options = st.fixed_dictionaries({
    "history_length": st.integers(0, 4), "mode": st.sampled_from(["mean_std_norm", "mean_norm"]),
    "gamma": st.sampled_from([0.0, 0.5, 0.95, 1.0]), "invalid_penalty": st.sampled_from([0, 0.1]),
    "alpha": st.sampled_from([0.0, 1.0, 2.0]), "weight_offset": st.sampled_from([0.0, 1.0]),
    "base_group": st.booleans()})


@settings(max_examples=150, deadline=None)
@given(groups_st(), hgpo_options)
def test_matches_plain_python_reference(groups, options):
    result = run(groups, **options)
    expected = reference.hgpo_reference(groups, **options)
    assert list(result) == list(expected)
    for tid, values in expected.items():  # the same arithmetic: equal to the bit
        np.testing.assert_array_equal(result[tid], values)


@settings(max_examples=150, deadline=None)
@given(groups_st(), hgpo_options, st.randoms(use_true_random=False))
def test_permuting_trajectories_and_groups_changes_nothing(groups, options, rnd):
    shuffled = [grp(*rnd.sample(g.trajectories, len(g.trajectories))) for g in groups]
    rnd.shuffle(shuffled)
    a, b = run(groups, **options), run(shuffled, **options)
    assert set(a) == set(b)
    for tid in a:  # bit for bit: statistics are summed in a canonical order
        np.testing.assert_array_equal(a[tid], b[tid])


@settings(max_examples=100, deadline=None)
@given(groups_st(), st.sampled_from(["mean_std_norm", "mean_norm"]),
       st.sampled_from([0.0, 0.1]), st.sampled_from([0.5, 0.95]))
def test_k0_is_gigpo_step_term_with_population_std(groups, mode, lam, gamma):
    flat = flatten(groups, gamma=gamma, invalid_penalty=lam)
    step = normalize(flat.returns, state_clusters(flat), mode=mode, ddof=0)  # (S,)
    step = np.where(flat.active[flat.step_traj], step, 0.0)
    result = run(groups, history_length=0, mode=mode, invalid_penalty=lam, gamma=gamma)
    got = np.concatenate([result[i] for i in flat.ids]) if flat.ids else np.zeros(0)
    # one pair of weight 2: 2A / (2 + ε)
    np.testing.assert_allclose(got, step * 2 / (2 + 1e-6), rtol=1e-9, atol=1e-9)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(-10, 10)), max_size=6), st.integers(1, 5),
       st.sampled_from([0.0, 0.1]), st.booleans(), hgpo_options)
def test_identical_trajectories_give_zeros(rewards, copies, lam, err, options):
    keys = [f"s{t}" for t in range(len(rewards))]  # no loops: a revisit has its own G_t
    invalid = list(range(0, len(rewards), 2))
    trajs = [traj(f"t{i}", rewards, keys, invalid) for i in range(copies)]
    options = {**options, "invalid_penalty": lam, "base_group": False}
    result = run([grp(*trajs, *([error("e")] if err else []))], **options)
    for t in trajs:
        assert (result[t.id] == 0).all()


def test_none_state_keys_match_nothing():
    g = grp(traj("a", [0, 1], [None, "A"]), traj("b", [0, 0], [None, "A"]))
    # level 1 at A matches (+/-1); (None, A) matches nothing; s0 level None → 0
    check(run([g], history_length=1, gamma=1.0), {"a": [0.0, 1.0], "b": [0.0, -1.0]})


def test_message_actions_are_ignored():
    base = run(EXAMPLE, history_length=2)
    other = [Group(g.task_id, tuple(Trajectory(t.id, t.task_id, t.group_id, (), tuple(
        Step(s.index, Message("assistant", f"different {t.id}"), StepResult((), s.result.reward),
             state_key=s.state_key) for s in t.steps)) for t in g.trajectories))
        for g in EXAMPLE]
    check(run(other, history_length=2), base)
