"""Parity with verl-agent's own GRPO/RLOO numbers (``cross_steps``, ``before_stats``).

How ``data/verl_agent_reference.json`` was made (once, outside the repository; only the
numbers are kept): verl-agent's ``compute_grpo_outcome_advantage`` and
``compute_rloo_outcome_advantage`` (``verl/trainer/ppo/core_algos.py`` of a fork carrying
upstream verl-agent, vanzll/verl-agent at f80f739) ran with CPU torch on the six groups
stored in the file (seeded random: 2 to 6 trajectories, 1 to 12 steps, outcome rewards 0, 0.5
or 1 with repeats, two all-equal groups, invalid steps, a one-step and an all-invalid
twelve-step episode). Their input was one row per step, trajectory after trajectory as
verl-agent gathers them, holding the episode reward less λ on an invalid step (its episode
reward manager puts R_i on every step row and its invalid-action penalty subtracts λ from that
row), ``index`` = group, ``traj_index`` = trajectory, a one-token response mask; each case
records the reference function and arguments next to the agentgym options that must match.
Outputs are float32, kept to 7 significant digits.

GiGPO (``gigpo_groups``/``gigpo_cases``): four more groups whose steps carry text state keys
(three room descriptions with a varying "Turn k." suffix), the outcome reward on the last
step and γ = 0.95. verl-agent's ``build_step_group`` (exact, and with ``enable_similarity``
at threshold 0.9) and ``step_norm_reward`` from ``gigpo/core_gigpo.py`` (same fork, 7caaed8)
ran on the discounted returns less λ on an invalid step (its penalty on ``step_rewards``);
the episode term came from ``compute_grpo_outcome_advantage``, whose statistics
``episode_norm_reward`` repeats; the recorded advantage is their sum (step_advantage_w 1).

HGPO (``hgpo_cases``): the HGPO recipe's ``compute_hgpo_outcome_advantage`` from
``recipe/hgpo/core_hgpo.py`` of a verl-agent fork that carries it (zzj1111/alfworldauto,
file last changed in b4918cc) ran with CPU torch on both fixtures above (``fixture`` names
which), its ``verl`` import stubbed (the function does not use it). Its ``step_rewards``
were the same file's ``compute_step_discounted_returns`` (γ = 0.95) less λ on an invalid
step (what its trainer's ``apply_invalid_action_penalty`` does), ``anchor_obs`` the state
keys, ``token_level_rewards`` the episode reward less λ on an invalid step (read only with
``base_group``), a one-token response mask; each case records K, mode, α and base_group.
"""

from __future__ import annotations

import doctest
import json
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from agentgym.errors import ConfigError
from agentgym.trainers.advantages import get_estimator, options_class, presets
from agentgym.types import Group, Message, Step, StepResult, Trajectory

DATA = json.loads((Path(__file__).parent / "data" / "verl_agent_reference.json").read_text())


def groups_of(data):
    out = []
    for g, grp in enumerate(data):
        trajs = tuple(
            Trajectory(f"g{g}t{i}", f"g{g}", f"g{g}", (), tuple(
                Step(k, Message("assistant", "a"), StepResult(
                    (), t["reward"] if k == len(t["valid"]) - 1 else 0.0),
                     state_key=t["keys"][k] if "keys" in t else f"s{k}", valid=ok)
                for k, ok in enumerate(t["valid"])),
                outcome_reward=t["reward"])
            for i, t in enumerate(grp))
        out.append(Group(f"g{g}", trajs))
    return out


GROUPS = groups_of(DATA["groups"])
GIGPO_GROUPS = groups_of(DATA["gigpo_groups"])


def case_id(case):
    return "{}-{}".format(case["estimator"], "-".join(
        f"{k}={v}" for k, v in case["options"].items()))


def check(case, groups):
    got = get_estimator(case["estimator"], **case["options"])(groups)
    for g, grp in enumerate(case["advantages"]):
        for i, want in enumerate(grp):
            np.testing.assert_allclose(got[f"g{g}t{i}"], want, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("case", DATA["cases"], ids=case_id)
def test_matches_verl_agent(case):
    check(case, GROUPS)


@pytest.mark.parametrize("case", DATA["gigpo_cases"], ids=case_id)
def test_gigpo_matches_verl_agent(case):
    check(case, GIGPO_GROUPS)


@pytest.mark.parametrize("case", DATA["hgpo_cases"], ids=lambda c: f"{c['fixture']}-" + case_id(c))
def test_hgpo_matches_the_reference_recipe(case):
    check(case, GIGPO_GROUPS if case["fixture"] == "gigpo_groups" else GROUPS)


def test_hgpo_cases_are_not_trivial():
    values = [a for c in DATA["hgpo_cases"] for g in c["advantages"] for t in g for a in t]
    assert sum(a != 0 for a in values) > len(values) // 2
    assert {c["options"]["history_length"] for c in DATA["hgpo_cases"]} == {0, 1, 2, 3}
    # on the text-keyed fixture the levels differ, so the weight offset shows: 0 fails
    case = next(c for c in DATA["hgpo_cases"] if c["fixture"] == "gigpo_groups")
    with pytest.raises(AssertionError):
        check({**case, "options": {**case["options"], "weight_offset": 0.0}}, GIGPO_GROUPS)


def test_similarity_merges_what_exact_matching_splits():
    exact = get_estimator("gigpo", step_weight=1.0)
    similar = get_estimator("gigpo", similarity_threshold=0.9)
    a, b = exact(GIGPO_GROUPS), similar(GIGPO_GROUPS)
    assert any(not np.allclose(a[k], b[k]) for k in a)
    with pytest.raises(ConfigError, match="similarity_threshold must be in"):
        get_estimator("gigpo", similarity_threshold=1.0)


def test_the_fixture_covers_what_parity_needs():
    lengths = {len(t["valid"]) for g in DATA["groups"] for t in g}
    assert {1, 12} <= lengths
    assert any(len({t["reward"] for t in g}) == 1 for g in DATA["groups"])  # all-equal
    assert any(not ok for g in DATA["groups"] for t in g for ok in t["valid"])
    assert {(c["estimator"], c["options"]["cross_steps"]) for c in DATA["cases"]} == {
        ("grpo", True), ("grpo", False), ("rloo", True), ("rloo", False)}


def test_default_placement_differs_from_verl_agents_by_the_invalid_share():
    # mean_norm, one entry per step: before_stats moves the baseline by λ × invalid share
    opts = {"cross_steps": True, "mode": "mean_norm", "invalid_penalty": 0.1}
    own = get_estimator("grpo", **opts)(GROUPS)
    verl = get_estimator("grpo", penalty_placement="before_stats", **opts)(GROUPS)
    for grp in GROUPS:
        steps = [s for t in grp.trajectories for s in t.steps]
        share = sum(not s.valid for s in steps) / len(steps)
        for t in grp.trajectories:
            np.testing.assert_allclose(verl[t.id] - own[t.id], 0.1 * share, atol=1e-12)


def test_preset_holds_the_options_the_parity_cases_use():
    assert doctest.testmod(presets).failed == 0
    checked = 0
    for case in DATA["cases"] + DATA["gigpo_cases"]:
        name, o = case["estimator"], case["options"]
        preset = presets.verl_agent_compat(name, invalid_penalty=o["invalid_penalty"])
        full = {f.name: getattr(options_class(name)(**o), f.name)
                for f in fields(options_class(name))}
        if full == {f.name: getattr(options_class(name)(**preset), f.name)
                    for f in fields(options_class(name))}:  # the case is the preset
            check({**case, "options": preset}, GIGPO_GROUPS if name == "gigpo" else GROUPS)
            checked += 1
    assert checked == 6  # grpo, rloo, gigpo; λ = 0.1 and 0
    assert presets.verl_agent_compat("hgpo")["gamma"] == 0.95
    with pytest.raises(ConfigError, match="did you mean 'rloo'"):
        presets.verl_agent_compat("rlo")
