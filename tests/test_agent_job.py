"""The agent job (examples/agent_calendar.yaml) end to end, on a tiny model and budget.

The job's three commands are read from the config's header (and examples/agent_calendar.sh,
the README's script, must run the same), so the documented job and this test cannot drift
apart. Each runs as the CLI does, with overrides that shrink it to seconds (a tiny random
model decoding in-process, a few tasks); the test checks that what the job prints is what
its runs recorded: the SFT's held-out success before (the base model) and after (the warm
start), and RL's before/after line with the gain's 95% paired interval, which must equal the
interval computed again from the per-task outcomes the run kept."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
JOB = ROOT / "examples" / "agent_calendar.yaml"


def job_commands() -> list[list[str]]:
    """The ``agentgym ...`` lines of the job config's header, in order, comments dropped."""
    lines = re.findall(r"^#\s+(agentgym [^#\n]+)", JOB.read_text(), re.M)
    return [shlex.split(line) for line in lines]


def cli(args: list[str]) -> str:
    proc = subprocess.run([sys.executable, "-m", "agentgym.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=15 * 60,
                          env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "250"})
    assert proc.returncode == 0, f"{args}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_the_job_is_expert_demos_then_sft_then_train() -> None:
    rollout, sft, train = job_commands()
    script = [shlex.split(x) for x in (ROOT / "examples" / "agent_calendar.sh").read_text()
              .splitlines() if x.startswith("agentgym ")]
    assert script == [rollout, sft, train]  # the README's script runs the header's commands
    assert rollout[:2] == ["agentgym", "rollout"] and "expert" in rollout
    assert sft[:2] == ["agentgym", "sft"] and (ROOT / sft[2]).is_file()
    assert train[:3] == ["agentgym", "train", "examples/agent_calendar.yaml"]
    out = rollout[rollout.index("--out") + 1]
    import yaml

    sft_cfg = yaml.safe_load((ROOT / sft[2]).read_text())
    train_cfg = yaml.safe_load(JOB.read_text())
    assert sft_cfg["data"]["paths"] == [out]  # SFT reads what the rollout wrote
    assert train_cfg["model"]["path"] == f"{sft_cfg['run_dir']}/model"  # RL starts from SFT
    # SFT learns on the prompts RL sees, and both evaluate the same held-out tasks
    assert sft_cfg["env"] == train_cfg["env"]
    assert {k: train_cfg["rollout"][k] for k in sft_cfg["rollout"]} == sft_cfg["rollout"]


def test_the_job_prints_the_figures_its_runs_recorded(tmp_path: Path, tiny_model_dir: Path
                                                      ) -> None:
    pytest.importorskip("torch")
    from agentgym.trainers.heldout import gain_line, gain_metrics, read_outcomes
    from agentgym.trainers.train_cli import held_out_line

    rollout, sft, train = job_commands()
    demos, sft_dir, rl_dir = tmp_path / "expert.jsonl", tmp_path / "sft", tmp_path / "rl"
    out = rollout.index("--out") + 1
    rollout = [*rollout[:out], str(demos), *rollout[out + 1:]]
    rollout[rollout.index("--episodes") + 1] = "6"
    cli(rollout[1:])
    # in-process generation on the tiny model: the job's vLLM generation is the same loop,
    # tested on a real engine in tests/trainers/test_vllm_training.py
    small = ["env.eval_seeds=6", "tensorboard=false", "model.generation=transformers"]
    sft_out = cli([*sft[1:], f"run_dir={sft_dir}", f"model.path={tiny_model_dir}",
                   f"data.paths=[{demos}]", *small])
    rl_out = cli([*train[1:], f"run_dir={rl_dir}", f"model.path={sft_dir / 'model'}",
                  "steps=1", "save_every=1", "rollout.tasks_per_step=2",
                  "rollout.group_size=2", *small])

    sft_rows = rows(sft_dir)
    base, warm = sft_rows[0], sft_rows[-1]
    assert base["step"] == 0 and warm["step"] > 0 and "eval/success_rate" in warm
    for row in (base, warm):
        for line in held_out_line(row).splitlines():
            assert line in sft_out

    last = rows(rl_dir)[-1]
    printed = gain_line(last)
    assert printed is not None and printed in rl_out
    recomputed = gain_metrics(read_outcomes(rl_dir, 0), read_outcomes(rl_dir, last["step"]))
    assert recomputed and {k: last[k] for k in recomputed} == pytest.approx(recomputed)
    assert last["heldout/tasks"] == 6


def test_the_job_benchmark_runs_the_headers_commands_outside_runs(tmp_path: Path) -> None:
    """benchmarks/agent_job.py times the job's own commands, its outputs moved under one root."""
    import importlib.util

    sys.path.insert(0, str(ROOT / "benchmarks"))  # the script imports its sibling `results`
    try:
        spec = importlib.util.spec_from_file_location("agent_job_bench",
                                                      ROOT / "benchmarks" / "agent_job.py")
        assert spec is not None and spec.loader is not None
        bench = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = bench  # its dataclass looks its module up there
        spec.loader.exec_module(bench)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
        sys.modules.pop("agent_job_bench", None)
    commands = job_commands()
    assert bench.job_commands() == commands
    rollout, sft, train = bench.relocated(commands, tmp_path)
    out = rollout.index("--out") + 1  # the same commands, only where their outputs go moved
    assert rollout[:out] + rollout[out + 1:] == commands[0][:out] + commands[0][out + 1:]
    assert sft[:-2] == commands[1] and train[:-2] == commands[2]
    assert rollout[rollout.index("--out") + 1] == str(tmp_path / "expert.jsonl")
    assert sft[-2:] == [f"run_dir={tmp_path / 'sft'}", f"data.paths=[{tmp_path / 'expert.jsonl'}]"]
    assert train[-2:] == [f"run_dir={tmp_path / 'rl'}",
                          f"model.path={tmp_path / 'sft' / 'model'}"]
    overrides = ("model.generation=transformers", "model.max_batch_size=16")
    _, sft_set, train_set = bench.relocated(commands, tmp_path, overrides)
    assert sft_set == sft + list(overrides) and train_set == train + list(overrides)
    _, sft_rl, train_rl = bench.relocated(commands, tmp_path, overrides, ("optim.lr=1e-4",))
    assert sft_rl == sft_set and train_rl == train_set + ["optim.lr=1e-4"]
    with bench.PeakMemory(interval=0.01) as memory:  # this process, at least
        time.sleep(0.05)
    assert memory.peak > 0 and f"({os.getpid()})" in memory.at_peak[0][0]


def test_the_run_reader_counts_held_out_tasks_by_question_and_step_clusters(
        tmp_path: Path) -> None:
    """benchmarks/calendar_runs.py: kinds, tasks up and down, and clusters with two outcomes."""
    from agentgym.envs.calendar.env import make_task

    seeds = range(1_000_000, 1_000_040)
    run = tmp_path / "rl"
    (run / "heldout").mkdir(parents=True)
    (run / "heldout" / "step-0.json").write_text(json.dumps({str(s): s % 2 == 0 for s in seeds}))
    (run / "heldout" / "step-10.json").write_text(json.dumps({str(s): s % 4 != 1 for s in seeds}))
    (run / "rollouts").mkdir()

    def episode(outcome: float, keys: list[str]) -> str:
        steps = [{"state_key": k} for k in keys]
        return json.dumps({"group_id": "g", "outcome_reward": outcome, "steps": steps})

    (run / "rollouts" / "step-000001.jsonl").write_text("\n".join([
        episode(1.0, ["s0", "a", "b"]), episode(0.0, ["s0", "a", "c"]),
        episode(0.0, ["s0", "d"])]) + "\n")
    timing = {"groups_trained": 4, "rollout_s": 40.0, "update_s": 50.0}
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"step": 0, "eval/success_rate": 0.5},
        {"step": 1, "success_rate": 0.125, "zero_variance_groups": 0.5, **timing},
        {"step": 2, "success_rate": 0.25, "zero_variance_groups": 0.25, "pool/revisited": 2,
         **timing, "rollout_s": 60.0}]) + "\n")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "calendar_runs.py"), str(run)],
                         capture_output=True, text=True, check=True).stdout
    counts = dict(re.findall(r"(title|time|last|first) \d+ -> \d+ of (\d+)", out))
    assert sorted(counts) == ["first", "last", "time", "title"], out
    assert all(int(n) > 0 for n in counts.values()), out  # 40 tasks draw every kind
    assert sum(int(n) for n in counts.values()) == 40
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import calendar_runs
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    asked = {"title": "Who organizes the Code review on Monday?",
             "time": "Which room is my 09:30 meeting on Friday in?",
             "last": "Who organizes my last meeting on Tuesday?",
             "first": "Which room is my first meeting on Thursday in?"}
    assert {name: calendar_runs.kind(q) for name, q in asked.items()} == {n: n for n in asked}
    shape = (r"(Who organizes|Which room is) "
             r"(my (first|last|\d\d:\d\d) meeting|the [A-Z][a-z -]+) on \w+day( in)?\?")
    assert all(re.fullmatch(shape, make_task("test", s).prompt) for s in seeds)  # as asked above
    drawn = Counter(calendar_runs.kind(make_task("test", s).prompt) for s in seeds)
    assert counts == {name: str(n) for name, n in drawn.items()}, (drawn, out)
    # even seeds solved before; after, all but seeds = 1 mod 4: 10 up (3 mod 4), 0 down
    assert "held-out +25.0 points over 40 tasks; 10 up, 0 down" in out
    assert "2 steps; sampled success 12, 25%; 5 groups with a signal; rollouts 50.0 s, " \
           "update 50.0 s a step; 2 tasks re-drawn" in out
    # the shared first state is left out; "a" is met by a success and a failure
    assert "1 groups, 1 with two outcomes; 1 later-step clusters with two outcomes, " \
           "holding 2 of 5 later steps" in out
    # dynamic sampling: step 1 replaced 1 of its 2 degenerate groups, step 2 both of its 3
    dyn = tmp_path / "dyn"
    dyn.mkdir()
    (dyn / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"step": 1, "success_rate": 0.5, "zero_variance_groups": 0.5, **timing,
         "dynamic/degenerate_groups": 2.0, "dynamic/drawn_groups": 4.0,
         "dynamic/refilled_groups": 1.0, "dynamic/unfilled_groups": 1.0},
        {"step": 2, "success_rate": 0.5, "zero_variance_groups": 0.75, **timing,
         "dynamic/degenerate_groups": 3.0, "dynamic/drawn_groups": 3.0,
         "dynamic/refilled_groups": 3.0, "dynamic/unfilled_groups": 0.0}]) + "\n")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "calendar_runs.py"), str(dyn)],
                         capture_output=True, text=True, check=True).stdout
    assert "no held-out evaluation before and after" in out
    assert "3 groups with a signal; rollouts 40.0 s, update 50.0 s a step; " \
           "7 with a signal after refilling (7 fresh groups drawn)" in out, out


def test_the_recipe_table_reader_splits_gains_into_recipe_seed_and_rest(tmp_path: Path) -> None:
    """benchmarks/calendar_recipes.py on an additive table: no residual, shares as built."""
    doc = tmp_path / "doc.md"
    seeds = [4.0, -2.0, 0.0, 2.0, -4.0]  # seed effects, sum of squares 40 per recipe
    recipes = {"A (run 1)": 10.0, "B (run 2)": 0.0, "C (run 3)": 5.0}  # sum of squares 5 x 50
    lines = ["| recipe (run) | gain, seeds 0, 1, 2, 3, 4 | mean | paired |", "|---|---|---|---|"]
    for name, offset in recipes.items():
        gains = ", ".join(f"{offset + s:+.1f}".replace("-", "\u2212") for s in seeds)
        lines.append(f"| {name} | {gains} | | |")
    lines += ["| D, two seeds (run 4) | +1.0, +2.0 | | |", "", "| other | +1.0 |"]
    doc.write_text("\n".join(lines) + "\n")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "calendar_recipes.py"),
                          "--doc", str(doc), "--permutations", "200"],
                         capture_output=True, text=True, check=True).stdout
    assert "3 recipes x 5 seeds, mean gain +5.0" in out, out  # D (two seeds) left out
    assert "seed means: +9.0, +3.0, +5.0, +7.0, +1.0" in out, out
    # recipe 5 x (25 + 25 + 0) = 250, seed 3 x 40 = 120, residual 0
    assert "recipe 68%, seed 32%, residual 0%" in out, out
    assert "residual standard deviation 0.0 points" in out, out
    # the same order of recipes on every seed: few shuffles within seeds reach that spread
    assert float(re.search(r"permutation p = ([\d.]+)", out)[1]) < 0.05, out


def test_the_wide_evaluation_joins_a_runs_own_tasks_to_new_ones(tmp_path: Path) -> None:
    """benchmarks/calendar_wide_eval.py on played files: gains on own, new and all tasks."""
    from agentgym.jsonl import write_trajectories
    from agentgym.types import Message, Trajectory

    out = tmp_path / "wide"
    out.mkdir()

    def played(name: str, solved: int) -> None:  # 20 new tasks, the first `solved` solved
        write_trajectories(out / f"{name}-1000200-20.jsonl", [
            Trajectory(f"{name}{s}", f"test-{s}", "g", (Message("user", "q"),),
                       outcome_reward=float(s - 1_000_200 < solved), seed=s)
            for s in range(1_000_200, 1_000_220)])

    played("warm-w_sft_model", 0)
    runs = []
    for name, own_after, new_after in (("a", 10, 5), ("b", 2, 4)):
        run = tmp_path / name
        (run / "heldout").mkdir(parents=True)
        (run / "config.yaml").write_text("model: {path: w/sft/model}\n")
        seeds = range(1_000_000, 1_000_020)
        (run / "heldout" / "step-0.json").write_text(json.dumps({str(s): False for s in seeds}))
        (run / "heldout" / "step-10.json").write_text(
            json.dumps({str(s): s - 1_000_000 < own_after for s in seeds}))
        (out / f"{name}_model").mkdir()  # exported already: nothing is played or exported
        played(name, new_after)
        runs.append(str(run))
    script = [sys.executable, str(ROOT / "benchmarks" / "calendar_wide_eval.py")]
    text = subprocess.run([*script, *runs, "--episodes", "20", "--out", str(out)],
                          capture_output=True, text=True, check=True).stdout
    assert re.search(r"a \(no checkpoint\): own 20 \+50\.0 .*; new 20 \+25\.0 .*; "
                     r"all 40 \+37\.5 \(.*\); 15 up, 0 down; success 0\.0% -> 37\.5%", text), text
    assert re.search(r"b \(no checkpoint\): own 20 \+10\.0 .*; new 20 \+20\.0 .*; "
                     r"all 40 \+15\.0 \(.*\); 6 up, 0 down; ", text), text
    assert "runs, own tasks: mean +30.0" in text and "seeds' SD 28.3" in text, text
    assert "runs, all 40 tasks: mean +26.2" in text and "seeds' SD 15.9" in text, text
    # 9 of 40 tasks disagree (a up, b not): the draw's part var(a - b) / 2n = 0.1788 / 80
    assert "seeds' variance 253.1 = the tasks' draw 22.4 + the runs' own 230.8 (SD 15.2" in text
    # all 9 lean one way: 2 of the 2^9 within-task shuffles reach it
    assert float(re.search(r"permutation p = ([\d.]+)", text)[1]) < 0.02, text
    paired = subprocess.run([*script, *runs, "--against", *runs[::-1], "--episodes", "20",
                             "--out", str(out)], capture_output=True, text=True, check=True)
    assert "runs - against, all tasks, seed for seed: mean +0.0" in paired.stdout, paired.stdout
    assert "seeds' SD 31.8" in paired.stdout  # +22.5 and -22.5
    own = subprocess.run([*script, *runs, "--episodes", "0", "--out", str(tmp_path / "none")],
                         capture_output=True, text=True, check=True).stdout
    assert "a (no checkpoint): own 20 +50.0" in own and "; 10 up, 0 down" in own, own
    # a run that loses tasks too: seeds 0-3 solved before, 2-7 after
    mixed = tmp_path / "c"
    (mixed / "heldout").mkdir(parents=True)
    (mixed / "config.yaml").write_text("model: {path: w/sft/model}\n")
    for step, solved in (("0", range(0, 4)), ("10", range(2, 8))):
        (mixed / "heldout" / f"step-{step}.json").write_text(json.dumps(
            {str(1_000_000 + i): i in solved for i in range(20)}))
    lost = subprocess.run([*script, str(mixed), "--episodes", "0", "--out", str(out)],
                          capture_output=True, text=True, check=True).stdout
    assert "c (no checkpoint): own 20 +10.0" in lost and "; 4 up, 2 down" in lost, lost
    assert "runs, all 20 tasks: mean +30.0" in own and not list((tmp_path / "none").glob("*"))
    # new seeds that the runs' own evaluation used are refused, as is a file missing a task
    wrong = subprocess.run([*script, runs[0], "--episodes", "20", "--first-seed", "1000010",
                            "--out", str(out)], capture_output=True, text=True)
    assert wrong.returncode != 0 and "choose --first-seed past 1000019" in wrong.stderr
    lines = (out / "a-1000200-20.jsonl").read_text().splitlines()
    (out / "a-1000200-20.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    short = subprocess.run([*script, runs[0], "--episodes", "20", "--out", str(out)],
                           capture_output=True, text=True)
    assert short.returncode != 0 and "scores 19 of the 20 tasks" in short.stderr, short.stderr


def test_the_wide_evaluation_judges_a_second_round_from_the_first_rounds_warm_start(
        tmp_path: Path) -> None:
    """calendar_wide_eval.py --from: both rounds' gain, the round's own, and its start."""
    seeds = range(1_000_000, 1_000_020)

    def run(name: str, start: int, end: int) -> str:  # the first `start` / `end` tasks solved
        folder = tmp_path / name
        (folder / "heldout").mkdir(parents=True)
        (folder / "config.yaml").write_text(f"model: {{path: {name}/start}}\n")
        for step, solved in (("0", start), ("10", end)):
            (folder / "heldout" / f"step-{step}.json").write_text(
                json.dumps({str(s): s - 1_000_000 < solved for s in seeds}))
        return str(folder)

    first = [run("a", 0, 10), run("b", 0, 2)]
    second = [run("a2", 10, 14), run("b2", 3, 5)]  # b2's start differs from b's end on a task
    script = [sys.executable, str(ROOT / "benchmarks" / "calendar_wide_eval.py")]
    text = subprocess.run([*script, *second, "--from", *first, "--against", *first,
                           "--episodes", "0", "--out", str(tmp_path / "none")],
                          capture_output=True, text=True, check=True).stdout
    assert re.search(r"a2: this round \+20\.0 \(.*\), 4 up, 0 down; its start repeats "
                     r".*a's end on 20 of 20 tasks", text), text
    assert re.search(r"b2: this round \+10\.0 \(.*\), 2 up, 0 down; its start repeats "
                     r".*b's end on 19 of 20 tasks", text), text
    assert "a2 (no checkpoint): own 20 +70.0" in text and "; 14 up, 0 down" in text, text
    assert "b2 (no checkpoint): own 20 +25.0" in text and "; 5 up, 0 down" in text, text
    assert "runs, own tasks: mean +47.5" in text, text
    assert "runs - against, all tasks, seed for seed: mean +17.5" in text, text  # +20, +15
    one = subprocess.run([*script, *second, "--from", first[0], "--episodes", "0"],
                         capture_output=True, text=True)
    assert one.returncode != 0 and "--from pairs runs seed for seed: give 2" in one.stderr
    swapped = run("c", 0, 5)
    (Path(swapped) / "heldout" / "step-0.json").write_text(json.dumps({"7": False}))
    other = subprocess.run([*script, second[0], "--from", swapped, "--episodes", "0"],
                           capture_output=True, text=True)
    assert other.returncode != 0 and "evaluated on different tasks" in other.stderr
    third = [run("a3", 14, 13), run("b3", 5, 8)]  # a third round: --from twice, back in order
    text = subprocess.run([*script, *third, "--from", *second, "--from", *first,
                           "--episodes", "0"], capture_output=True, text=True, check=True).stdout
    assert re.search(r"a3: this round -5\.0 \(.*\), 0 up, 1 down; its start repeats "
                     r".*a2's end on 20 of 20 tasks", text), text
    assert re.search(r"a2: this round \+20\.0 \(.*\), 4 up, 0 down; its start repeats "
                     r".*a's end on 20 of 20 tasks", text), text
    assert re.search(r"b2: .*its start repeats .*b's end on 19 of 20 tasks", text), text
    assert "a3 (no checkpoint): own 20 +65.0" in text and "b3 (no checkpoint): own 20 +40.0" in text
    assert "runs, own tasks: mean +52.5" in text, text
    short = subprocess.run([*script, *third, "--from", *second, "--from", first[0],
                            "--episodes", "0"], capture_output=True, text=True)
    assert short.returncode != 0 and "--from pairs runs seed for seed: give 2" in short.stderr
