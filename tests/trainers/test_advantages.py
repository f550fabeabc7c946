"""Advantage estimators on hand-computed groups, plus properties over random groups.

Expected numbers were computed by hand (shown in comments) and cross-checked with a separate
plain-Python calculation (loops + ``statistics.stdev``), to 1e-4. ε = 1e-6 is added to the std.
"""

from __future__ import annotations

import doctest
import json
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentgym.trainers.advantages as adv_pkg
from agentgym.errors import ConfigError, SchemaError
from agentgym.jsonl import write_trajectories
from agentgym.trainers.advantages import (
    GiGPOOptions,
    advantages_jsonl,
    estimator_names,
    get_estimator,
    load_minimal,
    options_class,
    parse_options,
    register_estimator,
    returns_to_go,
    step_scores,
)
from agentgym.trainers.advantages import base as base_mod
from agentgym.trainers.advantages.base import EstimatorOptions
from agentgym.types import Group, Message, Step, StepResult, Trajectory

NAMES = ("grpo", "rloo", "gigpo")


def traj(tid, rewards=(), keys=None, invalid=(), *, outcome=None, status="terminated", group="g"):
    """A trajectory with one step per reward; ``invalid`` lists the invalid step indices."""
    keys = list(keys) if keys is not None else [None] * len(rewards)
    steps = tuple(
        Step(t, Message("assistant", f"act {t}"), StepResult((Message("user", "obs"),), r),
             state_key=k, valid=t not in invalid)
        for t, (r, k) in enumerate(zip(rewards, keys, strict=True)))
    return Trajectory(tid, group, group, (Message("user", "task"),), steps, status=status,
                      outcome_reward=outcome)


def error(tid, group="g"):
    return traj(tid, [0.0], ["s0"], status="error", group=group)


def grp(*trajs):
    return Group(trajs[0].task_id, trajs)


def run(name, groups, **options):
    return get_estimator(name, **options)(groups)


def check(result, expected):
    assert list(result) == list(expected)
    for tid, values in expected.items():
        assert result[tid].dtype == np.float64
        np.testing.assert_allclose(result[tid], values, atol=1e-4, err_msg=tid)


# ---------------------------------------------------------------- GRPO / RLOO by hand

def test_grpo_outcome_rewards():
    # R = 1,0,0,1: mean .5, unbiased std sqrt(4·.25/3) = .57735 → ±.5/.57735 = ±.866025
    g = grp(*(traj(f"t{i}", [0.0, 0.0], outcome=r) for i, r in enumerate([1.0, 0.0, 0.0, 1.0])))
    a, b = 0.866025, -0.866025
    check(run("grpo", [g]), {"t0": [a, a], "t1": [b, b], "t2": [b, b], "t3": [a, a]})
    # mean_norm (Dr. GRPO): ±.5
    check(run("grpo", [g], mode="mean_norm"),
          {"t0": [.5, .5], "t1": [-.5, -.5], "t2": [-.5, -.5], "t3": [.5, .5]})


def test_grpo_outcome_from_step_rewards_none_is_zero():
    # R = 0+1+0 = 1, .5, 0 → mean .5, std .5 → 1, 0, -1
    g = grp(traj("a", [None, 1.0, None]), traj("b", [0.5, None]), traj("c", [None]))
    check(run("grpo", [g]), {"a": [1.0] * 3, "b": [0.0] * 2, "c": [-1.0]})


def test_rloo_hand_computed():
    # R = 1,0,0,4: A_1 = 1 − 4/3, A_2 = 0 − 5/3, A_4 = 4 − 1/3; Σ A = 0
    g = grp(*(traj(f"t{i}", [r]) for i, r in enumerate([1.0, 0.0, 0.0, 4.0])))
    check(run("rloo", [g]), {"t0": [-1 / 3], "t1": [-5 / 3], "t2": [-5 / 3], "t3": [11 / 3]})
    # mean_std_norm: / unbiased std of R (sqrt(10.75/3) = 1.892969)
    check(run("rloo", [g], mode="mean_std_norm"),
          {"t0": [-0.176090], "t1": [-0.880450], "t2": [-0.880450], "t3": [1.936991]})


def test_error_trajectory_is_excluded_and_gets_no_entry():
    ok = [traj(f"t{i}", [r], ["s0"]) for i, r in enumerate([1.0, 0.0, 0.0, 1.0])]
    with_error = grp(ok[0], ok[1], error("e"), ok[2], ok[3])
    for name in NAMES:
        result = run(name, [with_error])
        assert "e" not in result
        check(result, run(name, [grp(*ok)]))
    check(run("grpo", [with_error]), {"t0": [0.866025], "t1": [-0.866025], "t2": [-0.866025],
                                      "t3": [0.866025]})


@pytest.mark.parametrize("name", NAMES)
def test_zero_variance_group_gives_exact_zeros(name):
    g = grp(*(traj(f"t{i}", [0.0, 2.0], ["s0", "s1"]) for i in range(3)))
    check(run(name, [g]), {f"t{i}": [0.0, 0.0] for i in range(3)})
    # a large mean (1e6 + .95) must not leave rounding noise to be divided by ε
    big = grp(*(traj(f"t{i}", [0.95, 1e6], ["s0", "s1"]) for i in range(3)))
    assert all((a == 0).all() for a in run(name, [big], gamma=0.0).values())


@pytest.mark.parametrize("name", NAMES)
def test_fewer_than_two_scorable_gives_zeros(name):
    alone = grp(traj("a", [1.0, 5.0], ["s0", "s0"], invalid=[1], group="x"))
    with_error = grp(traj("b", [3.0], group="y"), error("e", group="y"))
    only_errors = grp(error("e2", group="z"), error("e3", group="z"))
    check(run(name, [alone, with_error, only_errors]), {"a": [0.0, 0.0], "b": [0.0]})


def test_invalid_penalty_is_step_local():
    # R = 1, 0 → ±.707107 (std sqrt(.5)); λ = .1 comes off a's invalid step 1 only
    g = grp(traj("a", [0.0, 1.0], invalid=[1]), traj("b", [0.0, 0.0]))
    check(run("grpo", [g]), {"a": [0.707106, 0.607106], "b": [-0.707106, -0.707106]})
    check(run("grpo", [g], mode="mean_norm"), {"a": [0.5, 0.4], "b": [-0.5, -0.5]})
    check(run("rloo", [g], invalid_penalty=0.25), {"a": [1.0, 0.75], "b": [-1.0, -1.0]})
    check(run("grpo", [g], invalid_penalty=0), {"a": [0.707106] * 2, "b": [-0.707106] * 2})
    # zero-variance group: the penalty is λ, not λ/ε
    same = grp(traj("c", [1.0, 0.0], invalid=[0]), traj("d", [1.0, 0.0]))
    for name in NAMES:
        check(run(name, [same]), {"c": [-0.1, 0.0], "d": [0.0, 0.0]})


def test_helpers():
    np.testing.assert_allclose(returns_to_go([0.0, 0.0, 1.0], 0.9), [0.81, 0.9, 1.0])
    np.testing.assert_allclose(returns_to_go([1.0, 2.0], 1.0), [3.0, 2.0])
    assert returns_to_go([], 0.5).shape == (0,)
    np.testing.assert_allclose(step_scores(traj("a", [None, 1.0], invalid=[0]), 0.1),
                               [-0.1, 1.0])


# ---------------------------------------------------------------- GiGPO by hand

# γ = .5. Returns-to-go: t1 (.25, .5, 1); t2 (.125, .25, .5, 1), a loop at A; t3, t4 zeros.
# R = 1, 1, 0, 0. Clusters: s0 {t1·0 .25, t2·0 .125, t3·0 0, t4·0 0} mean .09375;
# A {t1·1 .5, t2·1 .25, t2·2 .5, t4·1 0} mean .3125; B {t1·2 1, t2·3 1} → 0; C, D singletons → 0.
LOOPS = [grp(traj("t1", [0, 0, 1], ["s0", "A", "B"]),
             traj("t2", [0, 0, 0, 1], ["s0", "A", "A", "B"]),
             traj("t3", [0, 0], ["s0", "C"]), traj("t4", [0, 0, 0], ["s0", "A", "D"]))]


def test_gigpo_mean_norm_by_hand():
    # episode ±.5; t1·0 = .5 + (.25 − .09375) = .65625; t2·1 = .5 + (.25 − .3125) = .4375
    check(run("gigpo", LOOPS, gamma=0.5, mode="mean_norm"),
          {"t1": [0.65625, 0.6875, 0.5], "t2": [0.53125, 0.4375, 0.6875, 0.5],
           "t3": [-0.59375, -0.5], "t4": [-0.59375, -0.8125, -0.5]})


def test_gigpo_episode_stats_trajectory_vs_step():
    # trajectory: episode ±.866025; s0 std .119678 → t1·0 step term 1.305592
    by_traj = run("gigpo", LOOPS, gamma=0.5)
    check(by_traj, {"t1": [2.171595, 1.649370, 0.866024],
                    "t2": [1.127138, 0.604909, 1.649370, 0.866024],
                    "t3": [-1.649367, -0.866024], "t4": [-1.649367, -2.171601, -0.866024]})
    # step: 12 entries (7 ones, 5 zeros): mean 7/12, std .514929 → +.809172 / −1.132841
    by_step = run("gigpo", LOOPS, gamma=0.5, episode_stats="step")
    check(by_step, {"t1": [2.114744, 1.592518, 0.809172],
                    "t2": [1.070286, 0.548057, 1.592518, 0.809172],
                    "t3": [-1.916184, -1.132841], "t4": [-1.916184, -2.438418, -1.132841]})
    assert not np.allclose(by_traj["t3"], by_step["t3"])


def test_gigpo_step_weight():
    # ω = .5: t1·0 = .866024 + .5·1.305592
    check(run("gigpo", LOOPS, gamma=0.5, step_weight=0.5),
          {"t1": [1.518810, 1.257697, 0.866024], "t2": [0.996581, 0.735466, 1.257697, 0.866024],
           "t3": [-1.257695, -0.866024], "t4": [-1.257695, -1.518812, -0.866024]})
    check(run("gigpo", LOOPS, step_weight=0.0), run("grpo", LOOPS))


def test_gigpo_invalid_penalty_enters_own_return_and_episode_term():
    # γ = 1, R = 1, 0, 1 → episode 1/3, −2/3, 1/3; s0 G = 1, 0, 1 → same;
    # A: G = 1, 0 − .1, 1 (mean .6333) → .3667, −.7333, .3667; b·1 also loses λ from episode
    g = grp(traj("a", [0, 1], ["s0", "A"]), traj("b", [0, 0], ["s0", "A"], invalid=[1]),
            traj("c", [0, 1], ["s0", "A"]))
    check(run("gigpo", [g], gamma=1.0, mode="mean_norm"),
          {"a": [2 / 3, 0.7], "b": [-4 / 3, -1.5], "c": [2 / 3, 0.7]})
    check(run("gigpo", [g], gamma=1.0),
          {"a": [1.154699, 1.154699], "b": [-2.309397, -2.409397], "c": [1.154699, 1.154699]})


def test_gigpo_clusters_stay_within_their_group():
    g1 = grp(traj("a", [0, 1], ["s0", "A"], group="x"), traj("b", [0, 0], ["s0", "B"], group="x"))
    g2 = grp(traj("c", [0, 5], ["s0", "A"], group="y"), traj("d", [0, 0], ["s0", "A"], group="y"))
    together = run("gigpo", [g1, g2])
    check(together, {**run("gigpo", [g1]), **run("gigpo", [g2])})


def test_gigpo_none_state_keys_are_singletons():
    g = grp(traj("a", [0, 1], [None, None]), traj("b", [0, 0], [None, None]))
    check(run("gigpo", [g]), run("grpo", [g]))


def test_duplicate_ids_are_rejected():
    with pytest.raises(SchemaError, match="repeated: \\['a'\\]"):
        run("grpo", [grp(traj("a", [1.0]), traj("a", [0.0]))])


# ---------------------------------------------------------------- registry and options

def test_registry_names_and_typos():
    assert {"grpo", "rloo", "gigpo"} <= set(estimator_names())
    assert options_class("gigpo") is GiGPOOptions
    with pytest.raises(ConfigError, match="did you mean 'grpo'"):
        get_estimator("grp")
    with pytest.raises(ConfigError, match="accepted: gamma, invalid_penalty, mode, "
                                          "cross_steps, penalty_placement; did you mean"):
        get_estimator("grpo", gama=0.9)


@pytest.mark.parametrize(("name", "options", "match"), [
    ("grpo", {"mode": "std"}, "mode expects one of 'mean_std_norm', 'mean_norm'"),
    ("grpo", {"gamma": 1.5}, "gamma must be in \\[0, 1\\]"),
    ("grpo", {"gamma": "0.9"}, "gamma expects a number"),
    ("rloo", {"invalid_penalty": -1.0}, "use 0 to disable"),
    ("gigpo", {"step_weight": -1.0}, "step_weight must be"),
    ("gigpo", {"episode_stats": "traj"}, "episode_stats expects one of 'trajectory', 'step'"),
    ("gigpo", {"step_weight": True}, "step_weight expects a number"),
])
def test_bad_option_values(name, options, match):
    with pytest.raises(ConfigError, match=match):
        get_estimator(name, **options)


def test_options_coerce_ints_and_keep_defaults():
    assert GiGPOOptions(gamma=1).gamma == 1.0 and isinstance(GiGPOOptions(gamma=1).gamma, float)
    assert options_class("grpo")().gamma == 1.0 and GiGPOOptions().gamma == 0.95
    assert options_class("rloo")().mode == "mean_norm" and GiGPOOptions().invalid_penalty == 0.1


@dataclass(frozen=True)
class HistoryOptions(EstimatorOptions):
    """SALT-like options, to test the parser's generic type handling."""

    history: int | Literal["all"] = 0
    """0, an integer k, or all."""
    merge: bool = False
    """A boolean."""


def test_parse_options_typed_values():
    parsed = parse_options(GiGPOOptions, {"gamma": "0.9", "episode_stats": "step",
                                          "step_weight": "2", "mode": "mean_norm"})
    assert parsed == {"gamma": 0.9, "episode_stats": "step", "step_weight": 2.0,
                      "mode": "mean_norm"}
    assert isinstance(parsed["step_weight"], float)
    assert parse_options(HistoryOptions, {"history": "all", "merge": "true"}) == {
        "history": "all", "merge": True}
    assert parse_options(HistoryOptions, {"history": "3"}) == {"history": 3}
    get_estimator("gigpo", **parsed)


@pytest.mark.parametrize(("pairs", "match"), [
    ({"history": "x"}, "history expects an integer or 'all'"),
    ({"history": "1.5"}, "history expects an integer or 'all'"),
    ({"merge": "maybe"}, "merge expects a boolean"),
    ({"gamma": "abc"}, "--set gamma=abc: gamma expects a number"),
    ({"mode": "std"}, "mode expects one of"),
    ({"histroy": "2"}, "HistoryOptions has no option 'histroy'; accepted: gamma.*did you mean"),
])
def test_parse_options_errors(pairs, match):
    with pytest.raises(ConfigError, match=match):
        parse_options(HistoryOptions, pairs)


def test_register_function_estimator_and_duplicates():
    @register_estimator("test-zero", options=EstimatorOptions)
    def zero(groups, options):
        return {t.id: np.zeros(len(t.steps)) for g in groups for t in g.scorable}

    try:
        assert run("test-zero", [grp(traj("a", [1.0]))], gamma=0.5)["a"].tolist() == [0.0]
        with pytest.raises(ConfigError, match="already registered"):
            register_estimator("test-zero", options=EstimatorOptions)(lambda g, options: {})
    finally:
        base_mod._REGISTRY.pop("test-zero")


def test_doctests():
    for module in (adv_pkg, base_mod):
        assert doctest.testmod(module).failed == 0


# ---------------------------------------------------------------- JSONL in and out

def test_load_minimal_and_full_forms(tmp_path):
    lines = [
        {"id": "a", "group_id": "g", "steps": [{"state_key": "s0", "reward": 0},
                                                {"state_key": "A", "reward": 1, "action": "go"}]},
        {"id": "b", "task_id": "g", "status": "truncated",
         "steps": [{"state_key": "s0"}, {"state_key": "A", "valid": False,
                                         "action": {"name": "move", "arguments": {"d": 1}}}]},
        {"id": "e", "group_id": "g", "status": "error"},
        {"id": "c", "group_id": "g", "outcome_reward": 1.0, "steps": [{"state_key": "s0"}]},
    ]
    path = tmp_path / "min.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    groups = load_minimal(path)
    built = [grp(traj("a", [0, 1], ["s0", "A"]), traj("b", [None, None], ["s0", "A"], [1]),
                 error("e"), traj("c", [None], ["s0"], outcome=1.0))]
    assert [t.id for t in groups[0].trajectories] == ["a", "b", "e", "c"]
    assert groups[0].trajectories[1].steps[1].action.tool_calls[0].name == "move"
    check(run("gigpo", groups), run("gigpo", built))
    full = tmp_path / "full.jsonl"
    write_trajectories(full, [t for g in built for t in g.trajectories])
    check(run("gigpo", load_minimal(full)), run("gigpo", built))


@pytest.mark.parametrize(("line", "match"), [
    ({"id": "a", "group_id": "g", "steps": [{"rewards": 1}]}, ":1: .*did you mean 'reward'"),
    ({"group_id": "g"}, "needs 'id'"),
    ({"id": "a", "group_id": "g", "status": "error", "outcome_reward": 1.0}, "unscorable"),
    ([1, 2], "must be a JSON object"),
    ({"id": "a", "group_id": "g", "steps": [{"action": {"arguments": {}}}]}, "needs 'name'"),
    ({"id": "a", "group_id": "g", "steps": [{"reward": "x"}]}, ":1: "),
])
def test_load_minimal_errors(tmp_path, line, match):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(SchemaError, match=match):
        load_minimal(path)


def test_advantages_jsonl():
    g = grp(traj("a", [1.0, 0.0]), error("e"), traj("b", [0.0]))
    rows = [json.loads(line) for line in advantages_jsonl([g], get_estimator("grpo"))]
    assert [r["id"] for r in rows] == ["a", "b"]
    np.testing.assert_allclose(rows[0]["advantages"], [0.707106] * 2, atol=1e-4)


# ---------------------------------------------------------------- properties

rewards_st = st.one_of(st.none(), st.floats(-10, 10), st.sampled_from([0.0, 1.0, 1e6, -1e-9]))


@st.composite
def options_st(draw, name=None):
    name = name or draw(st.sampled_from(NAMES))
    opts = {"mode": draw(st.sampled_from(["mean_std_norm", "mean_norm"])),
            "gamma": draw(st.sampled_from([0.0, 0.5, 0.95, 1.0])),
            "invalid_penalty": draw(st.sampled_from([0.0, 0.1, 1.0]))}
    if name == "gigpo":
        opts["episode_stats"] = draw(st.sampled_from(["trajectory", "step"]))
        opts["step_weight"] = draw(st.sampled_from([0.0, 0.5, 1.0]))
    return name, opts


@st.composite
def groups_st(draw, unique_keys=False):
    groups = []
    for g in range(draw(st.integers(1, 3))):
        trajs = []
        for i in range(draw(st.integers(1, 5))):
            tid = f"g{g}t{i}"
            if draw(st.integers(0, 4)) == 0:
                trajs.append(error(tid, group=f"g{g}"))
                continue
            rewards = draw(st.lists(rewards_st, max_size=6))
            keys = ([f"{tid}-{t}" for t in range(len(rewards))] if unique_keys else
                    draw(st.lists(st.sampled_from([None, "s0", "a", "b"]), min_size=len(rewards),
                                  max_size=len(rewards))))
            invalid = [t for t in range(len(rewards)) if draw(st.booleans())]
            outcome = draw(st.one_of(st.none(), st.floats(-10, 10)))
            trajs.append(traj(tid, rewards, keys, invalid, outcome=outcome, group=f"g{g}"))
        groups.append(grp(*trajs))
    return groups


@settings(max_examples=150, deadline=None)
@given(groups_st(), options_st())
def test_entries_finite_and_shaped(groups, name_opts):
    name, opts = name_opts
    result = run(name, groups, **opts)
    scorable = [t for g in groups for t in g.trajectories if t.scorable]
    assert list(result) == [t.id for t in scorable]
    for t in scorable:
        assert result[t.id].shape == (len(t.steps),) and np.isfinite(result[t.id]).all()


@settings(max_examples=150, deadline=None)
@given(groups_st(), options_st(), st.randoms(use_true_random=False))
def test_invariant_to_trajectory_and_group_order(groups, name_opts, rnd):
    name, opts = name_opts
    shuffled = [grp(*rnd.sample(g.trajectories, len(g.trajectories))) for g in groups]
    rnd.shuffle(shuffled)
    a, b = run(name, groups, **opts), run(name, shuffled, **opts)
    assert set(a) == set(b)
    for tid in a:
        np.testing.assert_allclose(a[tid], b[tid], atol=1e-6, rtol=1e-9)


@settings(max_examples=100, deadline=None)
@given(st.lists(rewards_st, max_size=6), st.lists(st.booleans(), min_size=6, max_size=6),
       st.integers(1, 6), st.booleans(), options_st())
def test_identical_trajectories_leave_only_the_penalty(rewards, valid, copies, err, name_opts):
    name, opts = name_opts
    keys = [f"s{t}" for t in range(len(rewards))]  # no loops: a revisit has its own G_t
    invalid = [t for t in range(len(rewards)) if not valid[t]]
    trajs = [traj(f"t{i}", rewards, keys, invalid) for i in range(copies)]
    result = run(name, [grp(*trajs, *([error("e")] if err else []))], **opts)
    lam = opts["invalid_penalty"] if copies >= 2 else 0.0
    expected = [-lam if t in invalid else 0.0 for t in range(len(rewards))]
    for t in trajs:
        np.testing.assert_allclose(result[t.id], expected, atol=1e-6)


@settings(max_examples=100, deadline=None)
@given(groups_st(unique_keys=True), options_st("gigpo"))
def test_gigpo_with_unique_states_equals_grpo(groups, name_opts):
    _, opts = name_opts
    opts["episode_stats"] = "trajectory"
    gigpo = run("gigpo", groups, **opts)
    grpo = run("grpo", groups, mode=opts["mode"], invalid_penalty=opts["invalid_penalty"])
    for tid in grpo:
        np.testing.assert_allclose(gigpo[tid], grpo[tid], atol=1e-9)


@settings(max_examples=100, deadline=None)
@given(groups_st(), st.sampled_from([0.0, 0.1]))
def test_rloo_is_scaled_dr_grpo(groups, lam):
    # R_i − mean_{j≠i} R_j = n/(n−1)·(R_i − mean_j R_j); the penalty is unscaled in both
    rloo = run("rloo", groups, invalid_penalty=lam)
    grpo = run("grpo", groups, mode="mean_norm", invalid_penalty=lam)
    for g in groups:
        n = len(g.scorable)
        for t in g.scorable:
            pen = np.array([0.0 if s.valid else lam for s in t.steps]) if n >= 2 else 0.0
            scale = n / (n - 1) if n >= 2 else 1.0
            np.testing.assert_allclose(rloo[t.id] + pen, scale * (grpo[t.id] + pen), atol=1e-6)
