"""Rewards judged by a model: a verifier that asks an OpenAI-compatible endpoint for a score.

``judge(base_url, model, rubric=...)`` returns a verifier (``ToolEnv(..., verifier=...)``)
that sends the rubric, the task's prompt, its reference answer (when the task has one) and
the submitted answer to ``POST {base_url}/chat/completions`` and reads the reply's last
``Score: N`` (N from 0 to ``scale``); the reward is ``N / scale``. Any server that speaks the
OpenAI chat API works: ``agentgym serve``, vLLM, a hosted API.

- **A fault is never a zero.** A judge that cannot be reached, answers an HTTP error, takes
  longer than ``timeout_s`` or writes no score it can read is asked again (``retries`` times,
  with a short back-off); after that the verifier raises :class:`JudgeError`, which ends the
  episode as an ``error`` trajectory (the trainer leaves those out), never as a reward of 0.
- **Cached**: one score per (model, rubric, task, answer), so a group of identical answers,
  or an answer seen again in a later epoch, costs one request. The cache is this process's
  and holds ``cache_size`` entries.
- **Deterministic by default**: temperature 0 and a fixed seed.

The verifier is async (``ToolEnv`` awaits it), so waiting for the judge never stalls the
event loop and the other episodes of a rollout.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp

from agentgym.errors import AgentGymError, ConfigError

if TYPE_CHECKING:
    from agentgym.tool_env import Task

__all__ = ["DEFAULT_RUBRIC", "Judge", "JudgeError", "judge", "parse_score"]

DEFAULT_RUBRIC = ("Judge whether the answer correctly and completely solves the task. Give 10 "
                  "for a fully correct answer, 0 for a wrong or empty one, and a score in "
                  "between for a partly correct one.")
_SCORE_RE = re.compile(r"score\s*[:=]?\s*\**\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)


class JudgeError(AgentGymError, RuntimeError):
    """The judge gave no score (unreachable, an error, too slow, unreadable).

    An infrastructure fault: the episode ends as an ``error`` trajectory.
    """


def parse_score(text: str, scale: float) -> float | None:
    """The last ``Score: N`` in ``text`` as a fraction of ``scale``.

    None when there is none, or it is outside ``[0, scale]``.
    """
    found = _SCORE_RE.findall(text)
    if not found:
        return None
    value = float(found[-1])
    return value / scale if 0 <= value <= scale else None


@dataclass(frozen=True)
class Judge:
    """The judge's settings (see the module docstring); call :func:`judge` for the verifier.

    Attributes:
        base_url: The endpoint's base, e.g. ``http://127.0.0.1:8000/v1``.
        model: The model id the endpoint serves.
        rubric: What a good answer is, in words.
        api_key: Sent as a bearer token when given.
        scale: The top score the judge is asked for.
        timeout_s: Most seconds one request may take.
        retries: Requests after the first one fails.
        max_tokens: Most tokens of the judge's reply.
        cache_size: Scores kept.
    """

    base_url: str
    model: str
    rubric: str = DEFAULT_RUBRIC
    api_key: str | None = None
    scale: float = 10.0
    timeout_s: float = 60.0
    retries: int = 2
    max_tokens: int = 64
    cache_size: int = 4096

    def __post_init__(self) -> None:
        if not isinstance(self.base_url, str) or not re.match(r"https?://", self.base_url):
            raise ConfigError(f"judge base_url must be an http(s) URL such as "
                              f"http://127.0.0.1:8000/v1, got {self.base_url!r}")
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError(f"judge model must be a non-empty string, got {self.model!r}")
        if not isinstance(self.rubric, str) or not self.rubric.strip():
            raise ConfigError("judge rubric must be a non-empty string")
        for name in ("scale", "timeout_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0 < value < float("inf")):
                raise ConfigError(f"judge {name} must be a positive number, got {value!r}")
        for name, low in (("retries", 0), ("max_tokens", 1), ("cache_size", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(f"judge {name} must be an int >= {low}, got {value!r}")


def judge(base_url: str, model: str, rubric: str | None = None, **settings: Any
          ) -> _JudgeVerifier:
    """A verifier ``async (answer, task) -> float in [0, 1]`` asking ``model`` at ``base_url``.

    Args:
        base_url: The OpenAI-compatible endpoint, e.g. ``http://127.0.0.1:8000/v1``.
        model: The judge model's id there.
        rubric: What a good answer is.
        **settings: Other :class:`Judge` fields (``timeout_s``, ``retries``, ``scale``, ...).

    Example:
        >>> from agentgym import ToolEnv  # doctest: +SKIP
        >>> env = ToolEnv(tasks, tools, verifier=judge("http://127.0.0.1:8000/v1", "smollm2"))
    """
    return _JudgeVerifier(Judge(base_url, model, rubric or DEFAULT_RUBRIC, **settings))


class _JudgeVerifier:
    """The callable :func:`judge` returns; keeps the score cache."""

    def __init__(self, config: Judge) -> None:
        self.config = config
        self.__name__ = f"judge({config.model})"
        self._cache: OrderedDict[str, float] = OrderedDict()
        self.requests = 0
        """Requests sent (cache hits send none)."""

    async def __call__(self, answer: str, task: Task) -> float:
        messages = self.messages(answer, task)
        key = hashlib.sha256(json.dumps([self.config.model, messages]).encode()).hexdigest()
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        failures = []
        for attempt in range(self.config.retries + 1):
            if attempt:
                await asyncio.sleep(min(0.5 * 2 ** (attempt - 1), 5.0))
            try:
                score = await self._ask(messages)
            except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
                continue
            if self.config.cache_size:
                self._cache[key] = score
                while len(self._cache) > self.config.cache_size:
                    self._cache.popitem(last=False)
            return score
        raise JudgeError(f"the judge {self.config.model!r} at {self.config.base_url} gave no "
                         f"score for task {task.id!r} in {len(failures)} request(s): "
                         + "; ".join(failures))

    def messages(self, answer: str, task: Task) -> list[dict[str, str]]:
        """The chat the judge reads."""
        scale = f"{self.config.scale:g}"
        reference = "" if task.answer is None else f"\n\nReference answer:\n{task.answer}"
        return [
            {"role": "system", "content": "You grade answers. " + self.config.rubric
             + f" End your reply with a line 'Score: N', N an integer from 0 to {scale}."},
            {"role": "user", "content": f"Task:\n{task.prompt}{reference}\n\nAnswer to "
             f"grade:\n{answer}\n\nGrade the answer. End with 'Score: N' (0 to {scale})."}]

    async def _ask(self, messages: list[dict[str, str]]) -> float:
        body = {"model": self.config.model, "messages": messages, "temperature": 0,
                "seed": 0, "max_tokens": self.config.max_tokens}
        headers = {"Authorization": f"Bearer {self.config.api_key}"} \
            if self.config.api_key else {}
        self.requests += 1
        timeout = aiohttp.ClientTimeout(total=self.config.timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session, session.post(
                self.config.base_url.rstrip("/") + "/chat/completions", json=body,
                headers=headers) as resp:
            text = await resp.text()
            if resp.status != 200:
                raise ValueError(f"HTTP {resp.status}: {text[:300]}")
        try:
            reply = json.loads(text)["choices"][0]["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ValueError(f"not an OpenAI chat reply ({exc}): {text[:300]}") from None
        score = parse_score(reply, self.config.scale)
        if score is None:
            raise ValueError(f"no 'Score: N' in [0, {self.config.scale:g}] in the reply "
                             f"{reply[-300:]!r}")
        return score
