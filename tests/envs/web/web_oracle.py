"""The web tests' shared helper: follow the env's oracle from a reset to the end."""

from __future__ import annotations

from typing import Any

KW = {"catalog_size": 1000}  # the catalogue tests/envs/web/conftest.py serves


async def play(env: Any, seed: int, buy: Any = None) -> tuple[Any, int]:
    """Reset and follow ``expert_action`` (every step valid); the last result and the turns."""
    await env.reset(seed=seed)
    for turn in range(30):
        result = await env.step(env.expert_action(buy))
        assert result.valid, result.observation[0].content
        if result.done:
            return result, turn + 1
    raise AssertionError("the oracle did not finish in 30 turns")
