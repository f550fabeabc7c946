"""ToolEnv overhead per tool call, and code-interpreter call latency.

1. Round trip of one tool call through ``ToolEnv.step`` (parse or read the call, validate
   its arguments against the JSON schema, run the tool with its timeout, render the result,
   update the state fingerprint), minus the cost of calling the tool function directly: the
   machinery's own overhead. Measured for an async tool, a sync tool run inline and a sync
   tool run in a daemon thread (the default), with structured calls and with Hermes text.
2. Latency of the ``python`` tool of ``agentgym/CodeMath-v0`` (a persistent interpreter in
   its own process and network namespace): p50/p95 of a small cell through the env, the
   same through ``PythonInterpreter.run`` directly, and the interpreter's cold start.

    python benchmarks/tool_env_overhead.py [--calls 5000] [--cells 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import time

from results import write_section

import agentgym
from agentgym import Message, ToolCall, ToolEnv
from agentgym.sandboxes.interpreter import PythonInterpreter


async def anoop(x: int) -> int:
    """Return x.

    Args:
        x: A number.
    """
    return x


def noop(x: int) -> int:
    """Return x.

    Args:
        x: A number.
    """
    return x


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def overhead(fn, sync_tools: str, action: Message, calls: int) -> tuple[float, float]:
    """Median (CPU µs, wall µs) per step over 5 repeats, minus the direct call of ``fn``.

    CPU time of this process (``time.process_time``; the daemon threads of the thread mode
    count too) is the figure to read: on a shared machine wall time mostly measures waiting
    for a core.
    """
    env = ToolEnv([{"prompt": "p", "answer": 1}], [fn], sync_tools=sync_tools)
    await env.reset(seed=0)
    for _ in range(200):  # warm up
        await env.step(action)

    async def per_call(body) -> tuple[float, float]:
        cpu, wall = [], []
        for _ in range(5):
            c, w = time.process_time(), time.perf_counter()
            for _ in range(calls):
                await body()
            cpu.append((time.process_time() - c) / calls)
            wall.append((time.perf_counter() - w) / calls)
        return statistics.median(cpu), statistics.median(wall)

    async def direct():
        value = fn(x=1)
        if asyncio.iscoroutine(value):
            await value

    env_cpu, env_wall = await per_call(lambda: env.step(action))
    fn_cpu, fn_wall = await per_call(direct)
    await env.aclose()
    return (env_cpu - fn_cpu) * 1e6, (env_wall - fn_wall) * 1e6


async def code_latency(cells: int) -> dict[str, float]:
    env = agentgym.make("agentgym/CodeMath-v0", max_turns=cells + 10)
    await env.reset(seed=0)
    cell = ToolCall("c", "python", {"code": "x = sum(range(100))\nx"})
    action = Message("assistant", "", (cell,))
    start = time.perf_counter()
    await env.step(action)  # starts the interpreter
    cold = time.perf_counter() - start
    through_env = []
    for _ in range(cells):
        start = time.perf_counter()
        result = await env.step(action)
        through_env.append(time.perf_counter() - start)
    assert result.observation[0].content == "4950", result
    await env.aclose()
    direct = []
    async with PythonInterpreter() as py:
        await py.run("1")
        for _ in range(cells):
            start = time.perf_counter()
            await py.run("x = sum(range(100))\nx")
            direct.append(time.perf_counter() - start)
        isolation = py.isolation
    ms = 1e3
    return {"cold": cold * ms, "env_p50": pct(through_env, .5) * ms,
            "env_p95": pct(through_env, .95) * ms, "direct_p50": pct(direct, .5) * ms,
            "direct_p95": pct(direct, .95) * ms, "isolation": isolation}


async def main(calls: int, cells: int) -> str:
    structured = Message("assistant", "", (ToolCall("c", "anoop", {"x": 1}),))
    structured_sync = Message("assistant", "", (ToolCall("c", "noop", {"x": 1}),))
    hermes = Message("assistant", '<tool_call>{"name": "noop", "arguments": {"x": 1}}</tool_call>')
    rows = [
        ("async tool, structured call", await overhead(anoop, "thread", structured, calls)),
        ("sync tool inline, structured call", await overhead(noop, "inline", structured_sync,
                                                             calls)),
        ("sync tool inline, Hermes text call", await overhead(noop, "inline", hermes, calls)),
        ("sync tool in a thread (default), structured call",
         await overhead(noop, "thread", structured_sync, max(200, calls // 5))),
    ]
    code = await code_latency(cells)
    load = os.getloadavg()[0]
    lines = [
        "`python benchmarks/tool_env_overhead.py"
        f" --calls {calls} --cells {cells}` on {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}. Figures were taken on a "
        f"shared machine (1-minute load average {load:.1f} on {os.cpu_count()} cores while "
        "other jobs ran), so they are upper bounds.",
        "",
        "ToolEnv overhead per tool call (one `step` with one call, minus calling the function "
        "directly; CPU time of the process, median of 5 runs; target < 100 µs):",
        "",
        "| call | CPU µs | wall µs |",
        "|---|---:|---:|",
        *[f"| {name} | {cpu:.0f} | {wall:.0f} |" for name, (cpu, wall) in rows],
        "",
        f"Code tool (`agentgym/CodeMath-v0`, isolation `{code['isolation']}`), a small cell "
        f"(`x = sum(range(100))`), {cells} calls:",
        "",
        "| path | p50 (ms) | p95 (ms) |",
        "|---|---:|---:|",
        f"| `python` tool through `env.step` | {code['env_p50']:.2f} | {code['env_p95']:.2f} |",
        f"| `PythonInterpreter.run` directly | {code['direct_p50']:.2f} | "
        f"{code['direct_p95']:.2f} |",
        "",
        f"Interpreter cold start (first call of an episode, process + network namespace): "
        f"{code['cold']:.0f} ms.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--cells", type=int, default=200)
    args = parser.parse_args()
    body = asyncio.run(main(args.calls, args.cells))
    print(body)
    write_section("Tool-call overhead (ToolEnv) and code-tool latency", body)
