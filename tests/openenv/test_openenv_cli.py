"""``agentgym openenv serve`` as a separate process, and ``rollout`` on an ``openenv:`` id."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys

import pytest
from process_fixtures import wait_until
from typer.testing import CliRunner

pytest.importorskip("openenv")

from agentgym.cli import app  # noqa: E402

SERVE = [sys.executable, "-m", "agentgym.cli", "openenv", "serve"]


def _url(server) -> str:
    found: list[str] = []

    def listening() -> bool:
        found[:] = re.findall(r"at (http://127\.0\.0\.1:\d+)", server.output())
        return bool(found)

    wait_until(listening, "the serving line", server)
    return found[0]


def _rollout(url: str, out) -> list[dict]:
    result = CliRunner().invoke(app, ["rollout", f"openenv:{url}", "--policy", "random",
                                      "--episodes", "4", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_rollout_over_the_served_env_then_errors_once_it_is_killed(spawn, tmp_path):
    server = spawn([*SERVE, "agentgym/Arithmetic-v0", "--kw", "split=test", "--port", "0"])
    url = _url(server)
    trajs = _rollout(url, tmp_path / "up.jsonl")
    assert [t["seed"] for t in trajs] == [0, 1, 2, 3]
    assert all(t["status"] != "error" and t["env_id"] == f"openenv:{url}" for t in trajs)
    assert trajs[0]["task_id"] == "arithmetic-test-0"  # the served kwargs and seed
    assert {t["name"] for t in trajs[0]["tools"]} == {"calculator", "answer"}
    server.signal(signal.SIGKILL)
    server.proc.wait()
    gone = _rollout(url, tmp_path / "down.jsonl")
    assert [(t["status"], t["outcome_reward"]) for t in gone] == [("error", None)] * 4
    assert all("OpenEnvFault" in t["error"] for t in gone)


@pytest.mark.parametrize(("argv", "message"), [
    (["agentgym/Arithmetic-v9"], "registered versions"),
    (["agentgym/Arithmetic-v0", "--kw", "splitt=test"], "did you mean"),
    (["agentgym/Arithmetic-v0", "--port", "70000"], "--port"),
])
def test_serve_mistakes_are_one_error_line(argv, message):
    proc = subprocess.run([*SERVE, *argv], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error:") and message in proc.stderr, proc.stderr
