"""`agentgym eval` on BFCL through an OpenAI-compatible server (a stub on 127.0.0.1).

The stub answers each single-turn question with BFCL's ground truth as OpenAI ``tool_calls``
(looked up by the question text) and multi-turn requests with plain text, so the test checks
the whole path: tools sent in OpenAI form, calls read back from the server's reply, BFCL's
checker on them, per-category results under the leaderboard's names.
"""

import asyncio
import json
import re

import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

from agentgym.envs.bfcl import CATEGORIES, data, scoring
from agentgym.envs.bfcl.leaderboard import MEAN_LABEL, bfcl_accuracies
from agentgym.evaluation.runner import EvalConfig, evaluate

TASKS = 3
SINGLE = ("simple_python", "parallel_multiple", "live_irrelevance")


def gold_by_question():
    answers = {}
    for category in SINGLE:
        for task_id in data.task_ids(category)[:TASKS]:
            task = data.get_task(category, task_id=task_id)
            question = task.entry["question"][0][-1]["content"]
            answers[question] = scoring.gold_single(task)
    return answers


def stub_app(answers, seen_tools):
    async def models(_request):
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def chat(request):
        body = await request.json()
        seen_tools.extend(t["function"]["name"] for t in body.get("tools", []))
        last_user = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
        calls = answers.get(last_user, ())
        message = {"role": "assistant", "content": "" if calls else "Nothing to call."}
        if calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": json.dumps(dict(c.arguments))}}
                for c in calls]
        return web.json_response({
            "id": "x", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def test_eval_through_an_openai_compatible_server(tmp_path):
    entries = [{"env": "bfcl/SingleTurn-v0", "name": CATEGORIES[c].label, "tasks": TASKS,
                "kwargs": {"category": c}} for c in SINGLE]
    entries.append({"env": "bfcl/MultiTurn-v0", "name": "Multi Turn Base", "tasks": 1,
                    "kwargs": {"category": "multi_turn_base"}})
    suite_file = tmp_path / "bfcl-openai-test.yaml"  # a file, so no suite is registered
    suite_file.write_text(yaml.safe_dump({"name": "bfcl-openai-test", "version": 1,
                                          "entries": entries}))
    seen_tools = []
    async with TestServer(stub_app(gold_by_question(), seen_tools), host="127.0.0.1") as server:
        url = str(server.make_url("/v1")).rstrip("/")
        config = EvalConfig(suite=str(suite_file), policy=f"openai:{url}", model="m",
                            concurrency=2)
        results = await asyncio.to_thread(evaluate, config, tmp_path / "out",
                                          log=lambda _m: None)
    assert results["metrics"]["overall"]["errors"] == 0
    acc = bfcl_accuracies(results)
    assert [acc[CATEGORIES[c].label] for c in SINGLE] == [1.0, 1.0, 1.0]
    assert acc["Multi Turn Base"] == 0.0 and MEAN_LABEL in acc
    assert seen_tools and all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", n) for n in seen_tools)
