"""Hostile replies through ``step()`` of every registered env that runs without Docker or a browser.

The envs come from the registry, so a newly registered family is fuzzed without editing this
file; those whose registration ``requires`` Docker, a browser or a GPU are left to their own
marked tests.

The default run sends :data:`TOTAL` replies in all: first :data:`FLOOR` to every env (each
reply kind several times), then the rest spread over the envs in inverse proportion to what a
reply cost there, so the bulk goes where it is cheap and one slow engine does not stretch the
run. The ``sweep`` run sends :data:`SWEEP_PER_ENV` to every env.
"""

from __future__ import annotations

import asyncio
import math

import pytest

import agentgym
from agentgym.fuzz import FuzzReport, fuzz_env

SKIPPED_NEEDS = {"docker", "browser", "gpu"}
TOTAL = 10_000
"""Hostile replies in the default run, over all fuzzed envs together."""
FLOOR = 30
"""Replies every env gets in the default run, before the rest is spread."""
MIN_SHARE = 10
"""A smaller share of the rest goes to the cheapest env instead (not worth a start-up)."""
SWEEP_PER_ENV = 2_000
HANG_S = 600
"""One env's fuzz run may take this long before it counts as hung."""


def fuzzed_ids() -> list[str]:
    """Registered ids whose requirements leave out Docker, a browser and a GPU."""
    return [env_id for env_id, spec in agentgym.registry.items()
            if not SKIPPED_NEEDS & set(spec.system_requirements)]


IDS = fuzzed_ids()
_SENT: dict[str, FuzzReport] = {}
"""The floor run of each env (its reply count and wall time), for spreading the rest."""


async def _fuzz(env_id: str, replies: int, seed: int) -> FuzzReport:
    env = agentgym.make(env_id)
    async with asyncio.timeout(HANG_S):
        report = await fuzz_env(env, replies=replies, seed=seed)
    lines = [f"{f.kind}: {f.reply!r} -> {f.error}" for f in report.failures]
    assert not lines, f"{env_id}: {len(lines)} hostile replies raised or broke step():\n" + \
        "\n".join(lines)
    assert report.steps == replies
    return report


def spread(remaining: int, seconds_per_reply: dict[str, float]) -> dict[str, int]:
    """Split ``remaining`` replies over envs in inverse proportion to their cost (sum kept)."""
    weights = {k: 1 / max(v, 1e-4) for k, v in seconds_per_reply.items()}
    total = sum(weights.values())
    shares = {k: math.floor(remaining * w / total) for k, w in weights.items()}
    cheapest = max(weights, key=weights.__getitem__)
    for k in shares:  # a few replies are not worth an env's start-up: the cheapest takes them
        if k != cheapest and shares[k] < MIN_SHARE:
            shares[cheapest] += shares[k]
            shares[k] = 0
    shares[cheapest] += remaining - sum(shares.values())  # the rounding remainder
    return shares


def test_spread_keeps_the_total_and_favours_cheap_envs():
    shares = spread(1000, {"cheap": 0.001, "dear": 0.5, "mid": 0.01})
    assert sum(shares.values()) == 1000 and shares["cheap"] > shares["mid"] > shares["dear"]
    assert shares["dear"] == 0  # 1.8 replies: given to the cheapest


@pytest.mark.parametrize("env_id", IDS, ids=str)
async def test_hostile_replies_are_observations(env_id):
    _SENT[env_id] = await _fuzz(env_id, FLOOR, seed=0)


async def test_the_rest_of_10000_hostile_replies():
    """Runs after the per-env floor (file order); it runs a missing floor itself."""
    for env_id in IDS:
        if env_id not in _SENT:
            _SENT[env_id] = await _fuzz(env_id, FLOOR, seed=0)
    remaining = max(TOTAL - sum(r.steps for r in _SENT.values()), 0)
    shares = spread(remaining, {k: r.seconds / r.steps for k, r in _SENT.items()})
    sent = sum(r.steps for r in _SENT.values())
    for env_id, replies in shares.items():
        if replies:
            sent += (await _fuzz(env_id, replies, seed=1)).steps
    assert sent >= TOTAL


@pytest.mark.sweep
@pytest.mark.parametrize("env_id", IDS, ids=str)
async def test_hostile_replies_sweep(env_id):
    await _fuzz(env_id, SWEEP_PER_ENV, seed=2)


async def test_fuzz_reports_an_env_that_accepts_unknown_tools():
    """Even where prose is an action, a call to a tool that does not exist is a mistake."""
    from agentgym import BaseEnv, Message, StepResult, ToolBox
    from agentgym.envs.arithmetic import calculator

    class AcceptsAnything(BaseEnv):
        prose_is_action = True
        tools = ToolBox([calculator]).specs

        async def _reset(self, seed, options):
            return [Message("user", "compute")], {}

        async def _step(self, action):
            return StepResult((Message("user", "ok"),), None, info={"valid": True})

    report = await fuzz_env(AcceptsAnything(), replies=300, seed=0)
    assert report.failures
    assert {f.error for f in report.failures} == {
        "calls to tools that do not exist came back valid"}
    assert {f.kind for f in report.failures} == {"calls"}
