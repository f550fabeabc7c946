"""The credit study's bookkeeping (agentgym.trainers.study): cache keys, units, the page."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentgym.trainers.study import run
from agentgym.trainers.study.accumulation import accumulation_lines, accumulation_summary
from agentgym.trainers.study.page import (
    across_line,
    curve_lines,
    divergence_line,
    machines_line,
    points,
    reading_line,
    resolution_line,
    verdict_line,
)
from agentgym.trainers.study.report import report
from agentgym.trainers.study.run import finished_runs, record_changes, top_action
from agentgym.trainers.study.setups import SETUPS, SUPERSEDED, scaled
from agentgym.trainers.study.units import (
    DEFAULT_ENVS,
    RECORDS,
    SCALED_RECORDS,
    needed_files,
    units,
    warm_enough,
)


def test_cache_keys_do_not_move():
    """A finished unit is found again only while its key stays the same: new Setup fields
    must not change the keys of setups that do not set them."""
    assert SETUPS["sokoban"].sft_key() == "sft-e052c185"
    assert SETUPS["frozenlake"].sft_key() == "sft-f4635710"  # eval settings not in it
    assert SETUPS["swe"].sft_key() == "sft-b438ddb0"  # the label is not in it


def test_the_editor_arm_differs_from_the_first_only_in_its_warm_start(tmp_path):
    """Two SWE arms: RL budgets alike, demonstrations and SFT amount not, each its own
    section and folder."""
    first, editor = SETUPS["swe"], SETUPS["swe_editor"]
    assert editor.kwargs == {**first.kwargs, "expert": "editor"}
    assert editor.budget() == first.budget()
    assert editor.sft_key() != first.sft_key()
    page = report([first, editor], tmp_path, "python benchmarks/credit_study.py",
                  tmp_path / "x.md")
    assert "## G-RA against direct accumulation: agentgym/SWE-v0\n" in page
    assert ("## G-RA against direct accumulation: agentgym/SWE-v0 (editor demonstrations)"
            in page)
    folders = {u.folder.parent.parent.name for s in (first, editor)
               for u in units(s, tmp_path) if u.kind == "rl"}
    assert folders == {"swe", "swe_editor"}


def test_units_per_env(tmp_path):
    sokoban = [u for u in units(SETUPS["sokoban"], tmp_path)]
    assert [u.kind for u in sokoban[:5]] == ["random", "demos", "sft", "warmth", "revisits"]
    rl = [u for u in sokoban if u.kind == "rl"]
    assert len(rl) == 12 and {u.variant for u in rl} == {"grpo", "gigpo", "hgpo", "salt"}
    swe = list(units(SETUPS["swe"], tmp_path))
    assert "revisits" not in [u.kind for u in swe]
    rl = [u for u in swe if u.kind == "rl"]
    assert sorted({u.variant for u in rl}) == ["grpo direct", "grpo gated"] and len(rl) == 6
    assert len({u.folder for u in rl}) == 6


def test_swe_does_not_wait_on_the_band_but_the_others_do(tmp_path):
    """Sokoban and FrozenLake (measured sampled) are judged on their ``warmth`` unit's
    success, not the SFT model's greedy one; SWE not at all."""
    for name, success, warm in (("swe", 0.0, True), ("sokoban", 0.0, False),
                                ("sokoban", 0.3, True), ("frozenlake", 0.0, False),
                                ("frozenlake", 0.25, True)):
        every = {u.kind: u for u in units(SETUPS[name], tmp_path / name)}
        for kind in ("sft", "warmth"):
            if kind in every:
                every[kind].record.parent.mkdir(parents=True, exist_ok=True)
                every[kind].record.write_text(json.dumps(
                    {"tuning_success_after": 0.0 if kind == "sft" and name != "swe"
                     else success, "tuning_success": success}))
        assert warm_enough(SETUPS[name], tmp_path / name) is warm, (name, success)


def test_page_with_nothing_finished_says_so(tmp_path):
    setups = [SETUPS[n] for n in DEFAULT_ENVS.split(",")]
    page = report(setups, tmp_path, "python benchmarks/credit_study.py", tmp_path / "x.md")
    assert "**Result so far: none.**" in page
    assert "## G-RA against direct accumulation: agentgym/SWE-v0" in page
    assert "still to run: grpo direct/seed 0, grpo gated/seed 0" in page


def test_page_lists_superseded_warm_starts(tmp_path):
    """A warm start the study moved away from keeps its record, and the page shows it."""
    key, why = next(iter(SUPERSEDED["sokoban"].items()))
    record = tmp_path / "sokoban" / f"{key}.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"tuning_success_before": 0.0, "tuning_success_after": 0.04}))
    page = report([SETUPS["sokoban"]], tmp_path, "cmd", tmp_path / "x.md")
    assert f"superseded warm start `{key}` ({why}): greedy tuning-seed success 0% → 4%." in page


def test_records_live_apart_from_the_cache_and_lost_files_are_made_again(tmp_path):
    """A fresh clone has the committed records but an empty cache: a finished unit counts as
    done, and the files a later unit reads (demonstrations, the SFT model) are named as
    missing so the study makes them again before that unit."""
    cache, records = tmp_path / "cache", tmp_path / "records"
    every = list(units(SETUPS["frozenlake"], cache, records))
    demos, sft, warmth, revisits, baseline, first_rl, first_final = every[:7]
    assert warmth.kind == "warmth" and revisits.kind == "revisits"
    assert (baseline.kind, first_rl.kind, first_final.kind) == ("baseline", "rl", "final")
    assert first_final.folder.parent == first_rl.folder
    assert sft.record == records / "frozenlake" / f"{sft.folder.name}.json"
    assert first_rl.record.parent == records / "frozenlake" / "rl"
    for unit in (demos, sft):
        unit.record.parent.mkdir(parents=True, exist_ok=True)
        unit.record.write_text(json.dumps({"tuning_success_after": 0.25}))
    assert demos.done and sft.done and not first_rl.done
    assert not (cache / "frozenlake").exists()
    assert needed_files(first_rl, every) is sft
    assert needed_files(sft, every) is demos
    (sft.folder / "model").mkdir(parents=True)
    assert needed_files(first_rl, every) is None
    assert needed_files(revisits, every) is None
    assert needed_files(baseline, every) is None
    # a finished run whose checkpoints are gone is run again before its finer evaluation
    assert needed_files(first_final, every) is first_rl
    (first_rl.folder / "run" / "checkpoints").mkdir(parents=True)
    assert needed_files(first_final, every) is None
    assert needed_files(warmth, every) is demos  # it measures the fit to them too
    (demos.folder / "expert.jsonl").parent.mkdir(parents=True)
    (demos.folder / "expert.jsonl").write_text("")
    assert needed_files(warmth, every) is None


def test_page_sets_a_cold_start_beside_random_play(tmp_path):
    """A sampled warm start below the band says the RL runs wait; random play is shown."""
    every = {u.kind: u for u in units(SETUPS["sokoban"], tmp_path)}
    for kind, result in (("warmth", {"temperature": 1.0, "tuning_success": 0.08,
                                     "episodes": 24, "top_action": ["left", 0.52],
                                     "demonstration_fit": 0.31}),
                         ("demos", {"episodes": 100, "top_action": ["up", 0.26]}),
                         ("random", {"tuning_success": 0.175, "episodes": 200})):
        every[kind].record.parent.mkdir(parents=True, exist_ok=True)
        every[kind].record.write_text(json.dumps(result))
    page = report([SETUPS["sokoban"]], tmp_path, "cmd", tmp_path / "x.md")
    assert "tuning-seed success 8% over 24 seeds; this is what the band is judged on, and it " \
           "is outside 15%–60%: the RL runs below wait on a warmer start. On its own " \
           "demonstrations' prompts it gives the demonstrated action 31% probability on " \
           "average. Its most frequent " \
           "action, `left`, is 52% of its moves; the demonstrations' most frequent, `up`, 26% " \
           "of theirs." in page
    assert "blind to the board): tuning-seed success 18% over 200 seeds" in page


def test_resolution_of_the_held_out_figures(tmp_path):
    """24 episodes at 25% success: ±17 points for one run, ±10 for a mean over 3 seeds."""
    unit = next(u for u in units(SETUPS["frozenlake"], tmp_path) if u.kind == "rl")
    unit.record.parent.mkdir(parents=True)
    unit.record.write_text(json.dumps({"held_out_before": 0.25}))
    line = resolution_line(SETUPS["frozenlake"], [unit])
    assert "at the starting success (25%) its 95% binomial interval is ±17 points; over 3 " \
           "seeds the mean's is about ±10" in line


def test_divergence_counts_steps_with_the_same_rollout_tokens(tmp_path):
    """Against GRPO of the same seed: GiGPO matches at step 2, not 3; step 1 is not counted
    (every run starts from the same model); a seed without GRPO says nothing."""
    setup = SETUPS["frozenlake"]
    rl = [u for u in units(setup, tmp_path) if u.kind == "rl"]
    assert (rl[0].variant, rl[1].variant, rl[5].variant) == ("grpo", "gigpo", "gigpo")
    for unit, tokens in zip(rl[:2] + rl[5:6], ([5, 10, 20], [5, 10, 21], [7, 7, 7]),
                            strict=True):
        unit.record.parent.mkdir(parents=True, exist_ok=True)
        unit.record.write_text(json.dumps({"step_tokens": tokens}))
    line = divergence_line(setup, rl[:2] + rl[5:6])
    assert "as grpo's of the same seed (same tasks and sampling seeds), most likely the same " \
           "rollouts: gigpo 1 of 2." in line
    assert divergence_line(setup, rl[1:2]) == ""
    assert "first step" not in line  # every first step matched
    rl[1].record.write_text(json.dumps({"step_tokens": [6, 10, 21]}))
    assert "The first step, where both sample the same warm start, matched in 0 of 1 runs" \
        in divergence_line(setup, rl[:2])


def test_page_adds_the_gpu_scale_section_from_its_own_records(tmp_path):
    """``--scale`` runs keep their records apart (their random-play key is the CPU one's);
    the page shows them in a section of their own, only for envs that have one."""
    assert SCALED_RECORDS == RECORDS / "scaled"
    big = scaled(SETUPS["sokoban"])
    assert (big.device, big.dtype, big.expert_episodes) == ("cuda", "float32", 400)
    cpu, gpu = tmp_path / "cpu", tmp_path / "gpu"
    every = {u.kind: u for u in units(big, tmp_path, gpu)}
    every["sft"].record.parent.mkdir(parents=True)
    every["sft"].record.write_text(json.dumps({
        "tuning_success_before": 0.0, "tuning_success_after": 0.46, "samples": 1964,
        "wall_seconds": 347, "machine": "a GPU box"}))
    setups = [SETUPS[n] for n in DEFAULT_ENVS.split(",")]
    big_setups = [scaled(s) for s in setups]
    page = report(setups, tmp_path, "cmd", tmp_path / "x.md", cpu, big_setups, gpu)
    assert "## At GPU scale (`--scale`)" in page
    assert "python benchmarks/credit_study.py --scale --envs sokoban\n" in page
    assert "### agentgym/Sokoban-v0" in page and "### textarena/FrozenLake-v0" not in page
    assert "400 expert episodes (1964 steps), 3 epoch(s), lr 0.0001, batch 8: greedy " \
           "tuning-seed success 0% → 46%" in page
    page = report(setups, tmp_path, "cmd", tmp_path / "x.md", cpu, big_setups, cpu)
    assert "At GPU scale" not in page


def test_top_action_reads_calls_recorded_as_text(tmp_path):
    """An env that parses its own calls leaves them in the action's text: counted by name."""
    call = '<tool_call>{{"name": "{}", "arguments": {{}}}}</tool_call>'
    texts = [call.format("down"), call.format("down"), call.format("up"), "no call at all"]
    steps = [{"index": i, "action": {"role": "assistant", "content": text},
              "result": {"observation": [], "reward": 0.0}} for i, text in enumerate(texts)]
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"schema_version": 1, "id": "a", "task_id": "t",
                                "group_id": "g", "prompt": [], "steps": steps,
                                "status": "terminated"}) + "\n")
    assert top_action(path) == ("down", 0.5)


def test_reading_says_whether_a_change_is_beyond_the_evaluation(tmp_path):
    """24 seeds at 25%: ±17 points resolve one run; a -4 point change does not count, a
    +30 point one does; the share of groups with a mixed outcome follows the success."""
    setup = SETUPS["frozenlake"]
    rl = [u for u in units(setup, tmp_path) if u.kind == "rl"]
    for unit, after in zip(rl[:2], (0.21, 0.55), strict=True):
        unit.record.parent.mkdir(parents=True, exist_ok=True)
        unit.record.write_text(json.dumps({"held_out_before": 0.25, "held_out_after": after,
                                           "train_success": [0.5, 0.5]}))
    line = reading_line(setup, rl[:1], {}, None)
    assert "changed by grpo -4.0 (1 seed) points. No change is larger" in line
    assert "succeeded 50% of the time on average; at that rate about 88% of groups" in line
    line = reading_line(setup, rl[:2], {}, None)
    assert "gigpo +30.0 (1 seed) points. gigpo moved it by more" in line


def test_verdict_weighs_the_gap_between_estimators_against_the_seeds(tmp_path):
    """The page's one-line answer per env: a variant beats GRPO only where the intervals
    over seeds part; until every run has finished it compares nothing."""
    setup = SETUPS["frozenlake"]
    rl = [u for u in units(setup, tmp_path) if u.kind == "rl"]
    for unit in rl:
        unit.record.parent.mkdir(parents=True, exist_ok=True)
        unit.record.write_text(json.dumps({"held_out_before": 0.1, "held_out_after": 0.1}))
    base = {"success": 0.125, "episodes": 96, "draws": 4}
    revisits = {"share_grouped": {"1": 0.94, "2": 0.59}}
    noisy = {(u.variant, u.seed): {"success": (0.0, 0.1, 0.2)[u.seed]} for u in rl}
    line = verdict_line(setup, rl, rl, noisy, base, revisits)
    assert "grpo 10.0% ± 24.8%" in line and "warm start 12.5%" in line
    assert "No variant beat grpo: the largest gap between their means (0.0 points)" in line
    assert "No variant's mean ended above the warm start." in line
    assert "94% of steps share their state" in line
    apart = {k: {"success": 0.5 + 0.01 * k[1] if k[0] == "hgpo" else 0.1} for k in noisy}
    line = verdict_line(setup, rl, rl, apart, base, None)
    assert "hgpo beat grpo: their intervals over seeds do not overlap." in line
    assert "Too few runs" in verdict_line(setup, rl[:4], rl, apart, base, None)
    same = {k: {"success": 0.0} for k in noisy}
    assert "Every run ended at the same held-out success (0.0%)" in verdict_line(
        setup, rl, rl, same, base, None)


def test_finished_runs_are_slimmed_to_their_last_weights(tmp_path):
    """Only training folders nothing resumes lose their older checkpoints and optimizer
    state, and what stays still loads as a checkpoint."""
    torch = pytest.importorskip("torch")
    from agentgym.trainers.checkpoint import TrainState, latest, save, slim

    every = list(units(SETUPS["sokoban"], tmp_path / "cache", tmp_path / "rec"))
    by = {(u.kind, u.estimator, u.seed): u for u in every}
    done = [by["sft", "", 0], by["rl", "grpo", 0], by["final", "grpo", 0],
            by["rl", "gigpo", 0]]  # gigpo's finer evaluation is still to run
    for u in done:
        u.record.parent.mkdir(parents=True, exist_ok=True)
        u.record.write_text("{}")
    assert finished_runs(every) == [done[0].folder, done[1].folder / "run"]

    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    run = done[1].folder / "run"
    for step in (7, 8):
        save(run, TrainState(step=step, next_seed=step), model, optimizer)
    freed = slim(run)
    assert freed > 0 and [p.name for p in (run / "checkpoints").iterdir()] == ["step-000008"]
    assert latest(run).name == "step-000008"
    assert sorted(p.name for p in latest(run).iterdir()) == ["model.safetensors", "rng.pt",
                                                             "state.json"]
    assert slim(run) == 0


def test_across_envs_waits_for_every_run_then_weighs_changes_against_seeds(tmp_path):
    """The study's cross-env answer: nothing until each env has every run; then a change
    counts only beyond both the evaluation's resolution and the spread over seeds."""
    envs = []
    for name in ("sokoban", "frozenlake"):
        setup = SETUPS[name]
        rl = [u for u in units(setup, tmp_path / name) if u.kind == "rl"]
        for unit in rl:
            unit.record.parent.mkdir(parents=True, exist_ok=True)
            unit.record.write_text(json.dumps({"held_out_before": 0.25, "held_out_after": 0.25,
                                               "train_success": [0.25, 0.25]}))
        base = {"success": 0.25, "episodes": 96, "draws": 4}
        finer = {(u.variant, u.seed): {"success": 0.25 + 0.01 * u.seed} for u in rl}
        envs.append((setup, rl, rl, finer, base, {"share_grouped": {"1": 0.9}}))
    waiting = across_line([envs[0], (*envs[1][:1], envs[1][1][:5], *envs[1][2:])])
    assert "waiting on textarena/FrozenLake-v0 (5 of 12)" in waiting
    line = across_line(envs)
    assert "step-level credit beat grpo in none of them" in line
    assert "agentgym/Sokoban-v0 90%, textarena/FrozenLake-v0 90%" in line
    assert "in 16 groups, 25% of them successes, so about 11 groups" in line
    assert "agentgym/Sokoban-v0 gigpo +1.0" in line and "This is a null result" in line
    # one variant far up on every seed: it beat GRPO, and the page says so, not "null"
    setup, rl, _, finer, base, rev = envs[1]
    up = {k: {"success": 0.7 + 0.01 * k[1]} if k[0] == "hgpo" else v for k, v in finer.items()}
    line = across_line([envs[0], (setup, rl, rl, up, base, rev)])
    assert "textarena/FrozenLake-v0: hgpo beat grpo, in 1 of 2." in line
    assert "beyond both the evaluation and the seeds' spread: textarena/FrozenLake-v0 hgpo " \
           "+46.0 ± 2.5" in line and "null result" not in line


def test_a_regenerated_unit_is_compared_with_its_record_as_stored():
    """A tuple in a fresh result is a list in its JSON record: not a difference; a changed
    figure is, and wall time, machine and a hand-written note are not results."""
    record = {"top_action": ["up", 0.26], "success": 0.2, "wall_seconds": 5.0, "note": "x"}
    assert record_changes(record, {"top_action": ("up", 0.26), "success": 0.2,
                                   "wall_seconds": 9.0}) == {}
    assert record_changes(record, {"top_action": ("up", 0.26), "success": 0.25}) == {
        "success": (0.2, 0.25)}


def test_curves_evaluated_between_the_ends_are_tabled_by_step(tmp_path):
    """The 4x arm evaluates every 8 of its 32 steps: its page reads the 8-step budget off the
    same runs (mean ± 95% over seeds at each point); runs evaluated only at both ends do not
    get the table."""
    setup = SETUPS["sokoban_4x"]
    rl = [u for u in units(setup, tmp_path) if u.kind == "rl"]
    assert [(u.variant, u.seed) for u in rl[:3]] == [("grpo", 0), ("gigpo", 0), ("grpo", 1)]
    for unit, ends in zip(rl[:3], ((0.25, 0.5), (0.25, 0.25), (0.25, 0.75)), strict=True):
        unit.record.parent.mkdir(parents=True, exist_ok=True)
        curve = [[0, ends[0]], [8, ends[1]], [16, ends[1]], [24, ends[1]], [32, ends[1]]]
        unit.record.write_text(json.dumps({"curve": curve}))
    lines = curve_lines(setup, rl[:3])
    assert lines[2] == "| run | seeds | step 0 | step 8 | step 16 | step 24 | step 32 |"
    assert lines[4].startswith("| grpo | 2 | 25.0% ± 0.0% | 62.5% ± 158.8% |")
    assert lines[5].startswith("| gigpo | 1 | 25.0% ± 0.0% | 25.0% ± 0.0% |")
    for unit in rl[:3]:
        unit.record.write_text(json.dumps({"curve": [[0, 0.25], [32, 0.5]]}))
    assert curve_lines(setup, rl[:3]) == []


def test_a_change_that_rounds_to_nothing_is_plus_zero():
    """A mean equal to the warm start's up to float rounding reads +0.0, never -0.0."""
    assert f"{-1e-9:+.1f}" == "-0.0" and points(-1e-9) == "+0.0"
    assert points(-0.0104) == "-1.0" and points(0.007) == "+0.7"


def test_runs_from_two_machines_are_named_by_machine(tmp_path):
    """Seconds from two CPUs do not compare: where the runs came from both, the page says
    which ran where; from one machine it says nothing."""
    rl = [u for u in units(SETUPS["frozenlake"], tmp_path) if u.kind == "rl"]
    for unit, cpu in zip(rl[:3], ("AMD EPYC", "AMD EPYC", "Intel Xeon"), strict=True):
        unit.record.parent.mkdir(parents=True, exist_ok=True)
        unit.record.write_text(json.dumps({"machine": f"{cpu}, 2 cores, load average 1.9"}))
    assert machines_line(rl[:2]) == ""
    assert machines_line(rl[:3]).endswith(
        "AMD EPYC, 2 cores: grpo 0, gigpo 0; Intel Xeon, 2 cores: hgpo 0.")


def test_expert_episodes_that_errored_stop_the_study_and_are_made_again(tmp_path, monkeypatch):
    """Demonstrations with an infrastructure fault (no Docker engine for SWE's expert) are
    not demonstrations: the unit fails and drops its file, so the next call makes it again
    rather than training SFT on nothing."""
    from agentgym.jsonl import write_trajectories
    from agentgym.types import Message, Trajectory

    demos = tmp_path / "expert.jsonl"

    def rollout(status):
        def cli(args, limit_s):
            write_trajectories(demos, [Trajectory(f"t{i}", "x", "g", (Message("user", "hi"),),
                                                  status=status, outcome_reward=None
                                                  if status == "error" else 1.0,
                                                  error="SandboxError: no engine"
                                                  if status == "error" else None)
                                       for i in range(2)])
            return True
        return cli

    monkeypatch.setattr(run, "_cli", rollout("error"))
    ok, result = run.demonstrations(SETUPS["swe"], demos, 60.0)
    assert not ok and not demos.exists() and "top_action" not in result
    monkeypatch.setattr(run, "_cli", rollout("terminated"))
    ok, result = run.demonstrations(SETUPS["swe"], demos, 60.0)
    assert ok and demos.exists() and result["episodes"] == 18


def test_swe_page_reports_the_accumulated_reward_not_the_env_reward(tmp_path):
    """An SWE run that resolves nothing has env reward 0 throughout; the page reports the
    accumulated terms it trained on instead, says when G-RA counted no turn reward, and
    marks a column that only some seeds logged."""
    setup = SETUPS["swe"]
    rl = [u for u in units(setup, tmp_path) if u.kind == "rl"]
    direct, gated = (next(u for u in rl if u.accumulation == a and u.seed == 0)
                     for a in ("direct", "gated"))
    later = next(u for u in rl if u.accumulation == "gated" and u.seed == 1)
    terms = {"reward/outcome": [-1.0, -0.5], "reward/turns": [-0.3, 0.1]}
    for unit, gate, extra in ((direct, 1.0, {}), (gated, 0.0, {}),
                              (later, 0.0, {"accumulated/zero_variance_groups": [0.5, 0.0]})):
        unit.record.parent.mkdir(parents=True, exist_ok=True)
        unit.record.write_text(json.dumps({
            "held_out_before": 0.0, "held_out_after": 0.0, "train_success": [0.0, 0.0],
            "completion_rate": [0.25, 0.75], "invalid_step_rate": [0.8, 0.4],
            "reward_terms": {**terms, "reward/gate_turns": [gate, gate], **extra}}))
    text = "\n".join(accumulation_lines(setup, [direct, gated, later]))
    assert "was 0 in every training rollout" in text
    assert "(-1 no submission, -0.5 empty patch, 0 failing patch, +1 resolved)" in text
    assert "| grpo direct | 1 | -1.00 → -0.50 | -0.30 → +0.10 | 100% → 100% | – |" in text
    assert "| grpo gated | 2 |" in text and "50% → 0% (1 of 2 seeds)" in text
    assert "grpo direct completion 25% → 75%, invalid steps 80% → 40% (1 seed)" in text
    assert "G-RA counted no turn reward" in text
    gated.record.write_text(json.dumps({"held_out_before": 0.0, "held_out_after": 0.0,
                                        "completion_rate": [0.25, 0.75],
                                        "reward_terms": {"reward/outcome": [-1.0, -0.5],
                                                         "reward/gate_turns": [0.0, 0.5]}}))
    text = "\n".join(accumulation_lines(setup, [direct, gated, later]))
    assert "G-RA counted turn rewards in 4 of its 32 training rollouts" in text
    assert "Training rollouts succeeded" not in reading_line(setup, [direct], {}, None)
    assert accumulation_lines(SETUPS["frozenlake"], []) == []
    summary = accumulation_summary(setup, [direct, gated, later])
    assert ("in points: completion grpo direct +50.0 (1 seed), grpo gated +50.0 ± 0.0 "
            "(2 seeds).") in summary
    assert "Over seeds, completion moved beyond its 95% interval in grpo gated." in text
    # where runs resolve tasks, the resolve rate is read beside completion
    for unit in (gated, later):
        unit.record.write_text(json.dumps({
            **json.loads(unit.record.read_text()), "completion_rate": [0.25, 0.75],
            "invalid_step_rate": [0.8, 0.4], "resolve_rate": [0.25, 0.5],
            "modification_rate": [0.5, 0.75]}))
    summary = accumulation_summary(setup, [direct, gated, later])
    assert "; resolve grpo gated +25.0 ± 0.0 (2 seeds)." in summary  # direct logged none
    text = "\n".join(accumulation_lines(setup, [direct, gated, later]))
    assert ("grpo gated completion 25% → 75%, modification 50% → 75%, resolve 25% → 50%, "
            "invalid steps 80% → 40% (2 seeds)") in text
    assert "in grpo gated, resolve in grpo gated." in text


def test_swe_page_says_when_the_gate_changed_no_reward(tmp_path):
    """G-RA's withheld turn reward per step is reward/turns − (accumulated − outcome); where
    it is zero throughout and the rates match, the page says the arm could not differ."""
    setup = SETUPS["swe_editor"]
    rl = [u for u in units(setup, tmp_path) if u.kind == "rl" and u.seed == 0]
    rates = {"completion_rate": [1.0, 1.0], "modification_rate": [0.5, 0.75],
             "resolve_rate": [0.5, 0.75], "train_success": [0.5, 0.75]}

    def write(accumulated):
        for unit in rl:
            unit.record.parent.mkdir(parents=True, exist_ok=True)
            unit.record.write_text(json.dumps({
                "held_out_before": 0.0, "held_out_after": 0.0, **rates,
                "reward_terms": {"reward/outcome": [0.25, 0.6], "reward/turns": [0.1, 0.15],
                                 "reward/gate_turns": [0.5, 0.75],
                                 "accumulated/reward_mean": accumulated}}))

    write([0.35, 0.75])  # outcome + every turn reward: nothing withheld
    assert "gave the accumulations nothing to differ on" in accumulation_summary(setup, rl)
    text = "\n".join(accumulation_lines(setup, rl))
    assert "Yet in all 2 of its training steps the turn rewards G-RA withheld summed to zero" \
        in text
    write([0.35, 0.7])  # 0.05 withheld at the second step
    assert "nothing to differ on" not in accumulation_summary(setup, rl)
    assert "withheld was nonzero in 1 of 2 training steps" in "\n".join(
        accumulation_lines(setup, rl))


def test_the_committed_page_is_what_its_records_write(tmp_path):
    """docs/learning.md says it is written by the study: rewriting it must lose nothing."""
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "learning.md"
    subprocess.run([sys.executable, str(root / "benchmarks" / "credit_study.py"), "--report",
                    "--cache", str(tmp_path / "cache"), "--out", str(out)],
                   check=True, capture_output=True, text=True)
    committed = (root / "docs" / "learning.md").read_text()
    assert out.read_text() == committed, (
        "docs/learning.md differs from what `python benchmarks/credit_study.py --report` "
        "writes: edit agentgym/trainers/study (findings.py for the quoted findings), then "
        "run that command")


def test_an_arm_has_a_warm_start_and_runs_of_its_own(tmp_path):
    """Sokoban at 4x the steps shares the env's records folder and demonstrations but trains
    its own warm start (the same recipe; the key holds the arm) and keys its own RL runs;
    its section shows that warm start, not the env's superseded ones."""
    env, arm = SETUPS["sokoban"], SETUPS["sokoban_4x"]
    assert arm.steps == 4 * env.steps and arm.sft_key() != env.sft_key()
    assert SETUPS["sokoban"].sft_key() == "sft-e052c185"  # the env's key did not move
    mine = {u.kind: u.record for u in units(arm, tmp_path)}
    theirs = {u.kind: u.record for u in units(env, tmp_path)}
    assert mine["demos"] == theirs["demos"] and mine["random"] == theirs["random"]
    assert mine["sft"] != theirs["sft"] and mine["sft"].parent == theirs["sft"].parent
    arm_runs = [u for u in units(arm, tmp_path) if u.kind == "rl"]
    assert [u.estimator for u in arm_runs] == ["grpo", "gigpo"] * 3
    key, _ = next(iter(SUPERSEDED["sokoban"].items()))
    (tmp_path / "sokoban").mkdir()
    (tmp_path / "sokoban" / f"{key}.json").write_text(
        json.dumps({"tuning_success_before": 0.0, "tuning_success_after": 0.04}))
    page = report([env, arm], tmp_path, "cmd", tmp_path / "x.md")
    section = page.split("## agentgym/Sokoban-v0 (4x the steps)")[1]
    assert "32 steps × 2 tasks × 4 rollouts" in section and "**SFT warm start**" in section
    assert key not in section and key in page.split("## agentgym/Sokoban-v0 (4x")[0]
    assert "still to run: grpo/seed 0, gigpo/seed 0" in section
