"""What an RL run of the agent job changed, read from its run folder: held-out tasks solved
before and after by how the question names the meeting, tasks up and down, its steps
(sampled success, groups with a signal, seconds of rollouts and update, for a run with
the difficulty-pool curriculum the tasks re-drawn, for one with dynamic sampling the groups
with a signal after refilling), and (for a run that kept its rollouts,
``logging.rollouts=true``) how often GiGPO's step clusters compare outcomes.

    python benchmarks/calendar_runs.py runs/agent_calendar [more run folders ...]

Held-out results come from ``run_dir/heldout/step-0.json`` and the last step's file (task
seed -> solved), the question from ``make_task("test", seed)``. A step cluster is every
step of one group with the same ``state_key`` (the task and the tool calls and results so
far); the first state, which all of a group's episodes share, is left out, so the counts
show how often a later decision (which day to list, which meeting to open) meets another
episode's same decision with another outcome.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

from agentgym.envs.calendar.env import make_task

KINDS = ("title", "time", "last", "first")


def kind(prompt: str) -> str:
    """How the question names its meeting: by title, by start time, or first/last of a day."""
    if "my first meeting" in prompt:
        return "first"
    if "my last meeting" in prompt:
        return "last"
    return "time" if re.search(r"my \d\d:\d\d meeting", prompt) else "title"


def heldout(run: Path) -> str:
    files = sorted((run / "heldout").glob("step-*.json"), key=lambda p: int(p.stem[5:]))
    if len(files) < 2:
        return "no held-out evaluation before and after"
    before, after = (json.loads(p.read_text()) for p in (files[0], files[-1]))
    solved: dict[str, list[int]] = {k: [0, 0, 0] for k in KINDS}
    for seed, was in before.items():
        row = solved[kind(make_task("test", int(seed)).prompt)]
        row[0] += bool(was)
        row[1] += bool(after[seed])
        row[2] += 1
    up = sum(1 for s in before if after[s] and not before[s])
    down = sum(1 for s in before if before[s] and not after[s])
    n = len(before)
    gain = 100 * (sum(map(bool, after.values())) - sum(map(bool, before.values()))) / n
    kinds = ", ".join(f"{k} {b} -> {a} of {t}" for k, (b, a, t) in solved.items())
    return f"held-out {gain:+.1f} points over {n} tasks; {up} up, {down} down; {kinds}"


def steps(run: Path) -> str | None:
    if not (run / "metrics.jsonl").is_file():
        return None
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "success_rate" in r]
    if not rows:
        return None
    success = ", ".join(f"{100 * r['success_rate']:.0f}" for r in rows)
    # zero_variance_groups is the share of a step's groups whose rollouts scored alike
    signal = sum(round((1 - r["zero_variance_groups"]) * r["groups_trained"]) for r in rows)
    line = (f"{len(rows)} steps; sampled success {success}%; {signal} groups with a signal; "
            f"rollouts {sum(r['rollout_s'] for r in rows) / len(rows):.1f} s, "
            f"update {sum(r['update_s'] for r in rows) / len(rows):.1f} s a step")
    if any("pool/revisited" in r for r in rows):
        line += f"; {sum(round(r.get('pool/revisited', 0)) for r in rows)} tasks re-drawn"
    if any("dynamic/unfilled_groups" in r for r in rows):
        # a degenerate group is replaced when a fresh draw has a signal; the rest stay
        kept = sum(round(r["groups_trained"] - r.get("dynamic/unfilled_groups", 0)) for r in rows)
        drawn = sum(round(r.get("dynamic/drawn_groups", 0)) for r in rows)
        line += f"; {kept} with a signal after refilling ({drawn} fresh groups drawn)"
    return line


def clusters(run: Path) -> str | None:
    files = sorted((run / "rollouts").glob("step-*.jsonl"))
    if not files:
        return None
    count: Counter[str] = Counter()
    for path in files:
        groups: dict[str, list[dict]] = defaultdict(list)
        for line in path.read_text().splitlines():
            episode = json.loads(line)
            groups[episode["group_id"]].append(episode)
        for episodes in groups.values():
            count["groups"] += 1
            outcomes = [e["outcome_reward"] or 0.0 for e in episodes]
            count["groups with two outcomes"] += len(set(outcomes)) > 1
            by_state: dict[str, list[float]] = defaultdict(list)
            for episode, outcome in zip(episodes, outcomes, strict=True):
                for step in episode["steps"][1:]:
                    by_state[step["state_key"]].append(outcome)
                    count["later steps"] += 1
            for seen in by_state.values():
                if len(seen) > 1 and len(set(seen)) > 1:
                    count["clusters with two outcomes"] += 1
                    count["steps in them"] += len(seen)
    return (f"{count['groups']} groups, {count['groups with two outcomes']} with two outcomes; "
            f"{count['clusters with two outcomes']} later-step clusters with two outcomes, "
            f"holding {count['steps in them']} of {count['later steps']} later steps")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    for run in parser.parse_args().runs:
        print(f"{run}: {heldout(run)}")
        for seen in (steps(run), clusters(run)):
            if seen:
                print(f"  {seen}")


if __name__ == "__main__":
    main()
