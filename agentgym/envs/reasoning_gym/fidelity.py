"""Differential check: the Reasoning Gym env against Reasoning Gym's own dataset and scorer.

For one (dataset, split, entry index) and one reply, two runs:

- **Reasoning Gym**: a dataset built as Reasoning Gym's own documentation builds one
  (``reasoning_gym.create_dataset(name, seed=<the split's seed>, size=<the split's size>)``,
  fresh for this check), its entry at the index, the prompt Reasoning Gym's evaluation uses
  (``SYSTEM_PROMPTS["default"]`` as the system message, the question as the user message),
  with Python's global generator seeded per entry as the env does (``list_functions`` draws
  from it, so Reasoning Gym alone is not reproducible there),
  and the verdict of its own pipeline: ``extract_answer(reply)`` then the dataset's
  ``score_answer`` (``None`` when there is no answer block, as its scorers take it);
- **agentgym**: ``reasoning-gym/Dataset-v0`` made with ``dataset=`` and ``split=`` and
  otherwise its defaults (one attempt), reset with the index as its seed and given the reply,
  all episodes in flight at once up to the rollout default concurrency (and so in another
  order than the reference, on shared dataset objects).

Each run is two :class:`~agentgym.fidelity.StepRecord` steps: the reset (the prompt as
``role: content`` lines) and the reply (its reward and ``terminated``). The env's feedback
line after the reply ("The verifier scored your answer ...") is its own formatting and is
not compared; the reward is.

Replies: the gold answer, and perturbations of it (spacing inside the block, another entry's
answer, a changed answer, an empty block, no block, two blocks with the gold one last), so
that the verdicts fall on both sides of the scorer.

Run ``python -m agentgym.envs.reasoning_gym.fidelity --help``; tests in
``tests/envs/test_fidelity_reasoning_gym.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentgym.envs.reasoning_gym.env import (
    SIZE_LIMITS,
    SPLIT_SEEDS,
    TASKS_PER_SPLIT,
    entry_globals,
    split_seed,
)
from agentgym.fidelity import Comparison, StepRecord, compare, summarize, summary_line, table
from agentgym.types import Message

FAMILY = "reasoning-gym"
SLOW = ("acre",)
"""Datasets that take about 30 s to build at the split size (each question precomputed)."""
NEEDS_CONFIG = ("composite",)
"""Datasets Reasoning Gym cannot build without a config (``composite`` needs its parts)."""


@dataclass(frozen=True)
class Case:
    """One entry and one reply: ``kind`` names the reply (``gold`` or a perturbation)."""

    dataset: str
    split: str
    index: int
    kind: str
    reply: str


def datasets() -> list[str]:
    """Every dataset Reasoning Gym registers that builds with its default config."""
    from reasoning_gym.factory import DATASETS

    return sorted(d for d in DATASETS if d not in NEEDS_CONFIG)


def split_size(dataset: str) -> int:
    """Entries in each split of ``dataset`` (see ``SIZE_LIMITS``)."""
    return min(TASKS_PER_SPLIT, SIZE_LIMITS.get(dataset, TASKS_PER_SPLIT))


class Reference:
    """Reasoning Gym's own side: datasets built fresh for the check, one per (name, split)."""

    def __init__(self) -> None:
        self._data: dict[tuple[str, str], Any] = {}

    def dataset(self, name: str, split: str) -> Any:
        """The dataset, as ``reasoning_gym.create_dataset`` builds it."""
        import reasoning_gym

        if (name, split) not in self._data:
            self._data[(name, split)] = reasoning_gym.create_dataset(
                name, seed=split_seed(name, split), size=split_size(name))
        return self._data[(name, split)]

    def entry(self, case: Case) -> dict[str, Any]:
        """The case's entry (see the module docstring on Python's global generator)."""
        with entry_globals(split_seed(case.dataset, case.split) + case.index):
            return self.dataset(case.dataset, case.split)[case.index]

    def run(self, case: Case) -> tuple[list[StepRecord], bool]:
        """The two steps on Reasoning Gym's own pipeline, and its success (score 1)."""
        from reasoning_gym.utils import SYSTEM_PROMPTS, extract_answer

        data = self.dataset(case.dataset, case.split)
        entry = self.entry(case)
        prompt = _prompt_text([("system", SYSTEM_PROMPTS["default"]),
                               ("user", str(entry["question"]))])
        with entry_globals(split_seed(case.dataset, case.split) + case.index):
            score = float(data.score_answer(extract_answer(case.reply, tag_name="answer"),
                                            entry))
        return [StepRecord("(reset)", prompt, None, None, False, False),
                StepRecord(case.reply, "", score, None, True, False)], score >= 1.0


def _prompt_text(messages: Sequence[tuple[str, str]]) -> str:
    return "\n\n".join(f"{role}: {content}" for role, content in messages)


def replies(reference: Reference, dataset: str, split: str, index: int,
            rng: random.Random) -> list[tuple[str, str]]:
    """``[(kind, reply)]`` for one entry: the gold answer and perturbations of it."""
    entry = reference.entry(Case(dataset, split, index, "", ""))
    gold = entry.get("answer")
    other_index = (index + 1 + rng.randrange(split_size(dataset) - 1)) % split_size(dataset)
    other = reference.entry(Case(dataset, split, other_index, "", "")).get("answer")
    out = [("missing", "I am not sure."), ("empty", "<answer></answer>")]
    if gold is None:  # a dataset whose entries carry no single answer (scored by a search)
        return out
    gold = str(gold)
    out += [("gold", f"<answer>{gold}</answer>"),
            ("spaced", f"Thinking first.\n<answer>\n  {gold}  \n</answer>"),
            ("changed", f"<answer>{gold}9</answer>"),
            ("no_block", f"The answer is {gold}."),
            ("two_blocks", f"<answer>{other}</answer> or rather <answer>{gold}</answer>")]
    if other is not None and str(other) != gold:
        out.append(("other", f"<answer>{other}</answer>"))
    return out


def cases(names: Sequence[str], per_dataset: int, seed: int,
          reference: Reference) -> list[Case]:
    """``per_dataset`` random (split, index) entries of each dataset, every reply each."""
    rng = random.Random(seed)
    out = []
    for name in names:
        for _ in range(per_dataset):
            split = rng.choice(sorted(SPLIT_SEEDS))
            index = rng.randrange(split_size(name))
            out += [Case(name, split, index, kind, reply) for kind, reply in
                    replies(reference, name, split, index, random.Random(f"{seed}:{index}"))]
    return out


async def env_run(case: Case) -> tuple[list[StepRecord], bool]:
    """The env at its defaults (one attempt) on the case."""
    import agentgym

    env = agentgym.make("reasoning-gym/Dataset-v0", dataset=case.dataset, split=case.split)
    try:
        observation, _ = await env.reset(seed=case.index)
        prompt = _prompt_text([(m.role, m.content) for m in observation])
        result = await env.step(Message("assistant", case.reply))
        return [StepRecord("(reset)", prompt, None, None, False, False),
                StepRecord(case.reply, "", result.reward, None, result.terminated,
                           result.truncated)], bool(result.info.get("success"))
    finally:
        await env.aclose()


async def run(all_cases: Sequence[Case], reference: Reference,
              concurrency: int | None = None) -> list[Comparison]:
    """Both sides of every case; the env side concurrently (default: the rollout default)."""
    from agentgym.rollout import RolloutConfig

    refs = [reference.run(c) for c in all_cases]
    limit = asyncio.Semaphore(concurrency or RolloutConfig().concurrency)

    async def one(case: Case) -> tuple[list[StepRecord], bool]:
        async with limit:
            return await env_run(case)

    order = list(range(len(all_cases)))
    random.Random(len(order)).shuffle(order)  # another order than the reference's
    ran = await asyncio.gather(*(one(all_cases[i]) for i in order))
    got: list[Any] = [None] * len(all_cases)
    for i, result in zip(order, ran, strict=True):
        got[i] = result
    return [compare(FAMILY, c.dataset, f"{c.split} {c.index} [{c.kind}]", ref, ours,
                    reference_success=ref_ok, agentgym_success=our_ok)
            for c, (ref, ref_ok), (ours, our_ok) in zip(all_cases, refs, got, strict=True)]


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run the check, print a table per dataset, differences, a summary line."""
    parser = argparse.ArgumentParser(
        prog="python -m agentgym.envs.reasoning_gym.fidelity",
        description="Score gold and perturbed answers with Reasoning Gym's own pipeline and "
                    "through the agentgym env; compare.")
    parser.add_argument("--datasets", nargs="*", default=None,
                        help="dataset names (default: every one that builds by default)")
    parser.add_argument("--per-dataset", type=int, default=3, help="random entries each")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    reference = Reference()
    chosen = cases(args.datasets or datasets(), args.per_dataset, args.seed, reference)
    comparisons = asyncio.run(run(chosen, reference))
    print(table(summarize(comparisons)))
    for c in comparisons:
        if not c.agree:
            print(f"DIFFERS {c.task} {c.episode}: " + "; ".join(map(str, c.mismatches)))
    print(f"{summary_line(FAMILY, comparisons)} ({time.perf_counter() - start:.0f} s)")
    return 0 if all(c.agree for c in comparisons) else 1


if __name__ == "__main__":
    raise SystemExit(main())
