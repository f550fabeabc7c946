"""MCPEnv against real MCP server processes (stdio and streamable HTTP)."""

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

import agentgym
from agentgym import Message, ToolCall
from agentgym.envs.mcp import MCPEnv
from agentgym.rollout import RolloutConfig, run_groups
from agentgym.tool_env import ToolFault

pytest.importorskip("mcp")

SERVER = textwrap.dedent('''
    import os, sys, time
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("test-notes", log_level="ERROR")
    notes = []

    @server.tool()
    def add_note(text: str) -> str:
        """Store a note."""
        notes.append(text)
        return f"stored {len(notes)} notes"

    @server.tool()
    def count_notes() -> int:
        """How many notes are stored."""
        return len(notes)

    @server.tool()
    def fail(reason: str) -> str:
        """Always fails."""
        raise ToolError(f"refused: {reason}")

    @server.tool()
    def die() -> str:
        """Kill the server process."""
        os._exit(3)

    @server.tool()
    def hang() -> str:
        """Never returns."""
        time.sleep(3600)
        return "late"

    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
''')
TASKS = [{"id": "two-notes", "prompt": "Store two notes, then say how many are stored.",
          "answer": 2}]


def call(name, **args):
    return Message("assistant", "", tool_calls=(ToolCall("c0", name, args),))


@pytest.fixture(scope="module")
def server_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("mcp") / "server.py"
    path.write_text(SERVER)
    return path


def make(server_file, **kw):
    return MCPEnv([sys.executable, str(server_file)], TASKS, verifier="numeric",
                  call_timeout=kw.pop("call_timeout", 20.0), **kw)


async def test_stdio_tools_state_and_errors(server_file):
    async with make(server_file, call_timeout=2.0) as env:
        await env.reset(seed=0)
        assert {t.name for t in env.tools} == {"add_note", "count_notes", "fail", "die", "hang",
                                               "final_answer"}
        assert (await env.step(call("add_note", text="a"))).observation[0].content == \
            "stored 1 notes"
        r = await env.step(call("fail", reason="no"))
        assert not r.valid and "refused: no" in r.observation[0].content
        r = await env.step(call("add_note", text=7))  # wrong type: caught before the server
        assert not r.valid and "is not of type 'string'" in r.observation[0].content
        r = await env.step(call("add_note"))
        assert not r.valid and "'text' is a required property" in r.observation[0].content
        r = await env.step(call("hang"))
        assert not r.valid and "timed out" in r.observation[0].content
        await env.step(call("add_note", text="b"))
        assert (await env.step(call("count_notes"))).observation[0].content == "2"
        r = await env.step(call("final_answer", answer="2"))
        assert r.terminated and r.reward == 1.0
        await env.reset(seed=0)  # a fresh server process: the notes are gone
        assert (await env.step(call("count_notes"))).observation[0].content == "0"


async def test_server_dying_mid_episode_is_an_error_trajectory_not_a_crash(server_file):
    env = make(server_file)
    await env.reset(seed=0)
    with pytest.raises(ToolFault, match="failed during die|not connected"):
        await env.step(call("die"))
    await env.aclose()

    class DieAgent:  # calls die() in one episode of the batch, add_note in the other
        n = 0

        def start(self, prompt, env):
            DieAgent.n += 1
            tool = "die" if DieAgent.n == 1 else "add_note"
            args = {} if tool == "die" else {"text": "x"}

            class Ep:
                async def act(self):
                    return call(tool, **args), None

                def observe(self, obs):
                    pass
            return Ep()

    trajs = await run_groups(lambda: make(server_file), DieAgent(), seeds=[0],
                             config=RolloutConfig(group_size=2, max_steps=2))
    statuses = sorted(t.status for t in trajs)
    assert statuses == ["error", "truncated"], [t.error for t in trajs]
    err = next(t for t in trajs if t.status == "error")
    assert err.outcome_reward is None and "MCP server" in err.error


async def test_unstartable_server_is_a_fault(tmp_path):
    env = MCPEnv([sys.executable, "-c", "import sys; sys.exit(1)"], TASKS, connect_timeout=20)
    with pytest.raises(ToolFault, match="could not connect"):
        await env.reset(seed=0)
    await env.aclose()


@pytest.mark.slow
async def test_streamable_http_server(server_file):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(  # noqa: ASYNC220 - a server that outlives the awaits below
        [sys.executable, str(server_file), "http", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300  # a bound on a hang, not a start-up time check
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None, "the MCP server exited before listening"
            await asyncio.sleep(0.2)
        env = MCPEnv(f"http://127.0.0.1:{port}/mcp", TASKS, verifier="numeric")
        async with env:
            await env.reset(seed=0)
            await env.step(call("add_note", text="a"))
            await env.step(call("add_note", text="b"))
            r = await env.step(call("count_notes"))
            assert r.observation[0].content == "2"
            r = await env.step(Message("assistant", "<answer>2</answer>"))
            assert r.reward == 1.0
        os.killpg(proc.pid, signal.SIGKILL)  # the server dies between episodes
        proc.wait()
        env = MCPEnv(f"http://127.0.0.1:{port}/mcp", TASKS, connect_timeout=10)
        with pytest.raises(ToolFault):
            await env.reset(seed=0)
        await env.aclose()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def test_registered_inventory_env_expert_solves():
    env = agentgym.make("agentgym/MCPInventory-v0", split="test")
    try:
        _, info = await env.reset(seed=3)
        while True:
            r = await env.step(env.expert_action())
            if r.done:
                break
        assert r.terminated and r.reward == 1.0, r
    finally:
        await env.aclose()
