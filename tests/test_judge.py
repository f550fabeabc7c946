"""The judge verifier: a score read from an OpenAI-compatible endpoint, cached; a judge that
fails, stalls or writes no score is retried and then ends the episode as an error trajectory,
never a reward of 0 (small aiohttp servers on 127.0.0.1, and the real ``agentgym serve``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from process_fixtures import Started, end_group, wait_until

from agentgym import Message, ToolEnv
from agentgym.errors import ConfigError
from agentgym.judge import JudgeError, judge, parse_score
from agentgym.rollout import RolloutConfig, run_groups
from agentgym.tool_env import Task
from agentgym.verifiers import resolve

TASK = Task("capital", "What is the capital of France?", "Paris")


def lookup(city: str) -> str:
    """Look a city up.

    Args:
        city: The city.
    """
    return city
Reply = tuple[int, str, float]  # status, the judge's text, seconds before answering


@contextlib.asynccontextmanager
async def endpoint(*replies: Reply) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A chat endpoint answering ``replies`` in turn (the last one again and again)."""
    seen: list[dict[str, Any]] = []

    async def chat(request: web.Request) -> web.Response:
        seen.append(await request.json())
        status, text, delay = replies[min(len(seen), len(replies)) - 1]
        await asyncio.sleep(delay)
        if status != 200:
            return web.json_response({"error": {"message": text}}, status=status)
        return web.json_response({"choices": [{"index": 0, "finish_reason": "stop",
                                               "message": {"role": "assistant",
                                                           "content": text}}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("/v1")), seen
    finally:
        await server.close()


async def test_a_score_is_read_and_cached() -> None:
    async with endpoint((200, "It names Paris.\nScore: 7", 0)) as (url, seen):
        verify = judge(url, "grader", "Full marks for the right city.")
        assert await verify("Paris", TASK) == 0.7
        assert await verify("Paris", TASK) == 0.7  # the same answer: from the cache
        assert await verify("Lyon", TASK) == 0.7
    assert len(seen) == 2 and verify.requests == 2
    body = seen[0]
    assert body["model"] == "grader" and body["temperature"] == 0
    text = "\n".join(m["content"] for m in body["messages"])
    for part in ("Full marks for the right city.", TASK.prompt, "Reference answer:\nParis",
                 "Answer to grade:\nParis", "Score: N"):
        assert part in text


async def test_an_unreadable_reply_is_asked_again() -> None:
    async with endpoint((200, "A fine answer.", 0), (200, "**Score:** 10", 0)) as (url, seen):
        assert await judge(url, "grader")("Paris", TASK) == 1.0
    assert len(seen) == 2


@pytest.mark.parametrize(("reply", "needle"), [
    ((500, "the judge model is not loaded", 0), "HTTP 500"),
    ((200, "Looks right to me.", 0), "no 'Score: N'"),
    ((200, "Score: 11", 0), "no 'Score: N' in [0, 10]"),
    ((200, "Score: 9", 30), "TimeoutError"),
])
async def test_a_judge_fault_raises_after_its_retries(reply: Reply, needle: str) -> None:
    async with endpoint(reply) as (url, seen):
        verify = judge(url, "grader", retries=1, timeout_s=0.5)
        with pytest.raises(JudgeError, match="gave no score") as info:
            await verify("Paris", TASK)
    assert needle in str(info.value) and len(seen) == 2  # the first request and one retry
    assert verify.requests == 2


async def test_an_unreachable_judge_raises() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nobody listens there
    with pytest.raises(JudgeError, match="gave no score"):
        await judge(f"http://127.0.0.1:{port}/v1", "grader", retries=0)("Paris", TASK)


class Answers:
    """An agent that answers every task with ``text``."""

    def __init__(self, text: str) -> None:
        self.text = text

    def start(self, prompt: Any, env: Any) -> Any:
        text = self.text

        class Episode:
            async def act(self) -> tuple[Message, None]:
                return Message("assistant", f"<answer>{text}</answer>"), None

            def observe(self, obs: Any) -> None:
                pass

        return Episode()


async def test_a_judge_fault_is_an_error_trajectory_never_a_zero() -> None:
    async with endpoint((200, "Score: 8", 0)) as (good, _), \
            endpoint((503, "overloaded", 0)) as (bad, _):
        def env_for(url: str) -> ToolEnv:
            return ToolEnv([TASK], [lookup], verifier=judge(url, "grader", retries=1))

        config = RolloutConfig(max_steps=2)
        (scored,) = await run_groups(lambda: env_for(good), Answers("Paris"), seeds=[0],
                                     config=config)
        (failed,) = await run_groups(lambda: env_for(bad), Answers("Paris"), seeds=[0],
                                     config=config)
    assert scored.status != "error" and scored.outcome_reward == 0.8
    assert failed.status == "error" and failed.outcome_reward is None
    assert "JudgeError" in (failed.error or "") and "HTTP 503" in (failed.error or "")


def test_scores_are_parsed_from_the_last_score_line() -> None:
    assert parse_score("Score: 3\nOn reflection... Score: 6", 10) == 0.6
    assert parse_score("score = 4.5", 5) == 0.9
    assert parse_score("SCORE: **0**", 10) == 0.0
    assert parse_score("I give it 7/10", 10) is None
    assert parse_score("Score: -1", 10) is None


def test_bad_settings_and_the_registered_name(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="http"):
        judge("localhost:8000", "grader")
    with pytest.raises(ConfigError, match="retries"):
        judge("http://127.0.0.1:1/v1", "grader", retries=-1)
    with pytest.raises(ConfigError, match="timeout_s"):
        judge("http://127.0.0.1:1/v1", "grader", timeout_s=float("inf"))
    monkeypatch.delenv("AGENTGYM_JUDGE_URL", raising=False)
    with pytest.raises(ConfigError, match="AGENTGYM_JUDGE_URL"):
        resolve("judge")
    monkeypatch.setenv("AGENTGYM_JUDGE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("AGENTGYM_JUDGE_MODEL", "grader")
    assert resolve("judge").config.model == "grader"  # type: ignore[attr-defined]


# -- the real server -------------------------------------------------------------------------

SERVING = re.compile(r"serving .* at (http://127\.0\.0\.1:\d+/v1)")


@pytest.fixture(scope="module")
def smollm2_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``agentgym serve smollm2`` on a free port (a subprocess, always ended)."""
    pytest.importorskip("torch")
    log = tmp_path_factory.mktemp("judge") / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from agentgym.cli import main; main()", "serve", "smollm2",
             "--port", "0"], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "COLUMNS": "200"}, start_new_session=True)
    started = Started(proc, log)
    try:
        wait_until(lambda: SERVING.search(started.output()) is not None, "'serving' line",
                   started)
        yield SERVING.search(started.output()).group(1)  # type: ignore[union-attr]
    finally:
        end_group(proc)


async def test_the_real_server_as_judge_and_a_model_that_writes_no_score(smollm2_server: str
                                                                        ) -> None:
    """SmolLM2-135M does not follow the score format (its greedy reply names the answer), so
    the judge's replies from the real server are read, found to hold no score, asked again,
    and the episode ends as an error trajectory, not as a reward of 0."""
    verify = judge(smollm2_server, "smollm2", retries=1)
    (traj,) = await run_groups(lambda: ToolEnv([TASK], [lookup], verifier=verify),
                               Answers("Paris"), seeds=[0], config=RolloutConfig(max_steps=2))
    assert traj.status == "error" and traj.outcome_reward is None
    assert "no 'Score: N' in [0, 10] in the reply" in (traj.error or "")
    assert "Paris" in (traj.error or "")  # what the model wrote, quoted in the error
    assert verify.requests == 2
