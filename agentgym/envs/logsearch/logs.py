"""Generated server logs for LogSearch: a pure function of a random generator.

A task is one failed checkout traced through four services. Its needle lines, in time order:

    gateway   req=<R> accepted client=<IP> path=/api/checkout
    orders    req=<R> created order=<O>
    payments  order=<O> charge queued job=<J> worker=<W>
    <W>       job=<J> failed code=<E>

Decoy chains of the same shape (other clients, ids and codes) and plenty of ordinary traffic
fill every file, so a search for a line's *kind* ("failed code") finds dozens of lines and
only following the ids leads to the answer E.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

WORKERS = ("worker-1", "worker-2", "worker-3", "worker-4")
SERVICES = ("gateway", "auth", "orders", "payments", "inventory", *WORKERS)
_HANDLERS = ("GetCart", "ListItems", "UpdateProfile", "Search", "GetPrice", "Health")


@dataclass(frozen=True)
class Chain:
    """The ids of one traced request."""

    ip: str
    req: str
    order: str
    job: str
    worker: str
    code: str


@dataclass(frozen=True)
class LogSet:
    """Log files (name -> lines) and the traced request whose error code is the answer."""

    files: dict[str, tuple[str, ...]]
    target: Chain


def _hex(rng: np.random.Generator) -> str:
    return f"{int(rng.integers(16**6)):06x}"


def _chain(rng: np.random.Generator, used: set[str]) -> Chain:
    while True:
        ip = f"10.{rng.integers(1, 255)}.{rng.integers(0, 255)}.{rng.integers(1, 255)}"
        chain = Chain(ip, _hex(rng), f"O-{rng.integers(10_000, 99_999)}",
                      f"J-{rng.integers(10_000, 99_999)}", str(rng.choice(WORKERS)),
                      f"E-{rng.integers(1000, 9999)}")
        ids = {chain.ip, chain.req, chain.order, chain.job}
        if not ids & used:
            used |= ids
            return chain


def _noise(rng: random.Random, service: str, used: set[str]) -> str:
    user, latency = f"u{rng.randrange(10_000, 99_999)}", rng.randrange(2, 900)
    req = f"{rng.randrange(16**6):06x}"
    while req in used:  # a noise id never equals a traced one
        req = f"{rng.randrange(16**6):06x}"
    kind = rng.random()
    if kind < 0.7:
        return (f"INFO  req={req} handler={rng.choice(_HANDLERS)} user={user} "
                f"latency_ms={latency} status=200 bytes={rng.randrange(200, 90_000)}")
    if kind < 0.85:
        return (f"WARN  req={req} slow upstream call to {rng.choice(SERVICES)} took "
                f"{latency * 7} ms (budget 1500 ms) user={user}")
    if kind < 0.95:
        return (f"DEBUG cache stats hits={rng.randrange(1000, 9999)} misses="
                f"{rng.randrange(10, 999)} evictions={rng.randrange(0, 99)} "
                f"pool={service}-{rng.randrange(1, 9)}")
    return f"ERROR req={req} upstream timeout after 1500 ms user={user} retry={rng.randrange(1, 4)}"


def generate(rng: np.random.Generator, lines_per_file: int, decoys: int) -> LogSet:
    """The log files of one task (deterministic in ``rng``)."""
    if lines_per_file < 20:
        raise ValueError(f"lines_per_file must be >= 20, got {lines_per_file}")
    used: set[str] = set()
    chains = [_chain(rng, used) for _ in range(decoys + 1)]
    # Events: (second of the day, service, text). Every chain's hops are a few seconds apart.
    events: list[tuple[int, str, str]] = []
    for c in chains:
        t = int(rng.integers(8 * 3600, 10 * 3600 - 60))
        events += [
            (t, "gateway", f"INFO  req={c.req} accepted client={c.ip} path=/api/checkout "
                           "method=POST"),
            (t + 1, "orders", f"INFO  req={c.req} created order={c.order} "
                              f"items={int(rng.integers(1, 9))} "
                              f"total_cents={int(rng.integers(500, 99_999))}"),
            (t + 2, "payments", f"INFO  order={c.order} charge queued job={c.job} "
                                f"worker={c.worker}"),
            (t + 3 + int(rng.integers(0, 20)), c.worker,
             f"ERROR job={c.job} failed code={c.code} retries=3"),
        ]
    fast = random.Random(int(rng.integers(2**63)))  # noise: thousands of draws, kept cheap
    for service in SERVICES:
        have = sum(1 for e in events if e[1] == service)
        for _ in range(max(lines_per_file - have, 0)):
            events.append((fast.randrange(8 * 3600, 10 * 3600), service,
                           _noise(fast, service, used)))
    files: dict[str, list[str]] = {f"{s}.log": [] for s in SERVICES}
    for second, service, text in sorted(events, key=lambda e: e[0]):
        ms = fast.randrange(1000)
        hour, minute = divmod(second // 60, 60)
        stamp = f"2025-03-14T{hour:02d}:{minute:02d}:{second % 60:02d}.{ms:03d}Z"
        files[f"{service}.log"].append(f"{stamp} {service} {text}")
    return LogSet({k: tuple(v) for k, v in files.items()}, chains[0])
