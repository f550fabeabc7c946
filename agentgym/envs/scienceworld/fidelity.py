"""Differential check: ``scienceworld/ScienceWorld-v0`` against the package's own engine.

For each episode (a seed of the env: task type ``seed % 30``, the split's variation number
``(seed // 30) % n``, as the env documents) there are two runs:

- **ScienceWorld**: the package's ``ScienceWorldEnv`` in the JVM it starts itself, with its
  defaults (``envStepLimit`` 100), in the package's documented order:
  ``load(task, variation, "", generateGoldPath=True)``, ``reset()`` (which makes the gold
  path again), ``get_gold_action_sequence()``, then that sequence until the package says
  ``done``. One engine plays every case, its gold agent's room-search cache emptied before
  each load (:func:`~agentgym.envs.scienceworld.engine.forget_gold_paths`), so that each
  case gets the gold path a fresh process makes, not one shaped by the cases before it. A
  ``done`` with the task complete or failed is a termination, any other (the step limit) a
  truncation. A sequence that runs out first ends in a record saying so.
- **agentgym**: ``scienceworld/ScienceWorld-v0`` made with default kwargs (but ``split``
  for the dev and test splits), played by the ``expert`` policy through
  :func:`agentgym.rollout.run_groups` with the default rollout config: all episodes in
  flight at once (up to 64) on the shared JVM pool. An expert whose gold sequence runs out
  ends its episode as an error, recorded as the same closing record.

Compared step by step (:func:`agentgym.fidelity.compare`): the command, the observation, the
reward (score change), the score, terminated and truncated; then the final score and success
(the engine's final score 100; the env's ``info["success"]``). The first record of each side
is the reset: for ScienceWorld the task description and the first look
(``info["taskDesc"]``, ``info["look"]``), for agentgym its first message without the
instructions paragraph it opens with (documented formatting).

Both JVMs give every object the same identity hash (``-XX:hashCode=2``, see
:data:`agentgym.envs.jvm.DEFAULT_JAVA_OPTIONS`): ScienceWorld 1.2.3 iterates some sets in
hash order, so without it two loads of one variation may pick different objects.

Run ``python -m agentgym.envs.scienceworld.fidelity --help``; tests in
``tests/envs/test_fidelity_scienceworld.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentgym.fidelity import (
    Comparison,
    StepRecord,
    compare,
    records_from_trajectory,
    run_cli,
)
from agentgym.types import Trajectory

from ..jvm import REFERENCE_JAVA_OPTIONS
from . import engine as sw

FAMILY = "scienceworld"
ENV_ID = "scienceworld/ScienceWorld-v0"
RESET = "(reset)"
"""The action of the first record of each side (the episode's opening)."""
END = "(end)"
"""The action of a last record that is no step: a gold path that ran out, an error."""
EXHAUSTED = "(the gold path ran out before the episode ended)"


@dataclass(frozen=True)
class Case:
    """One episode to play on both sides.

    Attributes:
        seed: The env's seed (it picks the task type and the variation).
        task: The task type the seed plays.
        variation: The benchmark's variation number the seed plays.
        split: The variation split.
    """

    seed: int
    task: str
    variation: int
    split: str = "train"


def cases_for(seeds: Sequence[int], split: str = "train") -> list[Case]:
    """The (task, variation) each seed plays, read from the package's own split lists."""
    names = sw.task_names()
    reference = _reference_env()
    try:
        out = []
        for seed in seeds:
            task = names[seed % len(names)]
            variations = _split(reference, task, split)
            out.append(Case(seed, task, variations[(seed // len(names)) % len(variations)],
                            split))
        return out
    finally:
        reference.close()


def sample_seeds(count: int, seed: int, variations_per_task: int = 0) -> list[int]:
    """Seeds drawn across the whole split.

    Args:
        count: Random seeds (any task type, any variation).
        seed: Seed of the draw.
        variations_per_task: Instead (when > 0): every task type, each on that many
            variations drawn at random (the sweep), in rounds of one seed per task type.
    """
    rng = random.Random(seed)
    if variations_per_task > 0:
        n = len(sw.task_names())
        draws = [rng.sample(range(1000), variations_per_task) for _ in range(n)]
        return [task + n * draws[task][r] for r in range(variations_per_task)
                for task in range(n)]
    return rng.sample(range(30_000), count)  # distinct: a seed names one episode


def reference_run(case: Case, env: Any = None) -> list[StepRecord]:
    """The package's own engine plays its gold path for ``case`` (see the module doc)."""
    own = env is None
    env = env or _reference_env()
    try:
        sw.forget_gold_paths(env.server, env._gateway)  # the package's own gateway
        env.load(case.task, case.variation, "", generateGoldPath=True)
        _, info = env.reset()
        gold = env.get_gold_action_sequence()  # made again by reset, as users read it
        records = [StepRecord(RESET, f"{info['taskDesc'].strip()}\n\n{info['look'].strip()}",
                              None, float(info["score"]), False, False)]
        for command in gold:
            observation, reward, done, info = env.step(command)
            over = done and (info["score"] < 0 or bool(env.server.getCompleted()))
            records.append(StepRecord(command, observation.strip(), float(reward),
                                      float(info["score"]), bool(over),
                                      bool(done and not over)))
            if done:
                break
        else:  # the engine's own gold path ran out before the package said done
            records.append(StepRecord(END, EXHAUSTED, None, None, False, False))
        return records
    finally:
        if own:
            env.close()


def agentgym_records(trajectory: Trajectory) -> list[StepRecord]:
    """The agentgym side: the opening, then every step (an error episode ends in its error)."""
    opening = trajectory.prompt[-1].content if trajectory.prompt else ""
    opening = opening.split("\n\n", 1)[1] if "\n\n" in opening else opening
    score = trajectory.steps[0].result.info.get("score") if trajectory.steps else None
    first_score = None if score is None else float(score) - float(
        trajectory.steps[0].result.reward or 0.0)
    records = [StepRecord(RESET, opening.strip(), None, first_score, False, False)]
    records += [StepRecord(_command(r.action), r.observation, r.reward, r.score,
                           r.terminated, r.truncated)
                for r in records_from_trajectory(trajectory)]
    if trajectory.status == "error":
        error = str(trajectory.error)
        records.append(StepRecord(END, EXHAUSTED if "gold sequence is exhausted" in error
                                  else error, None, None, False, False))
    return records


async def agentgym_run(cases: Sequence[Case], concurrency: int | None = None,
                       ) -> list[Trajectory]:
    """The env at its defaults (but ``split``) plays every case with the expert, all in flight."""
    import agentgym
    from agentgym.policies.factory import make_agent
    from agentgym.rollout import RolloutConfig, run_groups

    config = RolloutConfig() if concurrency is None else RolloutConfig(concurrency=concurrency)

    async def split(name: str) -> list[Trajectory]:
        kwargs = {} if name == "train" else {"split": name}  # train is the default
        return await run_groups(lambda: agentgym.make(ENV_ID, **kwargs), make_agent("expert"),
                                [c.seed for c in cases if c.split == name], config,
                                env_id=ENV_ID)

    splits = list(dict.fromkeys(c.split for c in cases))
    played = await asyncio.gather(*(split(name) for name in splits))
    by_case = {(name, t.seed): t for name, ts in zip(splits, played, strict=True) for t in ts}
    return [by_case[c.split, c.seed] for c in cases]


async def run(cases: Sequence[Case], concurrency: int | None = None) -> list[Comparison]:
    """Play every case on both sides and compare them.

    The two sides run at once (the package's engine in its own JVM, in a worker thread,
    one case after another; agentgym's episodes all in flight on the pool), as neither
    reads the other's play.
    """
    def reference_side() -> list[list[StepRecord]]:
        reference = _reference_env()
        try:
            return [reference_run(case, reference) for case in cases]
        finally:
            reference.close()

    played, trajectories = await asyncio.gather(asyncio.to_thread(reference_side),
                                                agentgym_run(cases, concurrency))
    comparisons = []
    for case, theirs, trajectory in zip(cases, played, trajectories, strict=True):
        expected = f"scienceworld-{case.task}-{case.split}-{case.variation}"
        ours = (agentgym_records(trajectory) if trajectory.task_id == expected else
                [StepRecord("(episode)", f"{trajectory.task_id}: {trajectory.status} "
                            f"{trajectory.error or ''}".strip(), None, None, False, False)])
        last = trajectory.steps[-1].result.info if trajectory.steps else {}
        comparisons.append(compare(
            FAMILY, case.task, f"variation {case.variation} (seed {case.seed})", theirs, ours,
            reference_success=(theirs[-1].score or 0) >= 100,
            agentgym_success=trajectory.status != "error" and bool(last.get("success"))))
    return comparisons


def _command(action: str) -> str:
    """The command in an action the expert sent as ``<action>...</action>`` or plain text."""
    from agentgym.envs.text_commands import parse_command

    return parse_command(action) or action


def _reference_env() -> Any:
    """The package's own env, in a JVM it starts itself (with the pools' identity hashes)."""
    sw.package()
    from scienceworld import ScienceWorldEnv

    previous = os.environ.get("JAVA_TOOL_OPTIONS")
    os.environ["JAVA_TOOL_OPTIONS"] = REFERENCE_JAVA_OPTIONS
    try:
        return ScienceWorldEnv()
    finally:
        if previous is None:
            del os.environ["JAVA_TOOL_OPTIONS"]
        else:
            os.environ["JAVA_TOOL_OPTIONS"] = previous


def _split(env: Any, task: str, split: str) -> list[int]:
    env.load(task, 0, "", False)
    getter = {"train": env.get_variations_train, "dev": env.get_variations_dev,
              "test": env.get_variations_test}[split]
    return list(getter())


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: a random sample or the sweep; prints the per-task table and a summary."""
    def arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--episodes", type=int, default=6, help="random seeds to draw")
        parser.add_argument("--sweep", type=int, default=0, metavar="K",
                            help="instead: every task type on K random variations")
        parser.add_argument("--split", default="train", choices=["train", "dev", "test"])

    return run_cli(family=FAMILY, module="agentgym.envs.scienceworld.fidelity", doc=__doc__,
                   arguments=arguments, play=run, batch=30, argv=argv,
                   cases=lambda args: cases_for(sample_seeds(args.episodes, args.seed,
                                                             args.sweep), args.split))


if __name__ == "__main__":
    sys.exit(main())
