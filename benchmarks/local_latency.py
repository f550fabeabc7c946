"""Local sandbox and Python interpreter latency: command and cell round trips, starts.

    python benchmarks/local_latency.py [--execs 300] [--starts 20] [--cells 300]

exec = ``LocalSandbox.exec("true")`` end to end (bash started in its own session, guarded,
its pipes read to their end, its group and marked processes killed, reaped); 10 MB out =
``exec("head -c 10000000 /dev/zero")``, read and cut to the 1 MB cap; interpreter start =
a ``PythonInterpreter`` started, one cell run and closed; cell = one more cell (``x = 1``)
in a running interpreter.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from results import latency_row, write_section


async def timed(times: list[float], step) -> None:  # noqa: ANN001 - an async callable
    t = time.perf_counter()
    await step()
    times.append(time.perf_counter() - t)


async def measure(execs: int, starts: int, cells: int) -> dict[str, list[float]]:
    from agentgym.sandboxes.interpreter import PythonInterpreter
    from agentgym.sandboxes.local import LocalSandbox

    out: dict[str, list[float]] = {"exec": [], "big": [], "start": [], "cell": []}
    async with LocalSandbox() as box:
        for _ in range(10):  # warm up
            await box.exec("true")
        for _ in range(execs):
            await timed(out["exec"], lambda: box.exec("true"))
        for _ in range(max(execs // 30, 3)):
            await timed(out["big"], lambda: box.exec("head -c 10000000 /dev/zero"))

    async def start_run_close() -> None:
        async with PythonInterpreter() as py:
            await py.run("1")

    for _ in range(starts):
        await timed(out["start"], start_run_close)
    async with PythonInterpreter() as py:
        await py.run("1")
        for _ in range(cells):
            await timed(out["cell"], lambda: py.run("x = 1"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--execs", type=int, default=300, help="exec round trips")
    ap.add_argument("--starts", type=int, default=20, help="interpreter starts")
    ap.add_argument("--cells", type=int, default=300, help="cell round trips")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    out = asyncio.run(measure(args.execs, args.starts, args.cells))
    lines = ["| operation | n | p50 ms | p95 ms | mean ms |", "|---|---:|---:|---:|---:|",
             latency_row("`LocalSandbox.exec(\"true\")`", out["exec"], 2),
             latency_row("`exec` of 10 MB of output (cut to the 1 MB cap)", out["big"], 2),
             latency_row("`PythonInterpreter` start + one cell + close", out["start"], 2),
             latency_row("one more cell (`x = 1`)", out["cell"], 2)]
    body = "\n".join([
        "Command: `python benchmarks/local_latency.py "
        f"--execs {args.execs} --starts {args.starts} --cells {args.cells}`", "",
        f"Load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end.", "",
        *lines])
    print(body)
    write_section("Local sandbox and interpreter latency", body)


if __name__ == "__main__":
    main()
