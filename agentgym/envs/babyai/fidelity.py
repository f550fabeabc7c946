"""Differential check: the ``babyai/<Level>-v0`` envs against minigrid's own level and bot.

For each episode (a level and a seed) there are two runs:

- **minigrid**: the level as ``gymnasium.make`` builds it, reset with the seed, played by
  minigrid's ``BabyAIBot`` as minigrid's own bot test drives it (``action = bot.replan()``,
  ``env.step(action)``) until the level ends it (its mission's ``max_steps``).
- **agentgym**: ``babyai/<Level>-v0`` made with default kwargs, played by the ``expert``
  policy (the same bot, its moves sent as tool calls) through
  :func:`agentgym.rollout.run_groups` with the default rollout config: all episodes in
  flight at once (up to 64).

Compared step by step (:func:`agentgym.fidelity.compare`): the action, the observation,
minigrid's reward, terminated and truncated; then success (terminated with a reward). The
observation is compared as agentgym writes it plus the state under it: for minigrid, the
view rendered by :func:`~agentgym.envs.babyai.describe.describe_view` from minigrid's own
observation (``You did: <action>.`` and ``You see: ...``, ``Mission accomplished!`` at a
success) and the agent's position, heading, load and a digest of the grid; for agentgym, its
message and the same state from its ``state_key`` (documented formatting: the words are the
env's, the state is minigrid's). BabyAI has no running score (``score`` is None on both).

Where the bot cannot go on (it loops on a level generated unsolvable, or it proposes
``done``, which the env's action vocabulary leaves out), both sides end in a record saying
so, and the episode counts as no success.

Run ``python -m agentgym.envs.babyai.fidelity --help``; tests in
``tests/envs/test_fidelity_babyai.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from agentgym.fidelity import (
    Comparison,
    StepRecord,
    compare,
    records_from_trajectory,
    run_cli,
)
from agentgym.types import Trajectory

from .describe import describe_view
from .env import ACTIONS
from .levels import LEVELS

if TYPE_CHECKING:
    from minigrid.minigrid_env import MiniGridEnv

FAMILY = "babyai"
RESET = "(reset)"
GAVE_UP = "(the bot gives up: its plan loops)"
SAYS_DONE = "(the bot proposes done)"
_DIRECTIONS = ("east", "south", "west", "north")
_PLAN_LIMIT = 200
"""Subgoals the bot may stack before it counts as looping (its plans hold a handful)."""


@dataclass(frozen=True)
class Case:
    """One episode to play on both sides: a level (our name) and a seed."""

    level: str
    seed: int


def cases_for(levels: Sequence[str], per_level: int, seed: int) -> list[Case]:
    """``per_level`` random seeds of each level (seeds below 2**31)."""
    rng = random.Random(seed)
    return [Case(level, rng.randrange(2**31 - 1)) for level in levels
            for _ in range(per_level)]


class _Looping(Exception):
    pass


class _BoundedPlan(list):
    """The bot's subgoal stack, stopped where it would grow without end."""

    def append(self, item: Any) -> None:
        if len(self) >= _PLAN_LIMIT:
            raise _Looping
        super().append(item)


def _state(env: Any) -> str:
    """The state as agentgym's ``state_key`` writes it (after the episode's name)."""
    grid = hashlib.sha1(env.grid.encode().tobytes()).hexdigest()[:12]
    carrying = f"{env.carrying.color} {env.carrying.type}" if env.carrying else "nothing"
    x, y = (int(v) for v in env.agent_pos)
    return (f"pos=({x},{y}) facing={_DIRECTIONS[int(env.agent_dir)]} carrying={carrying} "
            f"grid={grid}")


def _view(obs: Any, env: Any) -> str:
    seen = describe_view(obs["image"], env.carrying)
    return "You see: " + ("; ".join(seen) if seen else "nothing but floor") + "."


def reference_run(case: Case) -> tuple[list[StepRecord], bool]:
    """The level and bot of minigrid play ``case``; (records, success)."""
    import gymnasium
    import minigrid  # noqa: F401  (registers the BabyAI ids)
    from minigrid.utils.baby_ai_bot import BabyAIBot

    gym_env = gymnasium.make(LEVELS[case.level])
    env = cast("MiniGridEnv", gym_env.unwrapped)  # every id in LEVELS is a MiniGridEnv
    try:
        obs, _ = gym_env.reset(seed=case.seed)
        records = [StepRecord(RESET, f"Mission: {env.mission}\n{_view(obs, env)}\n"
                                     f"{_state(env)}", None, None, False, False)]
        bot = BabyAIBot(env)
        bot.stack = _BoundedPlan(bot.stack)
        while True:
            try:
                # minigrid leaves replan unannotated; it returns an action, never None
                action = int(bot.replan())  # pyright: ignore[reportArgumentType]
            except _Looping:
                records.append(StepRecord("(error)", GAVE_UP, None, None, False, False))
                return records, False
            if action >= len(ACTIONS):
                records.append(StepRecord("(error)", SAYS_DONE, None, None, False, False))
                return records, False
            obs, reward, terminated, truncated, _ = gym_env.step(action)
            success = bool(terminated and float(reward) > 0)
            text = f"You did: {ACTIONS[action]}.\n{_view(obs, env)}"
            text += "\nMission accomplished!" if success else ""
            records.append(StepRecord(f"{ACTIONS[action].replace(' ', '_')}()",
                                      f"{text}\n{_state(env)}", float(reward), None,
                                      bool(terminated), bool(truncated and not terminated)))
            if terminated or truncated:
                return records, success
    finally:
        gym_env.close()


def agentgym_records(trajectory: Trajectory) -> list[StepRecord]:
    """The agentgym side: the opening, then every step with the state under it."""
    opening = trajectory.prompt[-1].content if trajectory.prompt else ""
    opening = opening.split("\n\n", 1)[1] if "\n\n" in opening else opening
    first_state = trajectory.steps[0].state_key if trajectory.steps else None
    records = [StepRecord(RESET, f"{opening.strip()}\n{_after_name(first_state)}", None,
                          None, False, False)]
    for step, record in zip((s for s in trajectory.steps if not s.summary),
                            records_from_trajectory(trajectory, score_key=None), strict=True):
        state = _after_name(step.result.info.get("state_key"))
        records.append(StepRecord(record.action, f"{record.observation}\n{state}",
                                  record.reward, None, record.terminated, record.truncated))
    if trajectory.status == "error":
        error = str(trajectory.error)
        text = (GAVE_UP if "gives up" in error else SAYS_DONE if "suggests 'done'" in error
                else error)
        records.append(StepRecord("(error)", text, None, None, False, False))
    return records


def _after_name(state_key: Any) -> str:
    return str(state_key).split("|", 1)[-1] if state_key else ""


async def agentgym_run(cases: Sequence[Case], concurrency: int | None = None,
                       ) -> list[Trajectory]:
    """Each level's env at its defaults plays its cases with the expert, all in flight."""
    import agentgym
    from agentgym.policies.factory import make_agent
    from agentgym.rollout import RolloutConfig, run_groups

    config = RolloutConfig() if concurrency is None else RolloutConfig(concurrency=concurrency)

    async def level(name: str) -> list[Trajectory]:
        env_id = f"babyai/{name}-v0"
        return await run_groups(lambda: agentgym.make(env_id), make_agent("expert"),
                                [c.seed for c in cases if c.level == name], config,
                                env_id=env_id)

    levels = list(dict.fromkeys(c.level for c in cases))
    by_case = {(t.env_id, t.seed): t
               for ts in await asyncio.gather(*(level(n) for n in levels)) for t in ts}
    return [by_case[f"babyai/{c.level}-v0", c.seed] for c in cases]


async def run(cases: Sequence[Case], concurrency: int | None = None) -> list[Comparison]:
    """Play every case on both sides and compare them (agentgym's side first, concurrently)."""
    trajectories = await agentgym_run(cases, concurrency)
    comparisons = []
    for case, trajectory in zip(cases, trajectories, strict=True):
        theirs, won = reference_run(case)
        last = trajectory.steps[-1].result.info if trajectory.steps else {}
        comparisons.append(compare(
            FAMILY, case.level, f"seed {case.seed}", theirs, agentgym_records(trajectory),
            reference_success=won,
            agentgym_success=trajectory.status != "error" and bool(last.get("success"))))
    return comparisons


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: random seeds of every level; prints the per-level table and a summary."""
    def arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--per-level", type=int, default=5,
                            help="random seeds of each level")
        parser.add_argument("--levels", nargs="*", default=list(LEVELS), choices=list(LEVELS))

    return run_cli(family=FAMILY, module="agentgym.envs.babyai.fidelity", doc=__doc__,
                   arguments=arguments, play=run, argv=argv,
                   cases=lambda args: cases_for(args.levels, args.per_level, args.seed))


if __name__ == "__main__":
    sys.exit(main())
