"""G-RA / D-RA reward accumulation: the spec's SWE example, gates, rescoring and labels."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgym.envs.swe.rewards import SWERewardConfig, swe_components, swe_metrics, swe_outcome
from agentgym.errors import ConfigError, SchemaError
from agentgym.trainers import rewards as rewards_mod
from agentgym.trainers.advantages import get_estimator
from agentgym.trainers.rewards import (
    RewardComponent,
    accumulate,
    accumulation_metrics,
    estimator_options,
    rescore_groups,
)
from agentgym.types import Group, Message, Step, StepResult, Trajectory


def swe(tid, valid, malformed=(), *, group="swe", **info):
    """An SWE episode of ``valid`` turns; ``malformed`` lists rejected turn indices."""
    n = valid + len(malformed)
    steps = tuple(Step(t, Message("assistant", f"turn {t}"),
                       StepResult((), 0.0, terminated=t == n - 1,
                                  info={"valid": t not in malformed,
                                        **(info if t == n - 1 else {})}),
                       state_key=f"s{t}", valid=t not in malformed) for t in range(n))
    return Trajectory(tid, group, group, (), steps, outcome_reward=1.0 if info.get(
        "resolved") else 0.0, metrics={"history_length": 2.0})


# Spec §6: A submits a failing non-empty patch after 12 valid turns; B resolves in 15;
# C never submits in 30; D submits an empty patch, 7 valid turns + 1 malformed.
EXAMPLE = [Group("swe", (
    swe("A", 12, submitted=True, patch_empty=False, resolved=False),
    swe("B", 15, submitted=True, patch_empty=False, resolved=True),
    swe("C", 30),
    swe("D", 7, malformed=(3,), submitted=True, patch_empty=True, resolved=False)))]


def totals(groups):
    return {t.id: t.outcome_reward for g in groups for t in g.trajectories}


def test_worked_example_totals():
    components = swe_components()
    direct = rescore_groups(EXAMPLE, components, "direct")
    gated = rescore_groups(EXAMPLE, components)
    assert totals(direct) == pytest.approx({"A": 1.2, "B": 2.5, "C": 2.0, "D": 0.1})
    assert totals(gated) == pytest.approx({"A": 1.2, "B": 2.5, "C": -1.0, "D": -0.5})
    assert [swe_outcome(t) for t in EXAMPLE[0].trajectories] == [
        "failing_patch", "resolved", "no_submit", "empty_patch"]


def test_worked_example_grpo_flips_for_c():
    grpo = get_estimator("grpo", invalid_penalty=0.0)
    # D-RA: R = 1.2, 2.5, 2.0, .1; mean 1.45, unbiased std 1.047219 → C = +.55/1.047219
    direct = grpo(rescore_groups(EXAMPLE, swe_components(), "direct"))
    assert direct["C"][0] == pytest.approx(0.525201, abs=1e-5) and direct["C"][0] > 0
    # G-RA: R = 1.2, 2.5, −1, −.5; mean .55, std 1.605200 → C = −1.55/1.6052, the lowest
    gated = grpo(rescore_groups(EXAMPLE, swe_components()))
    np.testing.assert_allclose([gated[i][0] for i in "ABCD"],
                               [0.404934, 1.214802, -0.965612, -0.654124], atol=1e-5)
    assert min(gated, key=lambda i: gated[i][0]) == "C"


def test_per_step_form():
    gated = {t.id: t for g in rescore_groups(EXAMPLE, swe_components()) for t in g.trajectories}
    assert gated["C"].step_rewards == (0.0,) * 29 + (-1.0,)  # gate closed: r_high alone
    assert gated["D"].step_rewards == (0.0,) * 7 + (-0.5,)
    assert gated["B"].step_rewards == pytest.approx((0.1,) * 14 + (1.1,))  # r_high on the last
    direct = {t.id: t for g in rescore_groups(EXAMPLE, swe_components(), "direct")
              for t in g.trajectories}
    assert direct["D"].step_rewards == pytest.approx((0.1,) * 3 + (-0.1,) + (0.1,) * 3 + (-0.4,))
    for t in [*gated.values(), *direct.values()]:
        assert math.fsum(t.step_rewards) == pytest.approx(t.outcome_reward)
    assert gated["C"].metrics["reward/outcome"] == -1.0
    assert gated["C"].metrics["reward/turns"] == pytest.approx(3.0)
    assert gated["C"].metrics["reward/gate_turns"] == 0.0
    assert gated["C"].metrics["history_length"] == 2.0  # other metrics are kept


def test_inputs_untouched_and_errors_passed_through():
    err = Trajectory("E", "swe", "swe", (), status="error", error="boom")
    groups = [Group("swe", (*EXAMPLE[0].trajectories, err))]
    out = rescore_groups(groups, swe_components())
    assert out[0].trajectories[-1] is err
    assert EXAMPLE[0].trajectories[2].outcome_reward == 0.0  # original C unchanged
    assert EXAMPLE[0].trajectories[2].step_rewards == (0.0,) * 30


@pytest.mark.parametrize("name", ["grpo", "rloo", "gigpo", "hgpo", "salt"])
def test_any_estimator_runs_on_rescored_groups(name):
    result = get_estimator(name)(rescore_groups(EXAMPLE, swe_components()))
    assert set(result) == set("ABCD")
    assert all(np.isfinite(v).all() for v in result.values())


def test_step_level_estimators_read_the_new_step_rewards():
    # GiGPO's step term: γ = 1 returns at s0 are R itself (-1, -.5, 1.2, 2.5 gated)
    gated = rescore_groups(EXAMPLE, swe_components())
    step_only = get_estimator("gigpo", gamma=1.0, invalid_penalty=0.0, mode="mean_norm")(gated)
    episode = get_estimator("grpo", invalid_penalty=0.0, mode="mean_norm")(gated)
    assert step_only["C"][0] - episode["C"][0] == pytest.approx(-1.0 - 0.55)


def three_levels(values):
    """Components with priorities 2 (δ .5), 1 (δ 0) and 0, scoring ``values[name]``."""
    return [RewardComponent("top", lambda t: values["top"], priority=2, threshold=0.5),
            RewardComponent("mid", lambda t: values["mid"], priority=1),
            RewardComponent("low", lambda t: [values["low"]] * len(t.steps))]


@pytest.mark.parametrize(("values", "total", "gates"), [
    ({"top": 1.0, "mid": 0.0, "low": 0.5}, 2.0, (True, True, True)),  # every gate open
    ({"top": 0.4, "mid": 2.0, "low": 0.5}, 0.4, (True, False, False)),  # top below .5
    ({"top": 1.0, "mid": -1.0, "low": 0.5}, 0.0, (True, True, False)),  # mid below 0
])
def test_gates_multiply_down_the_priorities(values, total, gates):
    t = swe("x", 2)
    acc = accumulate(t, three_levels(values))
    assert acc.total == pytest.approx(total)
    assert tuple(acc.gates.values()) == gates
    assert acc.components == pytest.approx({"top": values["top"], "mid": values["mid"],
                                            "low": 2 * values["low"]})
    assert accumulate(t, three_levels(values), "direct").total == pytest.approx(
        values["top"] + values["mid"] + 2 * values["low"])


def test_equal_priorities_do_not_gate_each_other():
    comps = [RewardComponent("a", lambda t: -5.0, threshold=0.0),
             RewardComponent("b", lambda t: 1.0, threshold=0.0)]
    assert accumulate(swe("x", 1), comps).total == -4.0


def test_zero_step_trajectory_keeps_the_outcome_reward():
    empty = Trajectory("z", "swe", "swe", (), ())
    acc = accumulate(empty, swe_components())
    assert (acc.step_rewards, acc.total) == ((), -1.0)  # no submission


def test_config_values_and_keys():
    config = SWERewardConfig(resolved=2.0, valid_turn=0.0, threshold=-0.5, resolved_key="ok",
                             submitted_key="done", patch_empty_key="empty")
    t = swe("x", 2, done=True, ok=True)
    assert swe_outcome(t, config) == "resolved"
    assert accumulate(t, swe_components(config)).total == 2.0
    # δ = −.5 lets an empty patch (−.5) keep its turn rewards
    d = swe("d", 1, malformed=(1,), done=True, ok=False, empty=True)
    assert accumulate(d, swe_components(config)).total == pytest.approx(-0.6)
    custom = swe_components(label=lambda t: "resolved")
    assert accumulate(swe("c", 3), custom).total == pytest.approx(1.3)


@pytest.mark.parametrize(("info", "match"), [
    ({"submitted": True}, "submitted but its last step's info has no 'resolved'"),
    ({"submitted": True, "resolved": False}, "no 'patch_empty'.*SWERewardConfig"),
])
def test_unlabelled_submission_raises(info, match):
    with pytest.raises(SchemaError, match=match):
        swe_outcome(swe("x", 1, **info))


def test_bad_accumulation_and_components():
    with pytest.raises(ConfigError, match="'gated' \\(G-RA\\) or 'direct'"):
        accumulate(swe("x", 1), swe_components(), "sum")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unique names"):
        accumulate(swe("x", 1), [*swe_components(), swe_components()[0]])
    with pytest.raises(ConfigError, match="finite"):
        accumulate(swe("x", 1), [RewardComponent("a", lambda t: 1.0, threshold=math.nan)])
    with pytest.raises(ValueError, match="scored 1 steps of trajectory 'x', which has 2"):
        accumulate(swe("x", 2), [RewardComponent("a", lambda t: [1.0])])


def test_swe_metrics():
    assert swe_metrics(EXAMPLE[0].trajectories) == {
        "completion_rate": 0.75, "modification_rate": 0.5, "resolve_rate": 0.25}
    assert swe_metrics([swe("x", 2), swe("y", 1)]) == {}  # the env reports nothing
    only_submit = [swe("x", 1, submitted=True), swe("y", 1)]
    assert swe_metrics(only_submit) == {"completion_rate": 0.5}
    assert swe_metrics([swe("r", 1, submitted=True, resolved=True, patch_empty=False)]) == {
        "completion_rate": 1.0, "modification_rate": 1.0, "resolve_rate": 1.0}


def test_accumulation_metrics():
    means = accumulation_metrics(rescore_groups(EXAMPLE, swe_components()))
    assert means["reward/outcome"] == pytest.approx((0 + 1 - 1 - 0.5) / 4)
    assert means["reward/gate_turns"] == 0.5
    assert means["reward/gate_outcome"] == 1.0
    # what the estimator trains on: R(τ), here all different, so no group lacks a signal
    totals = [t.outcome_reward for t in rescore_groups(EXAMPLE, swe_components())[0].scorable]
    assert means["accumulated/reward_mean"] == pytest.approx(sum(totals) / len(totals))
    assert means["accumulated/zero_variance_groups"] == 0.0
    alike = rescore_groups([Group("swe", (swe("a", 2), swe("b", 2)))], swe_components())
    assert accumulation_metrics(alike)["accumulated/zero_variance_groups"] == 1.0


def test_doctest():
    from agentgym.envs.swe import rewards as swe_rewards

    assert doctest.testmod(rewards_mod).failed == 0
    assert doctest.testmod(swe_rewards).attempted > 0 and doctest.testmod(swe_rewards).failed == 0


def test_the_preset_is_named_in_the_config_and_checked_when_read():
    from agentgym.reward_presets import get_reward_preset
    from agentgym.trainers.config import load_config

    preset = get_reward_preset("swe")
    assert preset.options is SWERewardConfig and [c.name for c in preset.components()] == [
        "outcome", "turns"]
    assert preset.components({"resolved": 2.0})[0].score(EXAMPLE[0].trajectories[0]) in (
        -1.0, -0.5, 0.0, 2.0)
    with pytest.raises(ConfigError, match="no reward preset 'sw'.*did you mean 'swe'"):
        load_config(None, ["algorithm.reward_accumulation=gated",
                           "algorithm.reward_preset=sw"])
    with pytest.raises(ConfigError, match="no option 'resolve'.*did you mean 'resolved'"):
        load_config(None, ["algorithm.reward_accumulation=gated",
                           "algorithm.reward_options.resolve=2"])


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 20), st.lists(st.booleans(), min_size=20, max_size=20),
       st.sampled_from(["none", "empty", "failing", "resolved"]))
def test_gated_equals_direct_when_the_outcome_clears_delta(n, flags, outcome):
    malformed = [t for t in range(n) if flags[t]]
    info = {"none": {}, "empty": {"submitted": True, "resolved": False, "patch_empty": True},
            "failing": {"submitted": True, "resolved": False, "patch_empty": False},
            "resolved": {"submitted": True, "resolved": True}}[outcome]
    t = swe("x", n - len(malformed), malformed, **info)
    gated, direct = accumulate(t, swe_components()), accumulate(t, swe_components(), "direct")
    high = {"none": -1.0, "empty": -0.5, "failing": 0.0, "resolved": 1.0}[outcome]
    if n == 0 and outcome != "none":
        high = -1.0  # no step, so no last step to report a submission
    low = 0.1 * (n - len(malformed)) - 0.1 * len(malformed)
    assert direct.total == pytest.approx(high + low)
    assert gated.total == pytest.approx(high + low if high >= 0 else high)
    if n:
        assert math.fsum(gated.step_rewards) == pytest.approx(gated.total)


def test_one_invalid_turn_penalty_unless_both_are_asked_for():
    # D's malformed turn 3 is charged by the preset's malformed_turn; the estimator's λ
    # (default 0.1) joins it only when the options name invalid_penalty.
    assert estimator_options({"gamma": 0.9}, "none") == {"gamma": 0.9}
    assert estimator_options({}, "direct") == {"invalid_penalty": 0.0}
    assert estimator_options({"invalid_penalty": 0.3}, "gated") == {"invalid_penalty": 0.3}
    gated = rescore_groups(EXAMPLE, swe_components())
    single = get_estimator("grpo", **estimator_options({}, "gated"))(gated)["D"]
    both = get_estimator("grpo", **estimator_options({"invalid_penalty": 0.1}, "gated"))(
        gated)["D"]
    assert single[3] == pytest.approx(single[0])  # no second charge on the malformed turn
    assert both[3] == pytest.approx(both[0] - 0.1)
    assert get_estimator("grpo")(gated)["D"][3] == pytest.approx(both[3])  # the old default
