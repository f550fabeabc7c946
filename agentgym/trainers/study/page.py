"""The credit study's page (``docs/learning.md``): the lines each finished unit writes.

:mod:`.report` assembles them per env; every figure comes from a unit's record.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentgym.evaluation.stats import seed_t_interval
from agentgym.trainers.study.units import (
    Setup,
    Unit,
    completion_loss,
    machine,
    metrics,
    variant_name,
)


def interval(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of a t 95% interval over seeds (0 for one seed)."""
    return seed_t_interval(values)


def points(change: float) -> str:
    """A change of success in signed points, one decimal: +0.0 where it rounds to nothing."""
    return f"{round(100 * change, 1) + 0.0:+.1f}"


def sft_where(s: Setup) -> str:
    """Which seeds judge the setup's warm start: held-out where RL does not wait on a band."""
    return "held-out" if s.band is None else "tuning-seed"


def sft_lines(s: Setup, sft: Unit) -> list[str]:
    """The warm start: its result, or how far it got."""
    where = sft_where(s)
    if sft.done:
        r = sft.result()
        lines = [f"**SFT warm start**: {s.expert_episodes} expert episodes "
                 f"({r['samples']:.0f} steps), {s.sft_epochs} epoch(s), lr {s.sft_lr}, "
                 f"batch {s.sft_batch}: greedy {where} success {r['tuning_success_before']:.0%}"
                 f" → {r['tuning_success_after']:.0%} ({r['wall_seconds'] / 60:.0f} min, "
                 f"{r['machine']})" + (f"; {r['note']}" if r.get("note") else "") + ".", ""]
        if r.get("completion_loss"):
            lines += [loss_line(r["completion_loss"], s.moves), ""]
        if s.band is not None and not s.eval_temperature \
                and not s.band[0] <= r["tuning_success_after"] <= s.band[1]:
            lines += [f"That is outside the {s.band[0]:.0%}–{s.band[1]:.0%} band of greedy "
                      "tuning-seed success this study starts RL from: with fewer "
                      "successes, most groups carry no reward difference to learn from; "
                      "with more, too little is left to gain. More demonstrations or "
                      "epochs (`--set expert_episodes=N`, `--set sft_epochs=N`, new cache "
                      "keys) move it; the RL runs below wait on it.", ""]
        return lines
    rows = metrics(sft.folder)
    steps = [r for r in rows if "loss" in r]
    if not steps:
        return ["**SFT warm start**: not started yet.", ""]
    plan = math.ceil(rows[0]["data/samples"] / s.sft_batch) * s.sft_epochs
    per_step = sum(r["update_s"] for r in steps) / len(steps)
    wall = sft.folder / "wall.json"  # the load when the unit last stopped
    where_run = json.loads(wall.read_text())["machine"] if wall.is_file() else machine()
    return [f"**SFT warm start**: not finished yet: {steps[-1]['step']} of {plan} optimizer "
            f"steps done on {rows[0]['data/samples']:.0f} expert steps ({s.expert_episodes} "
            f"episodes), loss {steps[0]['loss']:.3f} after the first step, "
            f"{steps[-1]['loss']:.3f} after the last, {per_step:.0f} s per optimizer step "
            f"({where_run}); {where} success of the base model "
            f"{rows[0]['eval/success_rate']:.0%}.", "",
            loss_line(completion_loss(rows, s.sft_batch), s.moves), ""]


def loss_line(stretches: Sequence[Sequence[float]], moves: int) -> str:
    """An SFT run's loss per completion over its steps, beside a uniform guess among moves.

    See ``completion_loss``; ``moves``: a grid game's moves (0: no guess is shown).
    """
    parts = ", ".join(f"{nats:.2f} (steps {a}–{b})" for a, b, nats in stretches)
    return ("Its loss per demonstrated completion, in nats, over the run: " + parts + "."
            + (f" A uniform guess among {moves} moves costs ln {moves} = "
               f"{math.log(moves):.2f}." if moves else ""))


def warmth_line(s: Setup, r: dict[str, Any], demos: Unit) -> str:
    """The SFT model sampled on tuning seeds: its success, the band, its favourite move."""
    line = (f"**Sampled at T={r['temperature']}** (the policy RL trains, and how this env's "
            f"held-out success is measured): tuning-seed success {r['tuning_success']:.0%} "
            f"over {r['episodes']} seeds")
    if s.band is not None:
        line += "; this is what the band is judged on"
        if not s.band[0] <= r["tuning_success"] <= s.band[1]:
            line += (f", and it is outside {s.band[0]:.0%}–{s.band[1]:.0%}: the RL runs below "
                     "wait on a warmer start")
    line += "."
    if "demonstration_fit" in r:
        line += (" On its own demonstrations' prompts it gives the demonstrated action "
                 f"{r['demonstration_fit']:.0%} probability on average.")
    expert = demos.result().get("top_action") if demos.done else None
    if "top_action" in r and expert:
        line += (f" Its most frequent action, `{r['top_action'][0]}`, is "
                 f"{r['top_action'][1]:.0%} of its moves; the demonstrations' most frequent, "
                 f"`{expert[0]}`, {expert[1]:.0%} of theirs.")
    return line


def binomial(success: float, n: int) -> tuple[float, float]:
    """``success`` kept one episode away from 0 and 1, and its 95% binomial half-width.

    The half-width is that of a figure from ``n`` episodes there.
    """
    p = min(max(success, 1 / n), 1 - 1 / n)
    return p, 1.96 * math.sqrt(p * (1 - p) / n)


def resolution(s: Setup, done: list[Unit]) -> tuple[float, float]:
    """The runs' mean starting success and one run's 95% binomial half-width there.

    One run's held-out figure counts ``eval_seeds`` episodes.
    """
    before = [u.result()["held_out_before"] for u in done]
    return binomial(sum(before) / len(before), s.eval_seeds)


def resolution_line(s: Setup, done: list[Unit]) -> str:
    """How far apart two held-out figures must be before the evaluation can tell them apart."""
    p, half = resolution(s, done)
    raw = sum(u.result()["held_out_before"] for u in done) / len(done)
    at = f"{p:.0%}" if abs(raw - p) < 1e-9 else (
        f"{raw:.0%}; counted as one episode in {s.eval_seeds}, {p:.0%}, so that the "
        "interval is not zero")
    return (f"How finely this measures: one run's held-out figure counts {s.eval_seeds} "
            f"episodes, so at the starting success ({at}) its 95% binomial interval is "
            f"±{100 * half:.0f} points; over {len(s.seeds)} seeds the mean's is about "
            f"±{100 * half / math.sqrt(len(s.seeds)):.0f} from evaluation alone, before the "
            "runs' own spread.")


def _covered(done: list[Unit], finer: dict[tuple[str, int], dict[str, Any]],
             base: dict[str, Any] | None) -> bool:
    """Whether the finer evaluation covers the warm start and every finished run."""
    return base is not None and all((u.variant, u.seed) in finer for u in done)


def _before_after(u: Unit, finer: dict[tuple[str, int], dict[str, Any]],
                  base: dict[str, Any] | None) -> tuple[float, float]:
    """A run's held-out success before and after RL.

    By the finer evaluation where ``base`` (the warm start's) is given, else by the trainer's
    own.
    """
    if base is not None:
        return base["success"], finer[(u.variant, u.seed)]["success"]
    r = u.result()
    return r["held_out_before"], r["held_out_after"]


def _half(s: Setup, done: list[Unit], finer: dict[tuple[str, int], dict[str, Any]],
          base: dict[str, Any] | None) -> float:
    """The 95% binomial half-width of one model's held-out figure.

    By the finer evaluation where it covers every finished run, else by the trainer's own.
    """
    if _covered(done, finer, base) and base is not None:
        return binomial(base["success"], base["episodes"])[1]
    return resolution(s, done)[1]


def _changes(s: Setup, done: list[Unit], finer: dict[tuple[str, int], dict[str, Any]],
             base: dict[str, Any] | None) -> list[tuple[str, float, float, int, bool]]:
    """Per variant with finished runs: its mean change of held-out success, and more.

    The 95% half-width of that change over seeds, its seeds, and whether the change is beyond
    what the evaluation resolves for that many seeds.
    """
    use = base if _covered(done, finer, base) else None
    half = _half(s, done, finer, base)
    rows = []
    for variant in variants(s):
        pairs = [_before_after(u, finer, use) for u in done if u.variant == variant]
        if pairs:
            change, width = interval([after - before for before, after in pairs])
            rows.append((variant, change, width, len(pairs),
                         abs(change) > half / math.sqrt(len(pairs))))
    return rows


def _signal(s: Setup, done: list[Unit]) -> tuple[float, float] | None:
    """The training rollouts' mean success and the share of groups with a mixed outcome.

    Those are groups holding both a success and a failure (the only groups with nonzero
    advantages under a success reward); None where the runs recorded no training success.
    """
    train = [x or 0.0 for u in done for x in u.result().get("train_success", [])]
    if not train:
        return None
    p = sum(train) / len(train)
    return p, 1 - p ** s.group_size - (1 - p) ** s.group_size


def reading_line(s: Setup, done: list[Unit], finer: dict[tuple[str, int], dict[str, Any]],
                 base: dict[str, Any] | None) -> str:
    """What an env's finished RL runs say so far.

    Each variant's change in held-out success (mean over its seeds) against what the
    evaluation resolves, and the training signal. Where the finer evaluation covers every
    finished run, the change is measured by it.
    """
    use_finer = _covered(done, finer, base)
    changes, moved, spread = [], [], []
    for variant, change, width, n, beyond in _changes(s, done, finer, base):
        changes.append(f"{variant} {points(change)} ({n} seed{'s' * (n > 1)})")
        if beyond:
            moved.append(variant)
            if n > 1 and abs(change) <= width:
                spread.append(f"{variant} ({points(change)} ± {100 * width:.1f})")
    signal = _signal(s, done)
    episodes = s.steps * s.tasks_per_step * s.group_size
    line = (f"**Reading so far** ({len(done)} runs of {episodes} training episodes each): "
            + ("by the finer evaluation, " if use_finer else "")
            + "held-out success changed by " + ", ".join(changes) + " points. ")
    if moved:
        line += (", ".join(moved) + " moved it by more than the evaluation resolves for "
                 "its number of seeds (see above).")
        if spread:
            line += (" Yet the seeds disagree: the 95% interval over seeds of "
                     + ", ".join(spread) + " holds no change: the runs' own spread, "
                     "not the evaluation, keeps them from telling the estimators apart.")
    else:
        line += ("No change is larger than the evaluation resolves for its number of seeds "
                 "(see above), so these runs cannot tell "
                 + ("the estimators apart, for or against step-level credit."
                    if s.accumulations == ("none",) else
                    "the accumulations apart by held-out success."))
    if signal is not None and s.accumulations == ("none",):  # else: .accumulation
        p, mixed = signal
        line += (f" Training rollouts succeeded {p:.0%} of the time on average; at that rate "
                 f"about {mixed:.0%} of groups of {s.group_size} hold both a success and a "
                 "failure, the only groups whose advantages are not all zero under a "
                 "success reward.")
    return line


def divergence_line(s: Setup, done: list[Unit]) -> str:
    """How far each run drew apart from the first variant's run of its seed.

    Both had the same tasks and sampling seeds: a training step whose rollouts hold as many
    tokens in both drew, most likely, the same rollouts. Both start from the SFT model, so
    their first steps match unless the rollouts themselves were not reproducible; that is
    counted apart.
    """
    first = variants(s)[0]
    ref = {u.seed: u.result().get("step_tokens") for u in done if u.variant == first}
    counts: dict[str, list[int]] = {}
    starts = [0, 0]
    for u in done:
        mine, theirs = u.result().get("step_tokens"), ref.get(u.seed)
        if u.variant == first or not mine or not theirs:
            continue
        pairs = list(zip(mine, theirs, strict=False))
        seen = counts.setdefault(u.variant, [0, 0])
        seen[0] += sum(a == b for a, b in pairs[1:])
        seen[1] += len(pairs) - 1
        starts[0] += pairs[0][0] == pairs[0][1]
        starts[1] += 1
    if not counts:
        return ""
    line = ("\nHow far the runs drew apart: training steps after the first whose rollouts "
            f"held exactly as many tokens as {first}'s of the same seed (same tasks and "
            "sampling seeds), most likely the same rollouts: "
            + ", ".join(f"{v} {a} of {n}" for v, (a, n) in counts.items())
            + f". A run that matches at every step sampled as {first}'s did throughout: "
            "its updates moved the policy the same way (for SALT, see "
            "[when SALT's update is its base's](estimators.md#when-salts-update-is-its-bases)).")
    if starts[0] < starts[1]:
        line += (f" The first step, where both sample the same warm start, matched in "
                 f"{starts[0]} of {starts[1]} runs: where it did not, the rollouts were not "
                 "reproducible to begin with (another machine's float rounding, or generation "
                 "batches made up by the envs' timing: see "
                 "[determinism](evaluation.md#agentgym-eval)), so later steps that "
                 "differ say less about the updates.")
    return line


def curve_lines(s: Setup, done: list[Unit]) -> list[str]:
    """Held-out success at each evaluation along the runs, mean ± 95% over seeds.

    Only where the runs evaluated between their first and last step: then a shorter budget
    reads off the same curves (the trainer's own draw at each point).
    """
    curves = {v: [dict(r["curve"]) for r in _results(done, v)] for v in variants(s)}
    every = [c for cs in curves.values() for c in cs]
    steps = sorted(set.intersection(*(set(c) for c in every))) if every else []
    if len(steps) < 3:
        return []
    rows = [f"| {v} | {len(cs)} | " + " | ".join(
        "{:.1%} ± {:.1%}".format(*interval([c[k] for c in cs])) for k in steps) + " |"
        for v, cs in curves.items() if cs]
    return [f"Along the curves: held-out success at each evaluation (the trainer's draw, "
            f"{s.eval_seeds} held-out seeds; mean ± 95% over seeds), by RL step.", "",
            "| run | seeds | " + " | ".join(f"step {k}" for k in steps) + " |",
            "|---|---|" + "---|" * len(steps), *rows]


def machines_line(done: list[Unit]) -> str:
    """Which machine ran which runs, where more than one did.

    Their seconds compare only within a machine.
    """
    by: dict[str, list[str]] = {}
    for u in done:
        cpu = u.result().get("machine", "unknown machine").split(", load average")[0]
        by.setdefault(cpu, []).append(f"{u.variant} {u.seed}")
    if len(by) < 2:
        return ""
    return ("Runs by machine (train and wall seconds compare only within one): "
            + "; ".join(f"{cpu}: {', '.join(runs)}" for cpu, runs in by.items()) + ".")


def _results(done: list[Unit], variant: str) -> list[dict[str, Any]]:
    return [u.result() for u in done if u.variant == variant]


def variants(s: Setup) -> list[str]:
    """The setup's RL variants in page order: each estimator under each accumulation."""
    return [variant_name(e, a) for e in s.estimators for a in s.accumulations]


def rl_table(s: Setup, done: list[Unit], finer: dict[tuple[str, int], dict[str, Any]]
             ) -> list[str]:
    """Held-out success before and after RL, per estimator (mean ± 95% over seeds).

    With the finer evaluation of the runs' last checkpoints where it has run.
    """
    extra = bool(finer)
    head = "| run | seeds | held-out before | held-out after (mean ± 95%) | "
    head += "after, finer evaluation (mean ± 95%) | " if extra else ""
    lines = [head + "tokens/run | train s/run | wall min/run |",
             "|---|---|---|---|" + "---|" * extra + "---|---|---|"]
    for variant in variants(s):
        rs = _results(done, variant)
        if not rs:
            lines.append(f"| {variant} | 0 | | | " + "| " * extra + "| | |")
            continue
        before = interval([r["held_out_before"] for r in rs])
        after = interval([r["held_out_after"] for r in rs])
        cell = ""
        if extra:
            mine = [finer[(u.variant, u.seed)]["success"] for u in done
                    if u.variant == variant and (u.variant, u.seed) in finer]
            fine = interval(mine) if mine else None
            cell = (f"{fine[0]:.1%} ± {fine[1]:.1%} ({len(mine)}) | " if fine else "– | ")
        lines.append(f"| {variant} | {len(rs)} | {before[0]:.1%} | {after[0]:.1%} ± "
                     f"{after[1]:.1%} | {cell}{sum(r['tokens'] for r in rs) / len(rs):,.0f} | "
                     f"{sum(r['train_seconds'] for r in rs) / len(rs):.0f} | "
                     f"{sum(r['wall_seconds'] for r in rs) / len(rs) / 60:.1f} |")
    return lines


def verdict_line(s: Setup, done: list[Unit], rl: list[Unit],
                 finer: dict[tuple[str, int], dict[str, Any]], base: dict[str, Any] | None,
                 revisits: dict[str, Any] | None) -> str:
    """One env's answer for the page's summary.

    Each estimator's held-out success against GRPO's, and whether the gap between estimators
    exceeds the spread over seeds.
    """
    if not done:
        return f"- {s.title}: no RL run has finished (0 of {len(rl)})."
    use_finer = _covered(done, finer, base)
    means = _variant_means(s, done, finer, base)
    head = (f"- {s.title} ({len(done)} of {len(rl)} runs): held-out success of the last "
            + ("checkpoints, finer evaluation" if use_finer else "checkpoints")
            + ", mean ± 95% over seeds: "
            + ", ".join(f"{v} {m:.1%} ± {w:.1%}" + (f" ({n} seed)" if n == 1 else "")
                        for v, (m, w, n) in means.items())
            + (f"; warm start {base['success']:.1%}" if use_finer and base else "") + ".")
    if len(done) < len(rl) or len(means) < 2:
        return head + " Too few runs to compare yet."
    first = next(iter(means))
    beat = _beat_first(means)
    gap = max(m for m, _, _ in means.values()) - min(m for m, _, _ in means.values())
    widest = max(w for _, w, _ in means.values())
    if beat:
        head += f" {', '.join(beat)} beat {first}: their intervals over seeds do not overlap."
    elif gap == 0 and widest == 0:
        head += (f" Every run ended at the same held-out success ({means[first][0]:.1%}), so "
                 "held-out success cannot tell the variants apart here.")
    else:
        head += (f" No variant beat {first}: the largest gap between their means "
                 f"({100 * gap:.1f} points) is {'within' if gap <= widest else 'beside'} "
                 f"the widest spread over seeds (±{100 * widest:.1f}).")
    if use_finer and base and all(m < base["success"] for m, _, _ in means.values()):
        head += " No variant's mean ended above the warm start."
    if revisits:
        level1 = revisits["share_grouped"].get("1")
        if level1 is not None:
            head += (f" Step-level groups were there to use: {level1:.0%} of steps share "
                     "their state with another rollout of their group.")
    return head


def _variant_means(s: Setup, done: list[Unit], finer: dict[tuple[str, int], dict[str, Any]],
                   base: dict[str, Any] | None) -> dict[str, tuple[float, float, int]]:
    """Each variant's held-out success after RL: mean, 95% half-width over seeds, seeds.

    By the finer evaluation where it covers every finished run.
    """
    use = base if _covered(done, finer, base) else None
    means = {}
    for variant in variants(s):
        mine = [u for u in done if u.variant == variant]
        if mine:
            means[variant] = (*interval([_before_after(u, finer, use)[1] for u in mine]),
                              len(mine))
    return means


def _beat_first(means: dict[str, tuple[float, float, int]]) -> list[str]:
    """The variants whose interval over seeds lies wholly above the first variant's."""
    first, (m0, w0, _) = next(iter(means.items()))
    return [v for v, (m, w, _) in means.items() if v != first and m - w > m0 + w0]


def across_line(envs: list[tuple[Setup, list[Unit], list[Unit],
                                 dict[tuple[str, int], dict[str, Any]], dict[str, Any] | None,
                                 dict[str, Any] | None]]) -> str:
    """The study's answer over the envs that compare estimators, once each has every run.

    Where step-level credit beat GRPO, and, where it did not, the evidence on why: whether
    the step-level groups were there (revisits), whether any variant moved held-out success
    by more than the evaluation resolves, and how much of the training held a signal.
    ``envs``: (setup, finished runs, all runs, finer results, warm start's, revisits).
    """
    pending = [f"{s.title} ({len(done)} of {len(rl)})" for s, done, rl, *_ in envs
               if len(done) < len(rl)]
    if pending:
        return ("**Across envs**: drawn once every run of each env that compares estimators "
                f"has finished; waiting on {', '.join(pending)}.")
    won = {s.title: _beat_first(_variant_means(s, done, finer, base))
           for s, done, _, finer, base, _ in envs}
    first = variants(envs[0][0])[0]
    line = (f"**Across envs** ({len(envs)} that compare estimators, every run finished): "
            + (f"step-level credit beat {first} in none of them." if not any(won.values())
               else "; ".join(f"{env}: {', '.join(v)} beat {first}" for env, v in won.items()
                              if v) + f", in {sum(map(bool, won.values()))} of {len(envs)}."))
    grouped = [f"{s.title} {rev['share_grouped']['1']:.0%}" for s, *_, rev in envs
               if rev and "1" in rev["share_grouped"]]
    if grouped:
        line += (" The step-level groups were there to use: the share of the warm start's "
                 "steps that share their state with another rollout of their group was "
                 + ", ".join(grouped) + "; so too few revisits do not explain the outcome.")
    moved, noisy, within = [], [], []
    for s, done, _, finer, base, _ in envs:
        for variant, change, width, n, beyond in _changes(s, done, finer, base):
            name = f"{s.title} {variant} {points(change)}"
            if not beyond:
                within.append(name)
            else:
                (noisy if n > 1 and abs(change) <= width else moved).append(
                    name + (f" ± {100 * width:.1f}" if n > 1 else ""))
        p, mixed = _signal(s, done) or (0.0, 0.0)
        half = _half(s, done, finer, base)
        groups = s.steps * s.tasks_per_step
        line += (f" {s.title}: {groups * s.group_size} training episodes per run in "
                 f"{groups} groups, {p:.0%} of them successes, so about {mixed * groups:.0f} "
                 "groups per run held a reward difference to learn from; the evaluation "
                 f"resolves a mean over {len(s.seeds)} seeds to about "
                 f"±{100 * half / math.sqrt(len(s.seeds)):.0f} points.")
    line += (" Mean change of held-out success from the warm start, in points: within what "
             "the evaluation resolves: " + (", ".join(within) or "none"))
    if noisy:
        line += ("; beyond it, but with a 95% interval over seeds that holds no change: "
                 + ", ".join(noisy))
    if moved:
        line += "; beyond both the evaluation and the seeds' spread: " + ", ".join(moved)
    line += "."
    if not moved and not any(won.values()):
        line += (" No variant moved held-out success by more than the evaluation and its "
                 "seeds resolve: at this budget no estimator, GRPO included, changed it "
                 "measurably, so the study has too little signal to tell estimators "
                 "apart. This is a null result, not evidence against step-level credit; "
                 "a larger budget (`--scale`: four times the steps and tasks, groups of "
                 "8, 128 evaluation seeds) is the test that could tell.")
    return line


def finer_line(s: Setup, base: dict[str, Any]) -> str:
    """The warm start under the finer held-out evaluation, and what that evaluation resolves."""
    _, half = binomial(base["success"], base["episodes"])
    return (f"**Finer held-out evaluation**: {base['draws']} sampled episodes per held-out "
            f"seed ({base['episodes']} in all, sampling seed 1, so every model meets the same "
            f"random numbers), of the warm start and of each run's last checkpoint. The warm "
            f"start: {base['success']:.1%}; one model's figure resolves ±{100 * half:.0f} "
            "points (95% binomial), a mean over "
            f"{len(s.seeds)} seeds about ±{100 * half / math.sqrt(len(s.seeds)):.0f}. The "
            "trainer's own evaluation (the columns before it) is one draw, sampling seed 0, "
            "the same for every run: its 'before' is that one draw of the warm start.")


def moves_line(s: Setup, finer: dict[tuple[str, int], dict[str, Any]],
               base: dict[str, Any]) -> str:
    """Each last checkpoint's finer held-out success and most frequent action, by seed.

    Where a run fell far below the warm start, whether its play changed its main move.
    """
    def cell(r: dict[str, Any]) -> str:
        move = (f" `{r['top_action'][0]}` {r['top_action'][1]:.0%}"
                if r.get("top_action") else "")
        return f"{r['success']:.1%}{move}"

    runs = [f"{v}: " + ", ".join(f"seed {seed} {cell(finer[(v, seed)])}" for seed in s.seeds
                                 if (v, seed) in finer) for v in variants(s)
            if any((v, seed) in finer for seed in s.seeds)]
    if not runs:
        return ""
    return ("**Per run, finer evaluation** (success; most frequent action and its share of "
            f"the moves): warm start {cell(base)}; " + "; ".join(runs) + ".")


def plot(s: Setup, done: list[Unit], folder: Path, suffix: str = "") -> Path:
    """Held-out success (left) and the training rollouts' success (right) per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (held, train) = plt.subplots(1, 2, figsize=(10, 3.5), sharey=True)
    for i, variant in enumerate(variants(s)):
        runs = [u for u in done if u.variant == variant]
        for u in runs:
            r = u.result()
            label = variant if u.seed == min(x.seed for x in runs) else None
            held.plot(*zip(*r["curve"], strict=True), color=f"C{i}", alpha=0.8, marker="o",
                      label=label)
            steps = range(1, len(r["train_success"]) + 1)
            train.plot(steps, [x or 0.0 for x in r["train_success"]], color=f"C{i}",
                       alpha=0.8, label=label)
    held.set_xlabel("training step")
    held.set_ylabel("success")
    held.set_title(f"{s.title}: held-out")
    train.set_xlabel("training step")
    train.set_title("training rollouts (T=1)")
    held.legend()
    path = folder / f"learning_{s.name}{'_' + s.arm if s.arm else ''}{suffix}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
