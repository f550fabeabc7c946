"""Web envs: steps/s of the browser and text modes at 1, 8 and 32 concurrent episodes,
memory per concurrent browser episode, and the two modes side by side on the same tasks.

Every episode is played by the oracle (``expert_action``), so the figures measure the envs,
not a model. Each concurrent worker owns one env and plays episodes back to back; the shop
server and Chromium are started before timing (one of each, shared by all episodes, as in a
rollout). Memory is the proportional set size (PSS, shared pages split between processes)
of every browser process, with N episodes open on a product page, minus that with none.

    python benchmarks/web_envs.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import time

from results import write_section

from agentgym.envs.web import WebShopEnv, WebShopTextEnv
from agentgym.envs.web.shared import browser_processes, shared

CONCURRENCY = (1, 8, 32)
CATALOG = (0, 5000)
TIMEOUT = 120.0  # seconds per browser action: generous, so a loaded machine slows, not fails


async def _episode(env, seed: int) -> tuple[int, float]:
    await env.reset(seed=seed)
    for steps in range(1, 40):
        result = await env.step(env.expert_action())
        if result.done:
            return steps, float(result.reward)
    raise RuntimeError(f"the oracle did not finish task {seed}")


async def throughput(make, concurrency: int, episodes: int) -> dict[str, float]:
    """Steps/s with ``concurrency`` workers playing ``episodes`` episodes in all."""
    envs = [make() for _ in range(concurrency)]
    seeds = iter(range(episodes))
    steps, rewards = [], []

    async def worker(env) -> None:
        for seed in seeds:  # shared iterator: workers take the next task as they free up
            n, reward = await _episode(env, seed)
            steps.append(n)
            rewards.append(reward)

    try:
        await asyncio.gather(*(env.reset(seed=0) for env in envs))  # contexts warm
        start = time.perf_counter()
        await asyncio.gather(*(worker(env) for env in envs))
        wall = time.perf_counter() - start
    finally:
        await asyncio.gather(*(env.aclose() for env in envs))
    return {"steps_per_s": sum(steps) / wall, "episodes": len(steps), "wall_s": wall,
            "steps_per_episode": statistics.mean(steps),
            "s_per_episode": wall * concurrency / len(steps),
            "mean_reward": statistics.mean(rewards)}


def _pss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
        except (OSError, StopIteration):
            continue
    return total / 1024


async def memory(counts: tuple[int, ...]) -> list[tuple[int, dict[str, float]]]:
    """PSS of the browser processes with N episodes open on a product page, N in counts."""
    await asyncio.sleep(2.0)
    base = _pss_mib(browser_processes())
    envs: list[WebShopEnv] = []
    rows = []
    try:
        for n in counts:
            while len(envs) < n:
                env = WebShopEnv(catalog_size=CATALOG[1], action_timeout=TIMEOUT)
                envs.append(env)
                await env.reset(seed=len(envs))
                for _ in range(3):  # type the query, search, open the product: a typical page
                    await env.step(env.expert_action())
            await asyncio.sleep(2.0)
            used = _pss_mib(browser_processes())
            rows.append((n, {"base_mib": base, "total_mib": used,
                             "per_episode_mib": (used - base) / n}))
            print(f"memory with {n} episodes: {rows[-1][1]}")
    finally:
        await asyncio.gather(*(env.aclose() for env in envs))
    return rows


async def main(quick: bool) -> None:
    pools = shared()
    site = await pools.sites.acquire(CATALOG)
    browser = await pools.browsers.acquire("chromium")
    rows = []
    load = os.getloadavg()[0]
    try:
        mem_rows = await memory((1, 8) if quick else CONCURRENCY)  # on a fresh browser
        for c in CONCURRENCY:
            text = await throughput(lambda: WebShopTextEnv(catalog_size=CATALOG[1]), c,
                                    max(4 * c, 16 if quick else 64))
            web = await throughput(
                lambda: WebShopEnv(catalog_size=CATALOG[1], action_timeout=TIMEOUT), c,
                c if quick else max(c, 8))
            rows.append((c, text, web))
            print(f"concurrency {c}: text {text['steps_per_s']:.0f} steps/s, browser "
                  f"{web['steps_per_s']:.1f} steps/s")
    finally:
        await pools.browsers.release("chromium", browser)
        await pools.sites.release(CATALOG, site)
    _write(rows, mem_rows, quick, load)


def _write(rows, mem_rows, quick: bool, load: float) -> None:
    lines = [
        "Command: `python benchmarks/web_envs.py" + (" --quick`" if quick else "`"),
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores, Chromium headless; figures "
        f"taken on a shared machine (load average {load:.0f} when the run started: other jobs "
        "were using the same cores), so absolute "
        "numbers are pessimistic; the text/browser ratio is the robust figure. Oracle policy "
        f"(no model), catalogue of {CATALOG[1]} products, one shop server and one Chromium "
        "shared by all episodes.",
        "",
        "| concurrent episodes | text steps/s | browser steps/s | text / browser | "
        "text s/episode | browser s/episode |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for c, text, web in rows:
        lines.append(f"| {c} | {text['steps_per_s']:.0f} | {web['steps_per_s']:.1f} | "
                     f"{text['steps_per_s'] / web['steps_per_s']:.0f}x | "
                     f"{text['s_per_episode']:.3f} | {web['s_per_episode']:.2f} |")
    text1, web1 = rows[0][1], rows[0][2]
    lines += [
        "",
        "Same tasks, both modes (oracle, concurrency 1): mean reward "
        f"{text1['mean_reward']:.2f} (text) vs {web1['mean_reward']:.2f} (browser); "
        f"{text1['steps_per_episode']:.1f} vs {web1['steps_per_episode']:.1f} steps per "
        "episode (the browser types the query and presses Search as two steps, the text "
        "mode searches in one).",
        "",
        "Memory of the browser processes (PSS) with N episodes open on a product page:",
        "",
        "| concurrent episodes | browser PSS, MiB | idle browser, MiB | per episode, MiB |",
        "|---:|---:|---:|---:|",
    ]
    for c, m in mem_rows:
        lines.append(f"| {c} | {m['total_mib']:.0f} | {m['base_mib']:.0f} | "
                     f"{m['per_episode_mib']:.1f} |")
    write_section("Web envs: browser vs text", "\n".join(lines))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer episodes (a smoke run)")
    asyncio.run(main(parser.parse_args().quick))
