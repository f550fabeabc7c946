"""The credit study's page (``docs/learning.md``), assembled per env from its records.

:mod:`.page` and :mod:`.accumulation` write the lines; this module orders them: the answer
so far, one section per env, and the GPU-scale section where ``--scale`` runs have finished.
"""

from __future__ import annotations

import json
from pathlib import Path

from agentgym.trainers.study.accumulation import (
    accumulation_lines,
    accumulation_summary,
    rates_table,
)
from agentgym.trainers.study.findings import AGENT_JOB, FUNCTION_CALLING
from agentgym.trainers.study.page import (
    across_line,
    curve_lines,
    divergence_line,
    finer_line,
    machines_line,
    moves_line,
    plot,
    reading_line,
    resolution_line,
    rl_table,
    sft_lines,
    sft_where,
    variants,
    verdict_line,
    warmth_line,
)
from agentgym.trainers.study.setups import SUPERSEDED
from agentgym.trainers.study.units import (
    HELD_OUT_FIRST_SEED,
    TUNING_FIRST_SEED,
    Setup,
    Unit,
    units,
)


def report(setups: list[Setup], cache: Path, command: str, out: Path,
           records: Path | None = None, scaled_setups: list[Setup] | None = None,
           scaled_records: Path | None = None) -> str:
    """The page, from the records: the answer so far, then one section per env.

    Args:
        setups: The envs' setups, in page order.
        cache: Where the units' files are (an unfinished SFT run's progress is read there).
        command: The command line that reproduces the page, quoted on it.
        out: Where the page goes; its learning-curve plots are written beside it.
        records: The finished units' results (default: the cache).
        scaled_setups: The ``--scale`` setups; envs with a finished unit get a GPU section.
        scaled_records: Their records.
    """
    lines = ["# Learning: does step-level credit beat GRPO on multi-turn tasks?", "",
             "Written by `benchmarks/credit_study.py` from its records (one JSON file per "
             "finished unit, committed under `benchmarks/credit_study/`); every figure in the "
             "env sections below was measured by it (the agent job's and BFCL's findings "
             "before them by the commands their own pages name). Reproduce (and continue: "
             "finished units are never redone, unfinished ones resume, and a fresh clone "
             "first makes again the demonstrations "
             f"and the SFT model that the next unit reads):\n\n    {command}\n",
             "Recipe: SmolLM2-135M-Instruct, supervised warm start on expert episodes "
             "(`agentgym sft`), then RL (`agentgym train`) from that model with each "
             "estimator under one budget and the same seeds. Held-out success is on seeds "
             f"{HELD_OUT_FIRST_SEED:,}+, greedy unless an env's section says it is sampled; "
             f"the SFT amount is judged on tuning seeds {TUNING_FIRST_SEED:,}+ only.", "",
             *AGENT_JOB, *FUNCTION_CALLING]
    rl = [u for s in setups for u in units(s, cache, records) if u.kind == "rl"]
    finished = sum(u.done for u in rl)
    if not finished:
        lines += ["**Result so far: none.** No RL run has finished yet, so this page does not "
                  "yet say whether step-level credit beats GRPO here; the units below continue "
                  "with the command above (the cache resumes them).", ""]
    else:
        lines += [f"**Result so far: incomplete.** {finished} of {len(rl)} RL runs have "
                  "finished; an env draws a comparison only once every run of its has. The "
                  "command above continues the rest." if finished < len(rl)
                  else f"**Result.** All {len(rl)} RL runs have finished.", ""]
        lines += [summary_line(s, cache, records) for s in setups] + [""]
        compared = [evidence(s, cache, records) for s in setups if len(variants(s)) > 1
                    and s.band is not None and not s.arm]
        lines += [across_line(compared), ""] if len(compared) > 1 else []
    for s in setups:
        lines += setup_lines(s, cache, records, out, heading="##")
    gpu = [s for s in scaled_setups or [] if not s.arm
           and any(u.done for u in units(s, cache, scaled_records))]
    if gpu:
        lines += ["## At GPU scale (`--scale`)", "",
                  "The same study with the budget `scaled()` sets for a GPU machine: four "
                  "times the demonstrations, steps and tasks per step, groups of 8, 128 "
                  "evaluation seeds, float32 weights on CUDA. Its records live under "
                  "`benchmarks/credit_study/scaled/`; the machine is named beside each "
                  "figure. Reproduce (and continue):\n\n    "
                  "flock /tmp/heavy.lock python benchmarks/credit_study.py --scale "
                  f"--envs {','.join(s.name for s in gpu)}\n", ""]
        for s in gpu:
            lines += setup_lines(s, cache, scaled_records, out, heading="###", suffix="_scaled")
    return "\n".join(lines)


def evidence(s: Setup, cache: Path, records: Path | None) -> tuple:
    """An env's finished and planned RL runs, finer results, warm start's and revisits."""
    all_units = list(units(s, cache, records))
    rl = [u for u in all_units if u.kind == "rl"]
    finer = {(u.variant, u.seed): u.result() for u in all_units if u.kind == "final" and u.done}
    base = next((u.result() for u in all_units if u.kind == "baseline" and u.done), None)
    rev = next((u.result() for u in all_units if u.kind == "revisits" and u.done), None)
    return s, [u for u in rl if u.done], rl, finer, base, rev


def summary_line(s: Setup, cache: Path, records: Path | None) -> str:
    """The env's answer in one bullet, for the top of the page."""
    _, done, rl, finer, base, rev = evidence(s, cache, records)
    line = verdict_line(s, done, rl, finer, base, rev)
    return line + (accumulation_summary(s, done) if s.accumulations != ("none",) else "")


def setup_lines(s: Setup, cache: Path, records: Path | None, out: Path, heading: str,
                suffix: str = "") -> list[str]:
    """One env's section: its warm start, revisits and RL runs, from its records."""
    lines: list[str] = []
    all_units = list(units(s, cache, records))
    title = (f"G-RA against direct accumulation: {s.title}" if s.band is None
             else s.title)
    lines += [f"{heading} {title}", "",
              f"Env kwargs {s.kwargs}, at most {s.max_turns} turns, window context "
              f"K={s.history_length}, {s.max_tokens} tokens per action. RL budget: "
              f"{s.steps} steps × {s.tasks_per_step} tasks × {s.group_size} rollouts, "
              f"lr {s.lr}, held-out evaluation on {s.eval_seeds} seeds"
              + (f" ({s.eval_kwargs})" if s.eval_kwargs else "")
              + (f" sampled at T={s.eval_temperature}" if s.eval_temperature else "")
              + f" every {s.eval_every} steps.", ""]
    lines += [s.about, ""] if s.about else []
    lines += sft_lines(s, next(u for u in all_units if u.kind == "sft"))
    if not s.arm:  # the env's own warm starts, listed in its own section
        lines += superseded_lines(s, records if records is not None else cache)
    warm = next((u for u in all_units if u.kind == "warmth"), None)
    if warm is not None and warm.done:
        lines += [warmth_line(s, warm.result(),
                              next(u for u in all_units if u.kind == "demos")), ""]
    blind = next((u for u in all_units if u.kind == "random"), None)
    if blind is not None and blind.done:
        r = blind.result()
        lines += [f"**Random play** (`--policy random`: a uniformly random tool call each "
                  f"turn, blind to the board): tuning-seed success {r['tuning_success']:.0%}"
                  f" over {r['episodes']} seeds, the floor a warm start that reads the "
                  "board should clear.", ""]
    rev = next((u for u in all_units if u.kind == "revisits"), None)
    if rev is not None and rev.done:
        r = rev.result()
        shares = ", ".join(f"level {k}: {v:.0%}" for k, v in r["share_grouped"].items())
        lines += [f"**State revisits** ({r['groups']} groups of {r['group_size']} rollouts "
                  f"of the SFT model at T=1, {r['steps']} steps; success "
                  f"{r['train_success_t1']:.0%}): share of steps whose HGPO level-k group "
                  f"has another member: {shares}. Level 1 is GiGPO's anchor-state group"
                  + (f"; {r['note']}" if r.get("note") else "") + ".", ""]
    return lines + rl_lines(s, all_units, out, suffix)


def rl_lines(s: Setup, all_units: list[Unit], out: Path, suffix: str) -> list[str]:
    """One env's RL runs: their table, what the evaluation resolves, and the reading."""
    lines: list[str] = []
    rl = [u for u in all_units if u.kind == "rl"]
    done = [u for u in rl if u.done]
    finer = {(u.variant, u.seed): u.result() for u in all_units if u.kind == "final" and u.done}
    base = next((u.result() for u in all_units if u.kind == "baseline" and u.done), None)
    if done:
        lines += rl_table(s, done, finer)
        machines = machines_line(done)
        lines += ["", machines] if machines else []
        curves = curve_lines(s, done)
        lines += ["", *curves] if curves else []
        lines += ["", resolution_line(s, done)]
        if base is not None:
            lines += ["", finer_line(s, base)]
            moves = moves_line(s, finer, base)
            lines += ["", moves] if moves else []
        lines += [x for x in [divergence_line(s, done)] if x]
        lines += [f"\n- {u.variant} seed {u.seed}: {u.result()['note']}." for u in done
                  if u.result().get("note")]
        lines += ["", reading_line(s, done, finer, base)]
        if s.accumulations != ("none",):  # G-RA against direct: what they trained on
            lines += ["", *rates_table(s, done)]
            more = accumulation_lines(s, done)
            lines += ["", *more] if more else []
        png = plot(s, done, out.parent, suffix)
        lines += ["", f"![learning curves]({png.name})", ""]
    missing = [f"{u.variant}/seed {u.seed}" for u in rl if not u.done]
    lines += [f"RL runs finished: {len(done)} of {len(rl)}"
              + (f"; still to run: {', '.join(missing)}." if missing else "."), ""]
    return lines


def superseded_lines(s: Setup, records: Path) -> list[str]:
    """Earlier warm starts of this env, from their records, and why they were left."""
    lines = []
    for key, differs in SUPERSEDED.get(s.name, {}).items():
        folder = records / s.name / key
        if not folder.with_suffix(".json").is_file():
            continue
        r = json.loads(folder.with_suffix(".json").read_text())
        line = (f"- superseded warm start `{key}` ({differs}): greedy {sft_where(s)} success "
                f"{r['tuning_success_before']:.0%} → {r['tuning_success_after']:.0%}")
        if r.get("completion_loss"):
            line += (", loss per completion (nats) "
                     + " → ".join(f"{nats:.2f}" for _, _, nats in r["completion_loss"]))
        warm = sorted(folder.glob("warmth-*.json"))
        if warm:
            w = json.loads(warm[0].read_text())
            line += f", sampled at T={w['temperature']} {w['tuning_success']:.0%} of tuning seeds"
            if "demonstration_fit" in w:
                line += f", fit to its demonstrations {w['demonstration_fit']:.0%}"
        elif (folder / "revisits.json").is_file():
            rev = json.loads((folder / "revisits.json").read_text())
            line += f", sampled at T=1 {rev['train_success_t1']:.0%} of training rollouts"
        lines.append(line + ".")
    return [*lines, ""] if lines else []
