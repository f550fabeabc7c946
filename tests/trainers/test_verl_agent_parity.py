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
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agentgym.trainers.advantages import get_estimator
from agentgym.types import Group, Message, Step, StepResult, Trajectory

DATA = json.loads((Path(__file__).parent / "data" / "verl_agent_reference.json").read_text())


def groups_of(data):
    out = []
    for g, grp in enumerate(data):
        trajs = tuple(
            Trajectory(f"g{g}t{i}", f"g{g}", f"g{g}", (), tuple(
                Step(k, Message("assistant", "a"), StepResult((), 0.0), state_key=f"s{k}",
                     valid=ok) for k, ok in enumerate(t["valid"])),
                outcome_reward=t["reward"])
            for i, t in enumerate(grp))
        out.append(Group(f"g{g}", trajs))
    return out


GROUPS = groups_of(DATA["groups"])


@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: "{}-{}".format(
    c["estimator"], "-".join(f"{k}={v}" for k, v in c["options"].items())))
def test_matches_verl_agent(case):
    got = get_estimator(case["estimator"], **case["options"])(GROUPS)
    for g, grp in enumerate(case["advantages"]):
        for i, want in enumerate(grp):
            np.testing.assert_allclose(got[f"g{g}t{i}"], want, rtol=1e-5, atol=2e-6)


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
