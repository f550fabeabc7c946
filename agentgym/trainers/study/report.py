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
from agentgym.trainers.study.page import (
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
from agentgym.trainers.study.setups import SUPERSEDED
from agentgym.trainers.study.units import (
    HELD_OUT_FIRST_SEED,
    TUNING_FIRST_SEED,
    Setup,
    units,
)

# Measured by benchmarks/bfcl_recipe.sh; docs/bfcl.md has every category and the timings.
FUNCTION_CALLING = [
    "Function calling, single turn (`docs/bfcl.md`): SmolLM2-135M-Instruct trained on tasks "
    "agentgym generates (`agentgym/FunctionCalls-v0`, never BFCL's data; the recipe: a "
    "one-epoch LoRA warm start on 2,304 expert replies, then 12 GRPO steps of 8 x 8 samples "
    "rewarded by BFCL's AST checker), scored by BFCL's own checker (bfcl-eval 2026.3.23, BFCL "
    "V4 data) on every non-live entry and on its fixed sample of 20 entries a category, beside "
    "published BFCL V4 rows (their Non-Live AST also averages Java and JavaScript into simple; "
    "here Python only; Live AST is the unweighted mean of the four live AST categories). "
    "Reproduce (resumable; `SUITE=benchmarks/bfcl_nonlive.yaml` for every non-live entry, "
    "`SUITE=benchmarks/bfcl_live_ast.yaml` for every live AST entry):\n\n"
    "    bash benchmarks/bfcl_recipe.sh\n",
    "| model | Non-Live AST, all 1,000 | Non-Live Irrelevance, all 240 | Live AST, all 1,351 "
    "| Non-Live AST, sample of 80 | Live Simple AST, sample of 20 |",
    "|---|---:|---:|---:|---:|---:|",
    "| SmolLM2-135M-Instruct, base | 0.1 | 99.2 | 0.1 | 0.0 | 0.0 |",
    "| + warm start on 768 generated tasks (floats written `244.0`) | 13.6 | 7.5 | 5.8 | 16.3 "
    "| 15.0 (all 258: 19.4) |",
    "| + GRPO from it | 10.0 | 12.5 | 5.7 | 10.0 | 20.0 (all 258: 19.4) |",
    "| warm start on 2,304 (`244.0`), no RL | 20.7 | 26.2 | | 18.8 | 10.0 |",
    "| warm start on 768, whole numbers written as asked (`244`), no RL | 19.0 | 5.0 | | 13.8 "
    "| 15.0 |",
    "| **+ warm start on 2,304, written as asked (the recipe's)** | **28.6** | 25.8 | | | |",
    "| + GRPO from it | 22.3 | 43.3 | | | |",
    "| warm start on 768 (`244`), half of them about synthesized functions, no RL | 19.2 "
    "| 5.8 | | | |",
    "| warm start on 768 (`244`), every weight trained instead of LoRA, no RL | 23.9 | 91.7 "
    "| 6.0 | 20.0 | 25.0 |",
    "| the same on another draw of 768 tasks (seeds 768-1,535) | 28.2 | 39.2 | | | |",
    "| the same on a third draw (seeds 1,536-2,303) | 22.8 | 28.3 | | | |",
    "| the first draw with varied requests (`requests=varied`) | 25.9 | 79.2 | | | |",
    "| warm start on 2,304 (`244`), every weight trained instead of LoRA, no RL | 29.1 | 63.3 "
    "| 10.5 | 25.0 | 35.0 |",
    "| the same, its calls from a grammar of the offered tools (`--constrain-tool-calls`) "
    "| 37.2 | 62.9 | 16.4 | | |",
    "| GRPO from the every-weight warm start on 2,304 (the recipe's RL stage) | 28.6 | 58.3 "
    "| | | |",
    "| the same, its calls from the grammar | 36.4 | 57.9 | 16.8 | | |",
    "| Granite-4.0-350m (published) | 67.92 | | | | |",
    "| Hammer2.1-0.5b (published) | 65.98 | | | | |",
    "| Qwen3-0.6B (FC) (published) | 71.79 | | | | |", "",
    "Imitation taught the calls, and more of it taught more: the same one-epoch SFT on three "
    "times the generated tasks (2,304) took held-out success on the generated env from 29.5% "
    "to 54.5% and BFCL non-live AST from 13.6% to 20.7%; demonstrations that write a whole "
    "float as the request does (`244`, not `244.0`, a change chosen after reading BFCL's "
    "verdicts: arguments of the wrong type fell from 76 to 14 of 400 simple entries) took the "
    "768-task warm start to 19.0%; the two together to 28.6% (simple 44.2, multiple 40.0, "
    "parallel 23.5, parallel multiple 6.5), beyond the paired intervals on simple, multiple "
    "and parallel against three times the data alone and on multiple, parallel and parallel "
    "multiple against whole numbers alone (one SFT run each; 79 minutes of SFT for 2,304 "
    "tasks). The 50% target is missed by 21.4 points. "
    "RL did not add from either LoRA warm start: held-out success on 200 generated test tasks "
    "29.5% → 26.0% (-3.5 points, 95% interval -8.0 to +1.0) from the 768-task one, which "
    "lost BFCL's parallel calls (196 of the 200 parallel replies became a single call), and "
    "55.0% → 50.5% (-4.5, -10.0 to +1.0) from the recipe's, which "
    "took BFCL non-live AST from 28.6% to 22.3% by leaving arguments out (a required one: 15 "
    "to 66 of 400 simple entries) and declining more (irrelevance 25.8% to 43.3%). Sampled "
    "at T = 1 a fifth to a half of the warm starts' replies do not parse and about half the "
    "groups carried no signal (AMD EPYC, 2 cores, load average about 2). "
    "Nor did the warm start's score come from knowing the library's 55 functions: with half "
    "of the 768 demonstrations about functions composed from a vocabulary instead (2,048 "
    "training signatures, `functions=both`), non-live AST was 19.2% against 19.0%, no "
    "category moving beyond noise (one SFT run each). "
    "Training every weight instead of LoRA adapters (same 768 tasks, lr 1e-4, 79 s a step "
    "against the adapters' 71) mattered more: non-live AST 23.9% against 19.0% (multiple "
    "+11.5, parallel +8.5, both beyond their intervals; simple -3.8), held-out success on the "
    "generated env 58.0% against 29.5%, and irrelevance detection 91.7% against 5.0%: the "
    "adapters call a function for 95% of the requests no offered function serves, this warm "
    "start learned when none fits, at the price of declining 56 of 400 simple requests that "
    "it should have served. On 2,304 tasks every weight reached non-live AST 29.1%, level "
    "with the recipe's adapters on the same data (28.6%; no AST category apart beyond its "
    "interval), with irrelevance detection 63.3% against their 25.8% and held-out success on "
    "the generated env 76.0% against 55.0%: more demonstrations teach the generated tasks "
    "far better than BFCL's requests (90 minutes of SFT, 6.1 GB for the training process). "
    "Its live AST, 10.5% (Live Simple 22.5, Live Multiple 11.2), is the best measured "
    "with free decoding (every weight on 768: 6.0%). "
    "Decoding that warm start with each call block sampled from a grammar of the entry's "
    "functions (`--constrain-tool-calls` on the vLLM backend: an offered name, arguments "
    "valid under its schema, prose left free; no weight changed, built once and not chosen "
    "from BFCL's entries) took non-live AST from 29.1% to 37.2% (simple +9.5, multiple "
    "+11.5, parallel multiple +5.0, each beyond its paired interval; irrelevance unchanged) "
    "and live AST from 10.5% to 16.4%: it removes what a schema forbids (required arguments "
    "left out, wrong types, values JSON cannot hold), not strings in forms other than "
    "BFCL's answer or too few parallel calls. The 50% target is missed by 12.8 points. "
    "The recipe's RL stage, unchanged, from that warm start gained on the generated env for "
    "the first time (held-out 76.0% → 79.0%, +3.0 points, 95% interval +0.5 to +6.0, all on "
    "parallel requests; 60% of its training samples succeeded, against 16% from the 768-task "
    "adapters) but moved no BFCL category beyond its interval: non-live AST 29.1% → 28.6% "
    "decoded freely, 37.2% → 36.4% under the grammar (live AST under the grammar 16.4% → "
    "16.8%). It raised the number of calls per "
    "reply everywhere, which helped BFCL's parallel multiple entries (too few calls: 84 → 72 "
    "of 200) and cost its simple ones (too many: 0 → 18 of 400) and irrelevance detection "
    "(63.3% → 58.3%). "
    "Which 768 tasks a warm start saw moved BFCL as much as anything compared at that size: "
    "the every-weight SFT on three draws of 768 generated tasks (seeds 0, 768 and 1,536 "
    "onwards; nothing else changed) scored non-live AST 23.9%, 28.2% and 22.8% (mean 25.0%, "
    "standard deviation 2.9 points) and irrelevance detection 91.7%, 39.2% and 28.3%; the "
    "paired intervals over BFCL's entries do not hold that spread, so the single-run "
    "comparisons at 768 tasks above differ by about as much as two draws do, and the 91.7% was "
    "one draw's. Varied requests (`requests=varied`: greetings, optional arguments stated, "
    "asks enumerated as First/Second/Finally, written after reading BFCL's replies) on the "
    "first draw scored 25.9% (irrelevance 79.2%), inside that spread; they raised the calls "
    "per reply on every category (parallel multiple 3.42 → 4.43, where BFCL's answers hold "
    "3.04), so the recipe keeps plain requests.", "",
    "Would faster generation let this study run at four times the steps? One Sokoban step of "
    "`examples/train_sokoban.yaml` (16 episodes, about 101.6k trained tokens) on AMD EPYC, 2 "
    "cores, idle: 487 s in the earlier measurement (generation 210 s with transformers, "
    "update 277 s); now 233-255 s with vLLM (generation 69-75 s, update 163-178 s) and 237 s with "
    "transformers (77 s and 160 s): 2.0x, short of the 3x at which the 4x-step Sokoban arm "
    "was to be rerun, so it was not. The update bounds it: 68-70% of a step, so even "
    "generation in no time would leave 2.7-3.0x (`docs/benchmarks.md`, vLLM vs "
    "transformers).", ""]


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
             "finished unit, committed under `benchmarks/credit_study/`); every figure below "
             "was measured by it. Reproduce (and continue: finished units are never redone, "
             "unfinished ones resume, and a fresh clone first makes again the demonstrations "
             f"and the SFT model that the next unit reads):\n\n    {command}\n",
             "Recipe: SmolLM2-135M-Instruct, supervised warm start on expert episodes "
             "(`agentgym sft`), then RL (`agentgym train`) from that model with each "
             "estimator under one budget and the same seeds. Held-out success is on seeds "
             f"{HELD_OUT_FIRST_SEED:,}+, greedy unless an env's section says it is sampled; "
             f"the SFT amount is judged on tuning seeds {TUNING_FIRST_SEED:,}+ only.", "",
             "What makes SmolLM2-135M learn a multi-turn, tool-using task on this CPU at all, "
             "and at what cost (how much imitation, forward-pass size and gradient "
             "checkpointing, vLLM generation, what RL adds after imitation), is in "
             "`docs/agent-job.md`, with the runs that show it. What it found there: imitation "
             "teaches the tools and, once the expert cites the line of the meeting it opens, "
             "much of the choice of meeting (a three-epoch warm start on 64 expert episodes: 0% "
             "to 58.5% held-out success; 28.5% without the citation). RL after that warm start "
             "has not helped: over three seeds the job's 10 steps moved held-out success by "
             "-20.0 (95% "
             "interval -28.5 to -12.0), +3.5 (-4.5 to +12.0) and +6.0 (-2.0 to +14.0) points, a "
             "mean of -3.5 (95% interval over the seeds -39.1 to +32.1), each time moving the "
             "agent off the warm start's fallback to the last line of a day's list (questions "
             "about the day's last meeting fell, about its first rose); twice the tasks a step "
             "(8 tasks x 4 rollouts, two seeds) moved it +2.5 and -7.5, and a run of the job's "
             "command judged on tuning tasks by +1.0 (-10.0 to +12.0). Earlier, on tuning tasks,"
             " a five-times learning rate broke the policy within six steps, dynamic sampling "
             "refilled half the groups without signal with no gain, and a one-epoch warm start "
             "left sampled rollouts no success to learn from: at the job's budget RL does not "
             "teach the one choice that decides an episode. Given eight times the steps, it "
             "does on both seeds run that long: the job's seed run for 80 steps moved "
             "held-out success by -22.0 points at step 20, +10.0 (+2.0 to +18.0) at 40 and "
             "+18.0 (+9.0 to +27.0) at 80 "
             "(58.5% to 76.5%; questions naming the meeting by time 32 to 54 of 60), in 130 "
             "minutes of RL on this CPU. A second seed moved it +15.0 (+6.0 to +23.5) at step "
             "20, +15.5 (+7.0 to +24.0) at 40, +5.5 (-3.5 to +14.5) at 60 and +23.0 (+14.5 to "
             "+31.5) at 80 (81.5% held-out): after 80 steps the two seeds' mean is +20.5, at "
             "about 130 minutes of RL each. How much imitation left to learn changed what ten "
             "steps showed: from a two-epoch warm start (27.5% held-out) the job's ten steps "
             "gained +20.0 (+12.0 to +28.0), +13.5 (+6.5 to +20.5), +0.0 (-7.0 to +7.0), "
             "+7.5 (+0.5 to +14.5) and +3.5 (-3.0 to +10.0) points on five seeds, a mean of "
             "+8.9 (95% interval over "
             "the seeds -1.0 to +18.8), on two seeds mostly on questions naming the meeting "
             "by its title; the agent then ends at 27.5-47.5%, below the three-epoch warm "
             "start alone. Sampling the RL stage's rollouts at T = 0.7 instead of 1 (its "
             "first three seeds, nothing else changed) did no better: +5.0 (-4.0 to +14.5), "
             "-12.5 (-19.5 to -5.5) and +7.5 (+0.5 to +14.0) against +20.0, +13.5 and +0.0, "
             "a mean of +0.0 against +11.2, though on the first seed more than twice as many "
             "sampled rollouts succeeded (33% against 14%); its first update moved the "
             "policy three to four times as far (the loss divides the logits by T, so the "
             "same advantages push 1/T times harder), and the runs do not separate that "
             "from the change in which rollouts were drawn "
             "(`docs/agent-job.md`, run 24). The job now imitates for two epochs (chosen "
             "from the warm start's "
             "curve on tuning tasks); run end to end as committed it printed 0.0% (base), "
             "27.5% (warm start) and 47.5% after RL, +20.0 (+12.0 to +28.0), in 50.7 "
             "minutes, the first seed above again. Precision mattered: the job's RL stage "
             "with its training passes "
             "under bf16 autocast (weights float32) collapsed within five "
             "steps, twice (held-out 58.5% to 0.0% on run 14's warm start and seed; 55.0% to "
             "3.0% with a bf16 engine too), the agent ending ever more episodes without an "
             "answer, where float32 runs of it never did; a bf16 engine beside float32 "
             "updates did not collapse (-7.5, -16.5 to +1.5, against -20.0 all float32 on "
             "the same seed). Splitting the update's two mini-batches by whole groups instead "
             "of single samples (`optim.mini_batch_by: group`, so an episode's turns and a "
             "group's prompt are computed once) forwarded 24% fewer tokens and cut a paired "
             "update from 224 s to 171 s; on the job's first two seeds RL then gained +15.5 "
             "(+7.0 to +24.0) and +6.0 (+0.0 to +12.5) against +20.0 and +13.5, within the "
             "seeds' spread, and the job keeps the default (`docs/agent-job.md`, run 25).", "",
             *FUNCTION_CALLING]
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
