"""BaseEnv's contract helpers and the wrappers (MaxTurns, ObservationCap, clean_text)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from agentgym import (
    BaseEnv,
    Env,
    EnvClosedError,
    EnvStateError,
    MaxTurns,
    Message,
    ObservationCap,
    ResetNeeded,
    StepResult,
    Wrapper,
)
from agentgym.wrappers import TRUNCATION_MARKER, clean_text


class GuessEnv(BaseEnv):
    """Guess a seeded number in [0, 100); terminates on a right guess."""

    def __init__(self, text: str = "guess a number") -> None:
        super().__init__()
        self.text = text
        self.target = -1
        self.closes = 0

    async def _reset(self, seed: int | None, options: Mapping[str, Any]) -> tuple[list, dict]:
        self.target = int(self.np_random.integers(100))
        if "target" in options:
            self.target = options["target"]
        return [Message("system", "rules"), Message("user", self.text)], {"task_id": "guess"}

    async def _step(self, action: Message) -> StepResult:
        right = action.content.strip() == str(self.target)
        return StepResult((Message("user", self.text if not right else "yes"),),
                          reward=float(right), terminated=right)

    def state_key(self) -> str | None:
        return f"turn={self.turn}"

    async def _close(self) -> None:
        self.closes += 1


class TruncatingEnv(GuessEnv):
    """Truncates by itself on its second step."""

    async def _step(self, action: Message) -> StepResult:
        return StepResult((Message("user", "tick"),), truncated=self.turn == 1,
                          info={"state_key": "own"})


def guess(env: GuessEnv | Any) -> Message:
    return Message("assistant", str(env.unwrapped.target if isinstance(env, Wrapper)
                                    else env.target))


# -- BaseEnv -------------------------------------------------------------------------------
class TestBaseEnv:
    async def test_satisfies_protocol(self) -> None:
        env = GuessEnv()
        assert isinstance(env, Env)
        assert isinstance(MaxTurns(env, 2), Env)
        assert env.spec is None and tuple(env.tools) == ()

    async def test_step_before_reset(self) -> None:
        env = GuessEnv()
        with pytest.raises(ResetNeeded, match=r"GuessEnv.step\(\) was called before reset\(\)"):
            await env.step(Message("assistant", "1"))

    async def test_step_after_terminal(self) -> None:
        env = GuessEnv()
        await env.reset(seed=1)
        result = await env.step(guess(env))
        assert result.terminated and result.reward == 1.0
        with pytest.raises(ResetNeeded, match="after the episode ended"):
            await env.step(guess(env))
        await env.reset(seed=1)  # a new episode may start
        assert env.turn == 0
        assert (await env.step(Message("assistant", "nope"))).reward == 0.0

    async def test_step_after_truncation_needs_reset(self) -> None:
        env = TruncatingEnv()
        await env.reset()
        assert not (await env.step(Message("assistant", "a"))).truncated
        assert (await env.step(Message("assistant", "a"))).truncated
        with pytest.raises(ResetNeeded):
            await env.step(Message("assistant", "a"))

    async def test_closed(self) -> None:
        env = GuessEnv()
        await env.reset(seed=0)
        await env.aclose()
        assert env.closed
        with pytest.raises(EnvClosedError, match=r"GuessEnv.step\(\) was called after aclose"):
            await env.step(Message("assistant", "1"))
        with pytest.raises(EnvClosedError, match=r"reset\(\)"):
            await env.reset()
        await env.aclose()  # twice is fine
        assert env.closes == 1
        assert issubclass(EnvClosedError, EnvStateError)
        assert issubclass(ResetNeeded, EnvStateError)

    async def test_async_with(self) -> None:
        async with GuessEnv() as env:
            obs, info = await env.reset(seed=3)
            assert [m.role for m in obs] == ["system", "user"]
            assert info["task_id"] == "guess"
        assert env.closed and env.closes == 1

    async def test_async_with_closes_on_error(self) -> None:
        env = GuessEnv()
        with pytest.raises(RuntimeError, match="inside"):
            async with env:
                raise RuntimeError("inside")
        assert env.closed

    async def test_seed_determinism(self) -> None:
        a, b = GuessEnv(), GuessEnv()
        targets = []
        for seed in (0, 0, 12345, np.int64(12345)):
            await a.reset(seed=seed)
            targets.append(a.target)
        assert targets[0] == targets[1] and targets[2] == targets[3]
        await b.reset(seed=0)
        assert b.target == targets[0]
        assert targets[0] == int(np.random.default_rng(0).integers(100))

    @pytest.mark.parametrize("seed", [-1, 1.5, "3", [1]])
    async def test_seed_validation(self, seed: Any) -> None:
        with pytest.raises(ValueError, match="seed must be a non-negative int or None"):
            await GuessEnv().reset(seed=seed)

    async def test_options_are_passed(self) -> None:
        env = GuessEnv()
        await env.reset(seed=0, options={"target": 42})
        assert env.target == 42
        assert (await env.step(Message("assistant", "42"))).terminated

    async def test_state_key_in_infos(self) -> None:
        env = GuessEnv()
        _, info = await env.reset(seed=0)
        assert info["state_key"] == "turn=0"
        result = await env.step(Message("assistant", "nope"))
        assert result.info["state_key"] == "turn=1"
        assert env.turn == 1

    async def test_env_state_key_is_not_overwritten(self) -> None:
        env = TruncatingEnv()
        await env.reset()
        assert (await env.step(Message("assistant", "a"))).info["state_key"] == "own"

    async def test_step_rejects_non_message(self) -> None:
        env = GuessEnv()
        await env.reset()
        with pytest.raises(TypeError, match=r'wrap text as Message\("assistant", text\)'):
            await env.step("42")  # type: ignore[arg-type]

    async def test_repr(self) -> None:
        assert repr(GuessEnv()) == "<GuessEnv GuessEnv>"


# -- MaxTurns ------------------------------------------------------------------------------
class TestMaxTurns:
    async def test_truncates_at_n(self) -> None:
        env = MaxTurns(GuessEnv(), 3)
        await env.reset(seed=0)
        results = [await env.step(Message("assistant", "nope")) for _ in range(3)]
        assert [(r.terminated, r.truncated) for r in results] == [(False, False)] * 2 + [
            (False, True)]
        assert results[-1].info["truncated_by"] == "max_turns"
        assert results[-1].info["state_key"] == "turn=3"
        assert "truncated_by" not in results[0].info
        with pytest.raises(ResetNeeded, match="MaxTurns.step"):
            await env.step(Message("assistant", "nope"))
        await env.reset(seed=0)
        assert not (await env.step(Message("assistant", "nope"))).truncated

    async def test_termination_on_last_turn_is_not_truncation(self) -> None:
        env = MaxTurns(GuessEnv(), 2)
        await env.reset(seed=0)
        await env.step(Message("assistant", "nope"))
        result = await env.step(guess(env))
        assert result.terminated and not result.truncated
        assert "truncated_by" not in result.info

    async def test_step_before_reset(self) -> None:
        with pytest.raises(ResetNeeded):
            await MaxTurns(GuessEnv(), 2).step(Message("assistant", "1"))

    @pytest.mark.parametrize("bad", [0, -1, 1.5, "3", None])
    def test_bad_max_turns(self, bad: Any) -> None:
        with pytest.raises(ValueError, match="max_turns must be a positive int"):
            MaxTurns(GuessEnv(), bad)

    async def test_forwards(self) -> None:
        inner = GuessEnv()
        env = MaxTurns(ObservationCap(inner, 100), 5)
        assert env.unwrapped is inner
        assert env.text == "guess a number"  # attribute forwarding
        assert env.spec is None and tuple(env.tools) == ()
        with pytest.raises(AttributeError):
            _ = env._private
        async with env:
            await env.reset(seed=0)
            assert env.turn == 0
        assert inner.closed
        await env.aclose()
        assert inner.closes == 1
        assert repr(env) == "<MaxTurns<ObservationCap<GuessEnv GuessEnv>>>"

    def test_uninitialised_wrapper_raises_attribute_error(self) -> None:
        bare = MaxTurns.__new__(MaxTurns)  # as copy/pickle protocols may build it
        with pytest.raises(AttributeError):
            _ = bare.anything


# -- ObservationCap and clean_text ---------------------------------------------------------
class TestObservationCap:
    async def test_caps_reset_and_step(self) -> None:
        env = ObservationCap(GuessEnv("x" * 30), 10)
        obs, _ = await env.reset(seed=0)
        assert obs[0].content == "rules"
        assert obs[1].content == "x" * 10 + TRUNCATION_MARKER.format(n=20)
        assert obs[1].content == "xxxxxxxxxx\n…[truncated 20 characters]"
        result = await env.step(Message("assistant", "nope"))
        assert result.observation[0].content == "x" * 10 + "\n…[truncated 20 characters]"
        assert isinstance(result.observation, tuple)
        assert result.info["state_key"] == "turn=1"

    async def test_cleans_invalid_text(self) -> None:
        bad = b"ok \xff\xfe end\x00!".decode("utf-8", "surrogateescape")
        env = ObservationCap(GuessEnv(bad), 1000)
        obs, _ = await env.reset(seed=0)
        assert obs[1].content == "ok \ufffd\ufffd end!"
        obs[1].content.encode("utf-8")  # valid UTF-8 now

    async def test_huge_observation(self) -> None:
        env = ObservationCap(GuessEnv("y" * 10_000_000), 16_000)
        obs, _ = await env.reset(seed=0)
        assert len(obs[1].content) < 16_100
        assert obs[1].content.endswith(f"[truncated {10_000_000 - 16_000} characters]")
        result = await env.step(Message("assistant", "nope"))
        assert result.observation[0].content.startswith("y" * 16_000 + "\n…")

    @pytest.mark.parametrize("bad", [0, -5, 2.0, None])
    def test_bad_max_chars(self, bad: Any) -> None:
        with pytest.raises(ValueError, match="max_chars must be a positive int"):
            ObservationCap(GuessEnv(), bad)


class TestCleanText:
    def test_lone_surrogates_become_replacement_chars(self) -> None:
        text = b"a\xff\xfeb".decode("utf-8", "surrogateescape")
        assert text == "a\udcff\udcfeb"
        assert clean_text(text) == "a\ufffd\ufffdb"
        assert clean_text("\ud83d lone high") == "\ufffd lone high"

    def test_nul_dropped_and_valid_text_kept(self) -> None:
        assert clean_text("a\x00b\x00") == "ab"
        assert clean_text("héllo 😀 世界") == "héllo 😀 世界"

    def test_bytes_and_other_objects(self) -> None:
        assert clean_text(b"caf\xc3\xa9 \xff") == "café \ufffd"
        assert clean_text(123) == "123"

    def test_cap(self) -> None:
        assert clean_text("abcdef", 6) == "abcdef"
        assert clean_text("abcdefg", 6) == "abcdef\n…[truncated 1 characters]"
        assert clean_text("abc", None) == "abc"
