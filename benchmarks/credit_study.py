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
modification and resolve rates per step; it needs Docker and does not wait on the band.

Every unit runs as a subprocess of the CLI, keyed by env, estimator, seed and budget. Its
files (rollouts, checkpoints, models) go under ``--cache`` (default
``~/.cache/agentgym/credit_study``, outside the clone, so a new clone on the same machine
finds them); its result, a small JSON file, goes under ``--records`` (default
``benchmarks/credit_study/``, committed), so finished units carry over to a fresh clone and
are never redone. An interrupted unit resumes from its last checkpoint (``--resume``;
checkpoints are resumable and saved every step). Where a finished unit's files are needed
by one still to run and the cache no longer holds them (a fresh clone), the unit is run
again into the cache, its record kept, and a regenerated result that differs from the
record is printed. ``--limit-minutes`` stops a unit (it then resumes on the next call), so
the study can go on across days on a shared machine; run each call under
``flock /tmp/heavy.lock``. ``docs/learning.md`` is rewritten after every call from the
records, saying which units are still missing.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from credit_units import (
    BAND,
    CACHE,
    DEFAULT_ENVS,
    HELD_OUT_FIRST_SEED,
    RECORDS,
    ROOT,
    SCALED_RECORDS,
    SWE_RATES,
    TUNING_FIRST_SEED,
    Setup,
    Unit,
    completion_loss,
    machine,
    metrics,
    needed_files,
    run_unit,
    units,
    variant_name,
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
                     random_episodes=200),
    # a short warm start: a policy that ignores the board ("down, right" repeated) wins 26%
    # of tuning seeds, so the format and the mix of moves put a model in the band, and what
    # RL can add is reading the board; greedy play of that model repeats one move (0%), so
    # success is measured sampled at T=1, the policy RL trains; held-out evaluation before
    # and after only, to fit the time
    "frozenlake": Setup("frozenlake", "textarena/FrozenLake-v0", {}, max_turns=10,
                        max_tokens=8, expert_episodes=30, sft_batch=8, eval_temperature=1.0,
                        eval_every=8),
    # G-RA against direct accumulation: oracle episodes (``git apply`` the fix, ``submit``) on
    # the 18 training repositories, held-out resolve on the 6 test ones (every test task)
    "swe": Setup("swe", "agentgym/SWE-v0",
                 {"split": "train", "sandbox": "docker", "command_timeout": 20,
                  "test_timeout": 120}, max_turns=6, max_tokens=128, expert_episodes=18,
                 sft_epochs=3, sft_batch=4, steps=4, history_length=3, eval_seeds=6,
                 estimators=("grpo",), accumulations=("direct", "gated"), band=None,
                 eval_kwargs={"split": "test"},
                 rollout_options={"max_prompt_tokens": 3072, "step_timeout": 900},
                 optim_options={"mini_batches": 2, "max_tokens_per_micro_batch": 8192}),
}


# warm starts the study moved away from, per env: their SFT key and what set them apart;
# their records stay, and the page lists them
SUPERSEDED = {"sokoban": {
    "sft-9bbc6798": "1 epoch, batch 16, lr 5e-5, left for being below the band",
    "sft-f3f31f68": "1 epoch, batch 16, lr 1e-4, left for being below the band"}}


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

def interval(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of a t 95% interval over seeds (0 for one seed)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    t = {2: 12.706, 3: 4.303, 4: 3.182, 5: 2.776}.get(n, 2.0)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, t * sd / math.sqrt(n)


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
    elif finished < len(rl):
        lines += [f"**Result so far: incomplete.** {finished} of {len(rl)} RL runs have "
                  "finished; with fewer than three seeds of every estimator on an env, its "
                  "table below shows single runs, and this page draws no comparison from them "
                  "yet. The command above continues the rest.", ""]
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


def setup_lines(s: Setup, cache: Path, records: Path | None, out: Path, heading: str,
                suffix: str = "") -> list[str]:
    """One env's section: its warm start, revisits and RL runs, from its records."""
    lines: list[str] = []
    all_units = list(units(s, cache, records))
    title = (f"G-RA against direct accumulation: {s.env_id}" if s.band is None
             else s.env_id)
    lines += [f"{heading} {title}", "",
              f"Env kwargs {s.kwargs}, at most {s.max_turns} turns, window context "
              f"K={s.history_length}, {s.max_tokens} tokens per action. RL budget: "
              f"{s.steps} steps × {s.tasks_per_step} tasks × {s.group_size} rollouts, "
              f"lr {s.lr}, held-out evaluation on {s.eval_seeds} seeds"
              + (f" ({s.eval_kwargs})" if s.eval_kwargs else "")
              + (f" sampled at T={s.eval_temperature}" if s.eval_temperature else "")
              + f" every {s.eval_every} steps.", ""]
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
    if done:
        lines += rl_table(s, done)
        lines += ["", resolution_line(s, done)]
        lines += [x for x in [divergence_line(s, done)] if x]
        lines += [f"\n- {u.variant} seed {u.seed}: {u.result()['note']}." for u in done
                  if u.result().get("note")]
        if s.band is None:
            lines += ["", *rates_table(s, done)]
        png = plot(s, done, out.parent, suffix)
        lines += ["", f"![learning curves]({png.name})", ""]
    missing = [f"{u.variant}/seed {u.seed}" for u in rl if not u.done]
    lines += [f"RL runs finished: {len(done)} of {len(rl)}"
              + (f"; still to run: {', '.join(missing)}." if missing else "."), ""]
    return lines


def sft_lines(s: Setup, sft: Unit) -> list[str]:
    """The warm start: its result, or how far it got."""
    where = "held-out" if s.band is None else "tuning-seed"
    if sft.done:
        r = sft.result()
        lines = [f"**SFT warm start**: {s.expert_episodes} expert episodes "
                 f"({r['samples']:.0f} steps), {s.sft_epochs} epoch(s), lr {s.sft_lr}, "
                 f"batch {s.sft_batch}: greedy {where} success {r['tuning_success_before']:.0%}"
                 f" → {r['tuning_success_after']:.0%} ({r['wall_seconds'] / 60:.0f} min, "
                 f"{r['machine']})" + (f"; {r['note']}" if r.get("note") else "") + ".", ""]
        if r.get("completion_loss"):
            lines += [loss_line(r["completion_loss"]), ""]
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
            loss_line(completion_loss(rows, s.sft_batch)), ""]


def loss_line(stretches: list[list[float]]) -> str:
    """An SFT run's loss per completion over its steps (see ``completion_loss``)."""
    parts = ", ".join(f"{nats:.2f} (steps {a}–{b})" for a, b, nats in stretches)
    return ("Its loss per demonstrated completion, in nats, over the run: " + parts
            + f". A uniform guess among four moves costs ln 4 = {math.log(4):.2f}.")


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


def resolution_line(s: Setup, done: list[Unit]) -> str:
    """How far apart two held-out figures must be before the evaluation can tell them apart."""
    before = [u.result()["held_out_before"] for u in done]
    p = min(max(sum(before) / len(before), 1 / s.eval_seeds), 1 - 1 / s.eval_seeds)
    half = 1.96 * math.sqrt(p * (1 - p) / s.eval_seeds)
    return (f"How finely this measures: one run's held-out figure counts {s.eval_seeds} "
            f"episodes, so at the starting success ({p:.0%}) its 95% binomial interval is "
            f"±{100 * half:.0f} points; over {len(s.seeds)} seeds the mean's is about "
            f"±{100 * half / math.sqrt(len(s.seeds)):.0f} from evaluation alone, before the "
            "runs' own spread.")


def divergence_line(s: Setup, done: list[Unit]) -> str:
    """How far each run drew apart from the first variant's run of its seed (same tasks and
    sampling seeds): a training step whose rollouts hold as many tokens in both drew, most
    likely, the same rollouts. The first step always does (both start from the SFT model)."""
    first = variants(s)[0]
    ref = {u.seed: u.result().get("step_tokens") for u in done if u.variant == first}
    counts: dict[str, list[int]] = {}
    for u in done:
        mine, theirs = u.result().get("step_tokens"), ref.get(u.seed)
        if u.variant == first or not mine or not theirs:
            continue
        pairs = list(zip(mine, theirs, strict=False))[1:]
        seen = counts.setdefault(u.variant, [0, 0])
        seen[0] += sum(a == b for a, b in pairs)
        seen[1] += len(pairs)
    if not counts:
        return ""
    return ("\nHow far the runs drew apart: training steps after the first whose rollouts "
            f"held exactly as many tokens as {first}'s of the same seed (same tasks and "
            "sampling seeds), most likely the same rollouts: "
            + ", ".join(f"{v} {a} of {n}" for v, (a, n) in counts.items())
            + f". A run that matches at every step sampled as {first}'s did throughout: "
            "its updates moved the policy the same way (for SALT, see "
            "[when SALT's update is its base's](estimators.md#when-salts-update-is-its-bases)).")


def superseded_lines(s: Setup, records: Path) -> list[str]:
    """Earlier warm starts of this env, from their records, and why they were left."""
    lines = []
    for key, differs in SUPERSEDED.get(s.name, {}).items():
        folder = records / s.name / key
        if not folder.with_suffix(".json").is_file():
            continue
        r = json.loads(folder.with_suffix(".json").read_text())
        line = (f"- superseded warm start `{key}` ({differs}): greedy tuning-seed success "
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


def _results(done: list[Unit], variant: str) -> list[dict[str, Any]]:
    return [u.result() for u in done if u.variant == variant]


def variants(s: Setup) -> list[str]:
    return [variant_name(e, a) for e in s.estimators for a in s.accumulations]


def rl_table(s: Setup, done: list[Unit]) -> list[str]:
    """Held-out success before and after RL, per estimator (mean ± 95% over seeds)."""
    lines = ["| run | seeds | held-out before | held-out after (mean ± 95%) | tokens/run | "
             "train s/run | wall min/run |", "|---|---|---|---|---|---|---|"]
    for variant in variants(s):
        rs = _results(done, variant)
        if not rs:
            lines.append(f"| {variant} | 0 | | | | | |")
            continue
        before = interval([r["held_out_before"] for r in rs])
        after = interval([r["held_out_after"] for r in rs])
        lines.append(f"| {variant} | {len(rs)} | {before[0]:.1%} | {after[0]:.1%} ± "
                     f"{after[1]:.1%} | {sum(r['tokens'] for r in rs) / len(rs):,.0f} | "
                     f"{sum(r['train_seconds'] for r in rs) / len(rs):.0f} | "
                     f"{sum(r['wall_seconds'] for r in rs) / len(rs) / 60:.1f} |")
    return lines


def rates_table(s: Setup, done: list[Unit]) -> list[str]:
    """SWE's completion, modification and resolve rates of the training rollouts, per step."""
    lines = ["Training rollouts, rate at each step (mean over seeds):", "",
             "| run | seeds | " + " | ".join(r.replace("_", " ") for r in SWE_RATES) + " |",
             "|---|---|" + "---|" * len(SWE_RATES)]
    for variant in variants(s):
        rs = _results(done, variant)
        cells = []
        for rate in SWE_RATES:
            series = [r.get(rate) or [] for r in rs]
            steps = min((len(x) for x in series), default=0)
            means = [sum((x[i] or 0.0) for x in series) / len(series) for i in range(steps)]
            cells.append(" → ".join(f"{m:.0%}" for m in means) or "–")
        lines.append(f"| {variant} | {len(rs)} | " + " | ".join(cells) + " |")
    return lines


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
    held.set_title(f"{s.env_id}: held-out")
    train.set_xlabel("training step")
    train.set_title("training rollouts (T=1)")
    held.legend()
    path = folder / f"learning_{s.name}{suffix}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def run_setup(setup: Setup, every: list[Unit], args: argparse.Namespace, end: float) -> bool:
    """Run the setup's unfinished units in order; False when the time limit stopped one."""
    for unit in (u for u in every if not u.done):
        if unit.kind == "rl" and not warm_enough(setup, args.cache, args.records):
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
    # limit and env list are not part of what reproduces it
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
