"""minigrid's BabyAI bot through the text env: success per level over 100 seeds.

Each seed is one episode of the level, played by ``env.expert_action()`` (the bot) up to the
level's own ``max_steps``. A seed the bot does not win is checked with
:func:`agentgym.envs.babyai.solvable.unopenable_doors`: a generated level with a locked door
whose key is out of reach cannot be won by anyone, and is counted apart.

    python benchmarks/babyai_bot.py [--seeds 100] [--levels Unlock,GoTo]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from agentgym.envs.babyai import LEVELS, BabyAIEnv
from agentgym.envs.babyai.solvable import unopenable_doors


async def play(env: BabyAIEnv, seed: int) -> tuple[bool, int, str]:
    """(won, steps, why it was not won) for the bot on one seed."""
    await env.reset(seed=seed)
    for steps in range(1, env.max_steps + 1):
        try:
            action = env.expert_action()
        except RuntimeError as exc:
            return False, steps - 1, str(exc)
        result = await env.step(action)
        if result.done:
            return bool(result.info["success"]), steps, "" if result.info["success"] else (
                "truncated at max_steps")
    return False, env.max_steps, "truncated at max_steps"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--levels", default=",".join(LEVELS))
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    print("| level | bot wins / seeds | unsolvable seeds (locked door, key out of reach) "
          "| bot wins / solvable seeds | mean steps (wins) | max_steps | s |")
    print("|---|---|---|---|---|---|---|")
    for level in args.levels.split(","):
        env = BabyAIEnv(level)
        start = time.perf_counter()
        wins, steps, unsolvable, lost, budgets = 0, [], [], [], set()
        for seed in range(args.seeds):
            won, n, why = await play(env, seed)
            budgets.add(env.max_steps)  # minigrid sets it per mission, at reset
            if won:
                wins += 1
                steps.append(n)
            elif unopenable_doors(env.minigrid):
                unsolvable.append(seed)
            else:
                lost.append(f"{seed} ({why})")
        solvable = args.seeds - len(unsolvable)
        mean = sum(steps) / len(steps) if steps else 0.0
        print(f"| {level} | {wins}/{args.seeds} | {len(unsolvable)}"
              f"{' (seeds ' + ', '.join(map(str, unsolvable)) + ')' if unsolvable else ''} "
              f"| {wins}/{solvable} | {mean:.1f} | {_span(budgets)} "
              f"| {time.perf_counter() - start:.0f} |", flush=True)
        if lost:
            print(f"  lost on solvable seeds: {'; '.join(lost)}", flush=True)
    print(f"load average at end: {os.getloadavg()}")


def _span(values: set[int]) -> str:
    low, high = min(values), max(values)
    return f"{low}" if low == high else f"{low}-{high}"


if __name__ == "__main__":
    asyncio.run(main())
