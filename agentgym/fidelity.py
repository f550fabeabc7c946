"""Differential checks: a benchmark's own engine and agentgym's env, step by step.

A score read through agentgym means something only if the env behaves as the benchmark's own
engine does. A differential check plays the same episode twice, once on the benchmark's engine
driven directly (its gold path, bot or ground truth as the actions) and once through agentgym's
env at its defaults, records both as :class:`StepRecord` sequences and compares them with
:func:`compare`. Each family's harness (``agentgym.envs.<family>.fidelity``) builds the two
sequences; this module holds what they share: the records, the comparison, the summary.

What counts as a difference:

- the number of steps, and at each step the action, the observation (after the family's
  documented formatting, passed as ``normalize``), the reward, the score, ``terminated``
  and ``truncated``;
- the final score and success.

Each family's command line (``python -m agentgym.envs.<family>.fidelity``) is
:func:`run_cli` with the family's own flags, cases and play.

Example:
    >>> ref = [StepRecord("go north", "You go north.", 0.0, 0.0, False, False),
    ...        StepRecord("take coin", "Taken.", 1.0, 1.0, True, False)]
    >>> ours = [StepRecord("go north", "You go north.", 0.0, 0.0, False, False),
    ...         StepRecord("take coin", "Taken!", 1.0, 1.0, True, False)]
    >>> c = compare("twx", "coin", "seed 3", ref, ours, success=lambda s: s >= 1.0)
    >>> c.agree, [(m.step, m.field) for m in c.mismatches]
    (False, [(1, 'observation')])
    >>> for part in summary_line("twx", [c]).split("; "):
    ...     print(part)
    twx: 1 episodes over 1 task types: 0 agree, 1 differ (coin: 1)
    success reference 1/1, agentgym 1/1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym.types import Message, Trajectory

FIELDS = ("action", "observation", "reward", "score", "terminated", "truncated")
"""The per-step fields :func:`compare` checks, in order."""


@dataclass(frozen=True)
class StepRecord:
    """One step of an episode as one side (reference engine or agentgym) saw it.

    Attributes:
        action: The command or call played, as text.
        observation: What came back (the side's own text; ``compare`` normalizes both).
        reward: The step's reward, or None where the side has none.
        score: The benchmark's running score after the step, or None where it has none.
        terminated: The episode ended by the task (success or failure).
        truncated: The episode ended by a limit.
    """

    action: str
    observation: str
    reward: float | None
    score: float | None
    terminated: bool
    truncated: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"action": self.action, "observation": self.observation, "reward": self.reward,
                "score": self.score, "terminated": self.terminated, "truncated": self.truncated}


@dataclass(frozen=True)
class Mismatch:
    """One difference between the two sides.

    Attributes:
        step: The step index (from 0), or -1 for the episode as a whole (length, final score).
        field: What differs (one of :data:`FIELDS`, ``"steps"``, ``"final_score"`` or
            ``"success"``).
        reference: The benchmark engine's value.
        agentgym: agentgym's value.
    """

    step: int
    field: str
    reference: Any
    agentgym: Any

    def __str__(self) -> str:
        where = "episode" if self.step < 0 else f"step {self.step}"
        return f"{where} {self.field}: reference {_short(self.reference)} != agentgym " \
               f"{_short(self.agentgym)}"


@dataclass(frozen=True)
class Comparison:
    """The verdict on one episode played on both sides.

    Attributes:
        family: The benchmark family (``"scienceworld"``).
        task: The task type, level or category (what the summary groups by).
        episode: Which episode of the task (``"variation 7"``, ``"seed 12"``).
        reference: The benchmark engine's steps.
        agentgym: agentgym's steps.
        reference_score: The engine's final score (None: it has no score).
        agentgym_score: agentgym's final score.
        reference_success: The engine's verdict on the episode.
        agentgym_success: agentgym's verdict.
        mismatches: Every difference found (empty when the sides agree).
    """

    family: str
    task: str
    episode: str
    reference: tuple[StepRecord, ...]
    agentgym: tuple[StepRecord, ...]
    reference_score: float | None
    agentgym_score: float | None
    reference_success: bool
    agentgym_success: bool
    mismatches: tuple[Mismatch, ...] = field(default=())

    @property
    def agree(self) -> bool:
        """True when no difference was found."""
        return not self.mismatches

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (steps included, for a report file)."""
        return {"family": self.family, "task": self.task, "episode": self.episode,
                "agree": self.agree, "reference_score": self.reference_score,
                "agentgym_score": self.agentgym_score,
                "reference_success": self.reference_success,
                "agentgym_success": self.agentgym_success,
                "mismatches": [str(m) for m in self.mismatches],
                "reference": [s.to_dict() for s in self.reference],
                "agentgym": [s.to_dict() for s in self.agentgym]}


def compare(family: str, task: str, episode: str, reference: Sequence[StepRecord],
            agentgym: Sequence[StepRecord], *,
            success: Callable[[float], bool] | None = None,
            reference_success: bool | None = None, agentgym_success: bool | None = None,
            normalize: Callable[[str], str] | None = None,
            tolerance: float = 1e-9) -> Comparison:
    """Compare two plays of one episode step by step; see the module docstring.

    Args:
        family: The benchmark family, for the record.
        task: The task type (the summary groups by it).
        episode: Which episode of the task.
        reference: The steps on the benchmark's own engine.
        agentgym: The steps through agentgym's env.
        success: The benchmark's success rule on a final score (used where a side's
            success is not given).
        reference_success: The engine's own verdict, where it gives one.
        agentgym_success: agentgym's verdict (e.g. the last step's ``info["success"]``).
        normalize: The documented formatting difference, applied to both observations.
        tolerance: Largest absolute difference of two rewards or scores still equal.

    Returns:
        The comparison, with every mismatch found.

    Raises:
        ValueError: neither ``success`` nor both verdicts were given.
    """
    norm = normalize or _strip
    mismatches: list[Mismatch] = []
    if len(reference) != len(agentgym):
        mismatches.append(Mismatch(-1, "steps", len(reference), len(agentgym)))
    for i, (ref, ours) in enumerate(zip(reference, agentgym, strict=False)):
        for name in FIELDS:
            a, b = getattr(ref, name), getattr(ours, name)
            if name == "observation":
                a, b = norm(a), norm(b)
            if not _equal(a, b, tolerance):
                mismatches.append(Mismatch(i, name, a, b))
    ref_score = _final_score(reference)
    our_score = _final_score(agentgym)
    if not _equal(ref_score, our_score, tolerance):
        mismatches.append(Mismatch(-1, "final_score", ref_score, our_score))
    ref_ok = _verdict(reference_success, ref_score, success, "reference")
    our_ok = _verdict(agentgym_success, our_score, success, "agentgym")
    if ref_ok != our_ok:
        mismatches.append(Mismatch(-1, "success", ref_ok, our_ok))
    return Comparison(family, task, episode, tuple(reference), tuple(agentgym), ref_score,
                      our_score, ref_ok, our_ok, tuple(mismatches))


def records_from_trajectory(trajectory: Trajectory, *,
                            score_key: str | None = "score") -> list[StepRecord]:
    """The agentgym side of a comparison, read from a rollout's trajectory.

    The action is the command the policy sent (its text, or its tool calls as
    ``name(arguments)``), the observation the text of the env's last message, the score
    ``info[score_key]`` (None when ``score_key`` is None or the key is absent). Summary turns
    (no env step) are left out.
    """
    out = []
    for step in trajectory.steps:
        if step.summary:
            continue
        result = step.result
        score = result.info.get(score_key) if score_key is not None else None
        out.append(StepRecord(action_text(step.action),
                              result.observation[-1].content if result.observation else "",
                              result.reward, None if score is None else float(score),
                              result.terminated, result.truncated))
    return out


def action_text(action: Message) -> str:
    """A policy message as the command it names: its tool calls, else its text."""
    if action.tool_calls:
        return "; ".join(f"{c.name}({dict(c.arguments) if c.arguments else ''})"
                         for c in action.tool_calls)
    return action.content.strip()


@dataclass(frozen=True)
class TaskSummary:
    """How the episodes of one task type fared.

    Attributes:
        task: The task type.
        episodes: Episodes compared.
        agree: Episodes with no mismatch.
        reference_success: Episodes the benchmark's engine scored a success.
        agentgym_success: Episodes agentgym scored a success.
    """

    task: str
    episodes: int
    agree: int
    reference_success: int
    agentgym_success: int


def summarize(comparisons: Iterable[Comparison]) -> list[TaskSummary]:
    """One row per task type, in the order the task types first appear."""
    rows: dict[str, list[int]] = {}
    for c in comparisons:
        row = rows.setdefault(c.task, [0, 0, 0, 0])
        row[0] += 1
        row[1] += c.agree
        row[2] += c.reference_success
        row[3] += c.agentgym_success
    return [TaskSummary(task, *row) for task, row in rows.items()]


def summary_line(family: str, comparisons: Sequence[Comparison]) -> str:
    """One line: episodes, task types, agreement (differing task types named), successes."""
    differ = Counter(c.task for c in comparisons if not c.agree)
    named = ", ".join(f"{t}: {n}" for t, n in differ.most_common())
    agree = sum(c.agree for c in comparisons)
    return (f"{family}: {len(comparisons)} episodes over "
            f"{len({c.task for c in comparisons})} task types: {agree} agree, "
            f"{len(comparisons) - agree} differ{f' ({named})' if named else ''}; success "
            f"reference {sum(c.reference_success for c in comparisons)}/{len(comparisons)}, "
            f"agentgym {sum(c.agentgym_success for c in comparisons)}/{len(comparisons)}")


def table(rows: Sequence[TaskSummary]) -> str:
    """The per-task summary as a Markdown table (for a family's doc page)."""
    lines = ["| task | episodes | agree | reference success | agentgym success |",
             "|---|---:|---:|---:|---:|"]
    lines += [f"| {r.task} | {r.episodes} | {r.agree} | {r.reference_success} | "
              f"{r.agentgym_success} |" for r in rows]
    return "\n".join(lines)


def _strip(text: str) -> str:
    return text.strip()


def _equal(a: Any, b: Any, tolerance: float) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(float(a), float(b), rel_tol=0.0, abs_tol=tolerance)
    return a == b


def _final_score(steps: Sequence[StepRecord]) -> float | None:
    return steps[-1].score if steps else None


def _verdict(given: bool | None, score: float | None,
             rule: Callable[[float], bool] | None, side: str) -> bool:
    if given is not None:
        return bool(given)
    if rule is None:
        raise ValueError(f"compare() needs the {side} side's success: pass success=<rule on "
                         f"the final score> or {side}_success=<bool>")
    return score is not None and bool(rule(score))


def _short(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"…(+{len(text) - limit})"


def by_task(comparisons: Iterable[Comparison]) -> Mapping[str, list[Comparison]]:
    """The comparisons grouped by task type, in first-seen order."""
    out: dict[str, list[Comparison]] = {}
    for c in comparisons:
        out.setdefault(c.task, []).append(c)
    return out


def run_cli(*, family: str, module: str, doc: str | None,
            arguments: Callable[[argparse.ArgumentParser], None],
            cases: Callable[[argparse.Namespace], Sequence[Any]],
            play: Callable[[Sequence[Any]], Coroutine[Any, Any, list[Comparison]]],
            batch: int | None = None, argv: Sequence[str] | None = None) -> int:
    """A family's differential-check command line: parse, play, report.

    The flags are the family's (``arguments``), then ``--seed`` (of the draw), ``--batch``
    (only where ``batch`` is given: episodes played at once, default ``batch``) and ``--out``
    (every comparison, steps included, as JSON lines). With batches, a progress line
    (``after N of M: <summary line> (T s)``) follows each batch. Then the per-task table,
    up to three mismatches of each differing episode, and the summary line with the time.

    Args:
        family: The family's name in the summary line (``"scienceworld"``).
        module: The harness module, for ``prog`` (``agentgym.envs.scienceworld.fidelity``).
        doc: The harness's docstring; its first paragraph is the description.
        arguments: Adds the family's own flags to the parser.
        cases: The episodes to play, from the parsed flags.
        play: Plays some episodes on both sides and compares them (the harness's ``run``).
        batch: Default of ``--batch``; None: no such flag, every episode in one play.
        argv: The arguments (None: ``sys.argv``).

    Returns:
        The exit status: 0 when every episode agrees, else 1.
    """
    parser = argparse.ArgumentParser(prog=f"python -m {module}",
                                     description=(doc or "").split("\n\n")[0])
    arguments(parser)
    parser.add_argument("--seed", type=int, default=0, help="seed of the draw")
    if batch is not None:
        parser.add_argument("--batch", type=int, default=batch,
                            help="episodes played at once (each batch all in flight)")
    parser.add_argument("--out", help="write every comparison (steps included) as JSON lines")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    todo = list(cases(args))
    size = max(1, args.batch if batch is not None else len(todo))
    comparisons: list[Comparison] = []
    for i in range(0, len(todo), size):
        played = asyncio.run(play(todo[i:i + size]))
        comparisons += played
        if args.out:  # batch by batch, so that a stopped sweep keeps what it played
            with open(args.out, "a" if i else "w") as f:
                f.writelines(json.dumps(c.to_dict()) + "\n" for c in played)
        if batch is not None:
            print(f"after {len(comparisons)} of {len(todo)}: "
                  f"{summary_line(family, comparisons)} ({time.perf_counter() - start:.0f} s)",
                  flush=True)
    print(table(summarize(comparisons)))
    for c in comparisons:
        for m in c.mismatches[:3]:
            print(f"{c.task} {c.episode}: {m}")
    print(f"{summary_line(family, comparisons)} ({time.perf_counter() - start:.0f} s)")
    return 0 if all(c.agree for c in comparisons) else 1
