"""Differential check: the ``twx/<Game>-v0`` envs against the package's own engine.

For each episode (a game and a seed of the env: the split's game seed number ``seed % 1000``,
as the env documents) there are two runs:

- **TextWorldExpress**: the package's ``TextWorldExpressEnv`` in the JVM it starts itself,
  with its defaults (``envStepLimit`` 100, the game's default parameters):
  ``reset(seed=game_seed, gameFold=split, gameName=game, generateGoldPath=True)``, then its
  gold sequence (``getGoldActionSequence``) until the package says ``done``. A ``done`` with
  the task won, lost or at full score is a termination, any other (the step limit) a
  truncation.
- **agentgym**: ``twx/<Game>-v0`` made with default kwargs (but ``split`` for the dev and
  test splits) and given the same commands as the model's replies, each episode through
  :func:`agentgym.rollout.run_episode` with the default rollout config, all episodes in
  flight at once (up to its 64) on the shared JVM pool. Then the env's own ``expert`` plays
  the same episode (its gold path, made by the engine in agentgym's pool).

The gold agents of TextWorldExpress explore with an unseeded random generator
(``mkGameWithGoldPath``: ``new Random()``): two gold paths of one game differ, though the
game itself is the seed's. So the step-by-step check replays the package's gold path on both
sides, and the expert's own run is checked for the benchmark's success alone.

Compared step by step (:func:`agentgym.fidelity.compare`): the command, the observation, the
reward, the score, terminated and truncated; then the final score and success (the engine's
``tasksuccess``). The first record of each side is the reset: for the package ``Task: `` and
its task description, then the first observation; for agentgym its first message without the
instructions paragraph it opens with (documented formatting). A gold path that runs out
before the game ends (the engine could not make one) ends both sides in a record saying so.
A failure of agentgym's expert where the package's gold path won is a mismatch
(``expert_success``).

Run ``python -m agentgym.envs.textworld_express.fidelity --help``; tests in
``tests/envs/test_fidelity_textworld_express.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from agentgym.fidelity import (
    Comparison,
    Mismatch,
    StepRecord,
    compare,
    records_from_trajectory,
    run_cli,
)
from agentgym.types import Message, Trajectory

from . import engine as twx

FAMILY = "textworld-express"
RESET = "(reset)"
"""The action of the first record of each side (the episode's opening)."""
EXHAUSTED = "(the gold path ran out before the game ended)"
ENV_IDS = {"coin": "twx/CoinCollector-v0", "cookingworld": "twx/CookingWorld-v0",
           "twc": "twx/TWC-v0", "mapreader": "twx/MapReader-v0",
           "arithmetic": "twx/Arithmetic-v0", "sorting": "twx/Sorting-v0",
           "simonsays": "twx/SimonSays-v0", "peckingorder": "twx/PeckingOrder-v0"}
"""The registered env of each game."""


@dataclass(frozen=True)
class Case:
    """One episode to play on both sides.

    Attributes:
        game: The package's game name.
        seed: The env's seed.
        game_seed: The benchmark's game seed it plays (``seed % 1000`` of the split's).
        split: The seed split.
    """

    game: str
    seed: int
    game_seed: int
    split: str = "train"


def cases_for(games: Sequence[str], per_game: int, seed: int,
              split: str = "train") -> list[Case]:
    """``per_game`` random seeds of each game, with the game seed the package lists for each."""
    rng = random.Random(seed)
    reference = _reference_env()
    try:
        out = []
        for game in games:
            reference.load(game, "")
            seeds = list({"train": reference.getValidSeedsTrain,
                          "dev": reference.getValidSeedsDev,
                          "test": reference.getValidSeedsTest}[split]())
            for s in rng.sample(range(len(seeds)), per_game):
                out.append(Case(game, s, seeds[s % len(seeds)], split))
        return out
    finally:
        reference.close()


def reference_run(case: Case, env: Any = None) -> tuple[list[StepRecord], bool]:
    """The package's own engine plays its gold path; (records, the engine's success)."""
    own = env is None
    env = env or _reference_env()
    try:
        observation, info = env.reset(seed=case.game_seed, gameFold=case.split,
                                      gameName=case.game, gameParams="",
                                      generateGoldPath=True)
        records = [StepRecord(RESET, f"Task: {info['taskDescription'].strip()}\n\n"
                                     f"{observation.strip()}",
                              None, float(info["score"]), False, False)]
        for command in env.getGoldActionSequence():
            observation, reward, done, info = env.step(command)
            over = bool(info["tasksuccess"] or info["taskfailure"] or info["score"] >= 1.0)
            records.append(StepRecord(command, observation.strip(), float(reward),
                                      float(info["score"]), done and over,
                                      bool(done and not over)))
            if done:
                break
        else:
            records.append(StepRecord("(end)", EXHAUSTED, None, None, False, False))
        return records, bool(info["tasksuccess"])
    finally:
        if own:
            env.close()


def agentgym_records(trajectory: Trajectory) -> list[StepRecord]:
    """The agentgym side: the opening, then every step (an error episode ends in its error)."""
    opening = trajectory.prompt[-1].content if trajectory.prompt else ""
    opening = opening.split("\n\n", 1)[1] if "\n\n" in opening else opening
    first = trajectory.steps[0].result if trajectory.steps else None
    start = (None if first is None or first.info.get("score") is None
             else float(first.info["score"]) - float(first.reward or 0.0))
    records = [StepRecord(RESET, opening.strip(), None, start, False, False)]
    records += records_from_trajectory(trajectory)
    if trajectory.status == "error":
        error = str(trajectory.error)
        records.append(StepRecord("(end)", EXHAUSTED if _Exhausted.__name__ in error else error,
                                  None, None, False, False))
    return records


class _Exhausted(Exception):
    """The commands to replay ran out before the episode ended."""


class _Replay:
    """An agent that sends a fixed list of commands, one a turn."""

    def __init__(self, commands: Sequence[str]) -> None:
        self.commands = list(commands)
        self.sent = 0

    def start(self, prompt: Any, env: Any) -> _Replay:
        self.sent = 0
        return self

    async def act(self) -> tuple[Message, None]:
        if self.sent >= len(self.commands):
            raise _Exhausted(f"all {len(self.commands)} commands were sent")
        self.sent += 1
        return Message("assistant", self.commands[self.sent - 1]), None

    def observe(self, observation: Any) -> None:
        pass


async def agentgym_run(cases: Sequence[Case], commands: Sequence[Sequence[str]] | None = None,
                       concurrency: int | None = None) -> list[Trajectory]:
    """Each game's env at its defaults plays its case, all in flight at once.

    Args:
        cases: The episodes.
        commands: What to send in each (the package's gold path); None: the env's expert.
        concurrency: Episodes in flight (default: the rollout's).
    """
    import agentgym
    from agentgym.policies.factory import make_agent
    from agentgym.rollout import RolloutConfig, run_episode

    config = RolloutConfig() if concurrency is None else RolloutConfig(concurrency=concurrency)
    limit = asyncio.Semaphore(config.concurrency)

    async def one(i: int, case: Case) -> Trajectory:
        agent = make_agent("expert") if commands is None else _Replay(commands[i])
        async with limit:
            env = agentgym.make(ENV_IDS[case.game], **({} if case.split == "train"
                                                        else {"split": case.split}))
            try:
                return await run_episode(env, agent, seed=case.seed, group_id=str(i),
                                         config=config, env_id=ENV_IDS[case.game])
            finally:
                await env.aclose()

    return list(await asyncio.gather(*(one(i, c) for i, c in enumerate(cases))))


async def run(cases: Sequence[Case], concurrency: int | None = None) -> list[Comparison]:
    """Play every case on both sides and compare them (see the module doc)."""
    reference = await asyncio.to_thread(_reference_env)
    try:
        played = [await asyncio.to_thread(reference_run, case, reference) for case in cases]
    finally:
        await asyncio.to_thread(reference.close)
    replays = await agentgym_run(cases, [[r.action for r in records[1:] if r.action != "(end)"]
                                         for records, _ in played], concurrency)
    experts = await agentgym_run(cases, None, concurrency)
    comparisons = []
    for case, (theirs, won), replay, expert in zip(cases, played, replays, experts,
                                                    strict=True):
        c = compare(FAMILY, case.game, f"game seed {case.game_seed} (seed {case.seed})",
                    theirs, agentgym_records(replay), reference_success=won,
                    agentgym_success=_won(replay))
        if won and not _won(expert):
            c = replace(c, mismatches=(*c.mismatches, Mismatch(
                -1, "expert_success", True, f"{expert.status}: {expert.error or 'lost'}")))
        comparisons.append(c)
    return comparisons


def _won(trajectory: Trajectory) -> bool:
    last = trajectory.steps[-1].result.info if trajectory.steps else {}
    return trajectory.status != "error" and bool(last.get("success"))


def _reference_env() -> Any:
    """The package's own env, in a JVM it starts itself."""
    twx.package()
    from textworld_express import TextWorldExpressEnv

    return TextWorldExpressEnv()


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: random seeds of every game; prints the per-game table and a summary."""
    def arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--per-game", type=int, default=3, help="random seeds of each game")
        parser.add_argument("--games", nargs="*", default=list(ENV_IDS),
                            choices=list(ENV_IDS))
        parser.add_argument("--split", default="train", choices=["train", "dev", "test"])

    return run_cli(family=FAMILY, module="agentgym.envs.textworld_express.fidelity",
                   doc=__doc__, arguments=arguments, play=run, argv=argv,
                   cases=lambda args: cases_for(args.games, args.per_game, args.seed,
                                                args.split))


if __name__ == "__main__":
    sys.exit(main())
