"""Does step-level credit beat GRPO on multi-turn tasks? SFT-warm SmolLM2, then RL.

    python benchmarks/credit_study.py                 # unfinished units for 14 minutes
    python benchmarks/credit_study.py --all           # every unit, no time limit
    python benchmarks/credit_study.py --report        # only rewrite docs/learning.md
    python benchmarks/credit_study.py --scale         # GPU: bigger groups, vLLM-free budget x4

Units, per env (Sokoban, TextArena FrozenLake; then SWE for G-RA), in order:

1. ``demos``: expert episodes on training seeds (``agentgym rollout ENV --policy expert``);
2. ``sft``: ``agentgym sft`` of SmolLM2 on them; its evaluation uses *tuning* seeds
   (500,000+), so the SFT amount is chosen without looking at the held-out seeds;
3. ``warmth`` (envs measured sampled, ``eval_temperature``): the SFT model sampled on the
   tuning seeds;
4. ``revisits``: groups of SFT-model rollouts on training seeds; the share of steps whose
   HGPO level-k group (same last k state keys within the group) has another member;
5. ``rl``: ``agentgym train`` from the SFT model with GRPO, GiGPO, HGPO and SALT, 3 seeds
   each, one budget (steps × tasks × group size), held-out success (1,000,000+; greedy, or
   sampled at ``eval_temperature``) before, every ``eval_every`` steps and after. RL runs
   wait until the SFT model's tuning-seed success, measured the same way, is within
   ``BAND`` (15-60%): below it most groups hold no reward difference to learn from.

SWE compares reward accumulation instead of estimators: GRPO with G-RA (``gated``) against
``direct``, SFT-warm from the oracle episodes, with the training rollouts' completion,
modification and resolve rates per step; it needs Docker and does not wait on the band. It
runs twice, from two warm starts: ``swe`` on the oracle's ``git apply`` calls, ``swe_editor``
on the oracle as ``editor`` calls (``expert=editor``), under one RL budget.

Every unit runs as a subprocess of the CLI, keyed by env, estimator, seed and budget. Its
files (rollouts, checkpoints, models) go under ``--cache`` (default
``~/.cache/agentgym/credit_study``, outside the clone, so a new clone on the same machine
finds them); its result, a small JSON file, goes under ``--records`` (default
``benchmarks/credit_study/``, committed), so finished units carry over to a fresh clone and
are never redone. An interrupted unit resumes from its last checkpoint (``--resume``;
checkpoints are resumable and saved every step); a finished training run keeps only its
last checkpoint's weights (about 0.5 GB, not 3 GB, per run). Where a finished unit's files
are needed by one still to run and the cache no longer holds them (a fresh clone), the unit
is run again into the cache, its record kept, and a regenerated result that differs from
the record is printed. ``--limit-minutes`` stops a unit (it then resumes on the next call),
so the study can go on across days on a shared machine; run each call under
``flock /tmp/heavy.lock``. ``docs/learning.md`` is rewritten after every call from the
records, saying which units are still missing.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import yaml
from credit_accumulation import accumulation_lines, accumulation_summary, rates_table
from credit_page import (
    across_line,
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
from credit_units import (
    BAND,
    CACHE,
    DEFAULT_ENVS,
    HELD_OUT_FIRST_SEED,
    RECORDS,
    ROOT,
    SCALED_RECORDS,
    TUNING_FIRST_SEED,
    Setup,
    Unit,
    machine,
    needed_files,
    run_unit,
    units,
    warm_enough,
)

SETUPS = {
    # one epoch of 100 solver episodes (at lr 5e-5, then 1e-4, see SUPERSEDED) taught the
    # tool-call format but not the move: the model gave its own demonstrations' moves 31%
    # (chance 25%) and sampled 8% of tuning seeds, below random play's 17.5%; so more
    # updates on the same episodes: three epochs at half the batch (six times the steps).
    # The ``--scale`` warm start (400 episodes, the same lr and batch, 738 steps) shows the
    # move is learnable: its loss over a completion stayed near ln 4 (a uniform guess among
    # four moves) for about 120 steps, then fell, to a fit of 76% and 41% sampled success.
    # Success is measured sampled at T=1 as on FrozenLake, the policy RL trains; held-out
    # evaluation before and after only
    "sokoban": Setup("sokoban", "agentgym/Sokoban-v0", {"max_steps_generation": 10},
                     max_turns=8, max_tokens=24, expert_episodes=100, sft_lr=1e-4,
                     sft_epochs=3, sft_batch=8, eval_temperature=1.0, eval_every=8,
                     random_episodes=200, final_draws=4, moves=4),
    # a short warm start: a policy that ignores the board ("down, right" repeated) wins 26%
    # of tuning seeds, so the format and the mix of moves put a model in the band, and what
    # RL can add is reading the board; greedy play of that model repeats one move (0%), so
    # success is measured sampled at T=1, the policy RL trains; held-out evaluation before
    # and after only, to fit the time
    "frozenlake": Setup("frozenlake", "textarena/FrozenLake-v0", {}, max_turns=10,
                        max_tokens=8, expert_episodes=30, sft_batch=8, eval_temperature=1.0,
                        eval_every=8, final_draws=4, moves=4),
    # G-RA against direct accumulation: oracle episodes (``git apply`` the fix, ``submit``) on
    # the 18 training repositories, held-out resolve on the 6 test ones (every test task);
    # an action holds up to 448 tokens, as the longest demonstrated patch call is 409
    "swe": Setup("swe", "agentgym/SWE-v0",
                 {"split": "train", "sandbox": "docker", "command_timeout": 20,
                  "test_timeout": 120}, max_turns=6, max_tokens=448, expert_episodes=18,
                 sft_epochs=3, sft_batch=4, steps=4, history_length=3, eval_seeds=6,
                 estimators=("grpo",), accumulations=("direct", "gated"), band=None,
                 eval_kwargs={"split": "test"},
                 rollout_options={"max_prompt_tokens": 3072, "step_timeout": 900},
                 optim_options={"mini_batches": 2, "max_tokens_per_micro_batch": 8192}),
}
# the second SWE arm (its ``about`` says why): RL trains on the 18 tasks demonstrated, so the
# warm start is fit to them (Sokoban's lr, ten epochs) until sampling reproduces their fixes;
# nothing in it was tuned on the held-out tasks
SETUPS["swe_editor"] = replace(
    SETUPS["swe"], name="swe_editor", kwargs={**SETUPS["swe"].kwargs, "expert": "editor"},
    sft_epochs=10, sft_lr=1e-4, label="editor demonstrations",
    about="The same comparison from a second warm start: the oracle demonstrated as `editor` "
          "calls (`expert=editor`: one `str_replace` per hunk, 57-251 tokens where the "
          "`git apply` calls take 178-398, with no diff headers whose line counts must be "
          "exact), fit to the 18 training tasks that RL trains on (10 epochs at lr 1e-4). The "
          "first warm start changed a file in 1 of its 192 training rollouts, so its runs could "
          "not show what the accumulations do once patches are made; the RL budget is the "
          "same.")


# warm starts the study moved away from, per env: their SFT key and what set them apart;
# their records stay, and the page lists them
SUPERSEDED = {"sokoban": {
    "sft-9bbc6798": "1 epoch, batch 16, lr 5e-5, left for being below the band",
    "sft-f3f31f68": "1 epoch, batch 16, lr 1e-4, left for being below the band"},
    "swe": {"sft-644d900b": "128 tokens per action where every demonstrated patch call needs "
                            "189-409: its model was cut off mid-call, 96-100% of its RL steps "
                            "invalid; `agentgym sft` now refuses such a setup"}}


def scaled(setup: Setup) -> Setup:
    """The ``--scale`` budget for a GPU machine: larger groups, more tasks and steps.

    Weights stay float32: a 135M model fits many times over, and bfloat16 weights (8
    mantissa bits) would round away most of an lr-1e-5 update. Checkpoints are sparser,
    since a GPU step takes a fraction of a second and a save about one.
    """
    return replace(setup, steps=setup.steps * 4, tasks_per_step=setup.tasks_per_step * 4,
                   group_size=8, eval_seeds=128, expert_episodes=setup.expert_episodes * 4,
                   device="cuda", sft_save_every=50)


# ---------------------------------------------------------------------------------- report

def report(setups: list[Setup], cache: Path, command: str, out: Path,
           records: Path | None = None, scaled_setups: list[Setup] | None = None,
           scaled_records: Path | None = None) -> str:
    lines = ["# Learning: does step-level credit beat GRPO on multi-turn tasks?", "",
             "Written by `benchmarks/credit_study.py` from its records (one JSON file per "
             "finished unit, committed under `benchmarks/credit_study/`); every figure below "
             "was measured by it. Reproduce (and continue: finished units are never redone, "
             "unfinished ones resume, and a fresh clone first makes again the demonstrations "
             f"and the SFT model that the next unit reads):\n\n    {command}\n",
             "Recipe: SmolLM2-135M-Instruct, supervised warm start on expert episodes "
             "(`agentgym sft`), then RL (`agentgym train`) from that model with each "
             "estimator under one budget and the same seeds. Held-out success is on seeds "
             f"{HELD_OUT_FIRST_SEED:,}+, greedy unless an env's section says it is sampled; "
             f"the SFT amount is judged on tuning seeds {TUNING_FIRST_SEED:,}+ only.", ""]
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
                    and s.band is not None]
        lines += [across_line(compared), ""] if len(compared) > 1 else []
    for s in setups:
        lines += setup_lines(s, cache, records, out, heading="##")
    gpu = [s for s in scaled_setups or [] if any(u.done for u in units(s, cache, scaled_records))]
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
    rl = [u for u in all_units if u.kind == "rl"]
    done = [u for u in rl if u.done]
    finer = {(u.variant, u.seed): u.result() for u in all_units if u.kind == "final" and u.done}
    base = next((u.result() for u in all_units if u.kind == "baseline" and u.done), None)
    if done:
        lines += rl_table(s, done, finer)
        machines = machines_line(done)
        lines += ["", machines] if machines else []
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


def finished_runs(every: list[Unit]) -> list[Path]:
    """Training folders no unit resumes: finished SFT runs (the later units read their
    exported model) and RL runs done with their finer evaluation (or that have none)."""
    finals = {u.folder.parent: u.done for u in every if u.kind == "final"}
    return [u.folder / "run" if u.kind == "rl" else u.folder for u in every
            if u.done and (u.kind == "sft"
                           or (u.kind == "rl" and finals.get(u.folder, True)))]


def run_setup(setup: Setup, every: list[Unit], args: argparse.Namespace, end: float) -> bool:
    """Run the setup's unfinished units in order; False when the time limit stopped one."""
    from agentgym.trainers.checkpoint import slim  # torch: only when units run

    for run in finished_runs(every):
        if freed := slim(run):
            print(f"freed {freed / 2**30:.1f} GiB of {run}: only its last checkpoint's "
                  "weights are kept", flush=True)
    for unit in (u for u in every if not u.done):
        if unit.kind in ("baseline", "rl", "final") \
                and not warm_enough(setup, args.cache, args.records):
            print(f"unit: {setup.name} rl waits: the SFT model's tuning-seed success "
                  f"is outside {BAND[0]:.0%}-{BAND[1]:.0%}", flush=True)
            return True
        chain = [unit]  # a fresh clone has the records but not the files: make them first
        while (lost := needed_files(chain[0], every)) is not None:
            chain.insert(0, lost)
        for todo in chain:
            left = end - time.time() if not args.all else 1e9
            if left < 60:
                return False
            print(f"unit: {setup.name} {todo.kind} {todo.estimator} {todo.seed}".strip()
                  + (" (its files, for the next unit)" if todo.done else ""), flush=True)
            if not run_unit(todo, args.cache, left):
                return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", default=DEFAULT_ENVS)
    parser.add_argument("--cache", type=Path, default=CACHE,
                        help="rollouts, checkpoints and models (large, not committed)")
    parser.add_argument("--records", type=Path, default=None,
                        help="finished units' results (small JSON, committed; default "
                             "benchmarks/credit_study/, with --scale its scaled/ folder)")
    parser.add_argument("--all", action="store_true", help="every unit, no time limit")
    parser.add_argument("--report", action="store_true", help="only rewrite docs/learning.md")
    parser.add_argument("--scale", action="store_true", help="GPU budget (see scaled())")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="change a Setup field (YAML value), e.g. --set steps=1; the "
                             "cache keys change with it")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "learning.md")
    parser.add_argument("--limit-minutes", type=float, default=14.0,
                        help="stop after this long (an unfinished unit resumes next call)")
    args = parser.parse_args()
    args.records = args.records or (SCALED_RECORDS if args.scale else RECORDS)
    setups = [SETUPS[name] for name in args.envs.split(",")]
    if args.scale:
        setups = [scaled(s) for s in setups]
    changes = {}
    for item in args.set:
        key, _, value = item.partition("=")
        parsed = yaml.safe_load(value)
        changes[key] = tuple(parsed) if isinstance(parsed, list) else parsed
    setups = [replace(s, **changes) for s in setups]
    if not args.report:
        # one env at a time: its demos, SFT and revisits before its RL runs
        end = time.time() + args.limit_minutes * 60
        for setup in setups:
            every = list(units(setup, args.cache, args.records))
            if not run_setup(setup, every, args, end):
                break
    # the page covers every env of the study, whichever this call worked on; a call's time
    # limit and env list are not part of what reproduces it; a --scale call's --set changes
    # its own setups only, and the other kind's records stay where they are
    command = " ".join(["flock /tmp/heavy.lock python benchmarks/credit_study.py",
                        *(f"--set {item}" for item in args.set if not args.scale)])
    names = DEFAULT_ENVS.split(",")
    cpu = [replace(SETUPS[n], **({} if args.scale else changes)) for n in names]
    gpu = [replace(scaled(SETUPS[n]), **(changes if args.scale else {})) for n in names]
    args.out.write_text(report(cpu, args.cache, command, args.out,
                               RECORDS if args.scale else args.records, gpu,
                               args.records if args.scale else SCALED_RECORDS))
    print(f"wrote {args.out} ({machine()})")


if __name__ == "__main__":
    main()
