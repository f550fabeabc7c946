"""The README's four commands, run as written: train → export → serve → an OpenAI request.

The commands are read from the README's "From a run to a served model" block. The train
command gets overrides that make it a one-step run of a tiny model, and the port is swapped
for 0 (the server picks a free one and prints it); everything else runs as a user would
type it.
"""

import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from process_fixtures import stop_and_wait, wait_until

ROOT = Path(__file__).parent.parent
CLI = [sys.executable, "-c", "from agentgym.cli import main; main()"]
SERVING = re.compile(r"serving .* at http://127\.0\.0\.1:(\d+)/")
COMMAND_S = 900
"""Bound on one command or request (a tiny model; minutes only on a loaded machine)."""


def readme_commands():
    text = (ROOT / "README.md").read_text()
    section = text.split("## From a run to a served model", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the README lost its train/export/serve/request block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def agentgym(line, extra=()):
    args = shlex.split(line)
    assert args[0] == "agentgym"
    return CLI + [a.replace("examples/", f"{ROOT}/examples/") for a in args[1:]] + list(extra)


def _answers(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            r.read()
        return True
    except OSError:  # not listening yet
        return False


def post(url, body):
    request = urllib.request.Request(url, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=COMMAND_S) as r:
        return json.loads(r.read())


@pytest.mark.slow
def test_readme_train_export_serve_request(tmp_path, tiny_model_dir, spawn):
    train, export, serve, request = readme_commands()
    assert train.startswith("agentgym train ") and export.startswith("agentgym export ")
    assert serve.startswith("agentgym serve ") and request.startswith("curl ")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    tiny = [f"model.path={tiny_model_dir}", "steps=1", "save_every=1", "env.eval_seeds=0",
            "rollout.tasks_per_step=2", "rollout.group_size=2", "rollout.max_tokens=4"]
    for line, extra in ((train, tiny), (export, [])):
        done = subprocess.run(agentgym(line, extra), cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=COMMAND_S)
        assert done.returncode == 0, done.stderr[-3000:]
    exported = tmp_path / shlex.split(export)[shlex.split(export).index("--out") + 1]
    assert (exported / "model.safetensors").is_file()

    # Port 0: the server takes a free port and prints it (no race with other servers here).
    server = spawn(agentgym(serve.replace("8000", "0")), env={**env, "COLUMNS": "200"},
                   cwd=tmp_path)
    wait_until(lambda: SERVING.search(server.output()) is not None, "'serving' line", server)
    port = SERVING.search(server.output()).group(1)  # type: ignore[union-attr]
    wait_until(lambda: _answers(f"http://127.0.0.1:{port}/health"), "answer on /health", server)
    curl = shlex.split(request.replace("8000", port))
    body = json.loads(curl[curl.index("-d") + 1])
    if shutil.which("curl"):
        done = subprocess.run(curl, capture_output=True, text=True, timeout=COMMAND_S)
        assert done.returncode == 0, done.stderr
        reply = json.loads(done.stdout)
    else:  # the same request without curl
        reply = post(f"http://127.0.0.1:{port}/v1/chat/completions", body)
    stop_and_wait(server, signal.SIGINT)  # a user's Ctrl-C; the fixture kills what remains
    text = reply["choices"][0]["message"]["content"]
    assert reply["model"] == body["model"] and reply["choices"][0]["token_ids"]

    # The served text is the exported model's own greedy answer.
    from agentgym.policies.base import GenerationRequest, SamplingParams
    from agentgym.policies.hf import TransformersPolicy
    from agentgym.types import Message

    policy = TransformersPolicy.load(str(exported))
    own = asyncio.run(policy.generate([GenerationRequest(
        tuple(Message(m["role"], m["content"]) for m in body["messages"]),
        params=SamplingParams(temperature=0.0, max_tokens=body["max_tokens"]))]))[0]
    asyncio.run(policy.aclose())
    assert text == own.text
