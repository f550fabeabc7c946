"""Mistakes in every command's inputs (serve aside): exit 2, one ``error:`` line naming the
field or file and the fix, no traceback, and nothing written.

Each row is an input and the text its message must hold. Every row fails before a model
loads, so the table runs in seconds: a damaged run, a folder that is no model, counts past
what the machine holds, non-finite numbers, foreign results, and paths that cannot be
written. The run and model fixtures are real (a tiny random model's checkpoint).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from agentgym import cli

RESULTS = {"suite_tag": "s@1", "policy": "random",
           "metrics": {"a": {"episodes": 2, "errors": 0, "successes": 1, "success_rate": 0.5,
                             "mean_reward": 0.5},
                       "overall": {"episodes": 2, "errors": 0, "successes": 1,
                                   "success_rate": 0.5, "mean_reward": 0.5}}}


def _write_run(run: Path, model_dir: Path) -> None:
    """A run folder as train leaves it: its config and two checkpoints of the tiny model."""
    from agentgym.trainers import checkpoint
    from agentgym.trainers.checkpoint import TrainState
    from agentgym.trainers.config import load_config, save_config
    from agentgym.trainers.models import load_trained_model

    run.mkdir()
    save_config(load_config(None, [f"run_dir={run}", f"model.path={model_dir}",
                                   "env.id=agentgym/MentalMath-v0"]), run / "config.yaml")
    model, _ = load_trained_model(str(model_dir))
    for step in (1, 2):
        checkpoint.save(run, TrainState(step, 4 * step), model, None)


def _damaged(world: Path, name: str, file: str, damage) -> None:
    shutil.copytree(world / "run", world / name)
    damage(world / name / "checkpoints" / "step-000002" / file)


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_model_dir) -> Path:
    """Runs (whole and damaged), models (whole and not), eval results, configs, a file."""
    d = tmp_path_factory.mktemp("round3")
    _write_run(d / "run", tiny_model_dir)
    weights = (d / "run" / "checkpoints" / "step-000002" / "model.safetensors")
    size = weights.stat().st_size
    _damaged(d, "cut-weights", "model.safetensors",
             lambda p: p.write_bytes(p.read_bytes()[:size - 100]))
    _damaged(d, "cut-header", "model.safetensors", lambda p: p.write_bytes(p.read_bytes()[:500]))
    _damaged(d, "cut-state", "state.json", lambda p: p.write_text('{"step": 2, "next'))
    _damaged(d, "no-step", "state.json", lambda p: p.write_text('{"next_seed": 8}'))
    _damaged(d, "list-state", "state.json", lambda p: p.write_text("[2, 8]"))
    for name, text in (("yaml-run", "model: {path: [\n"), ("list-run", "- 1\n"),
                       ("foreign-run", "learning_rate: 3\n")):
        shutil.copytree(d / "run", d / name)
        (d / name / "config.yaml").write_text(text)
    (d / "notmodel").mkdir()
    (d / "notmodel" / "readme.txt").write_text("not a model")
    shutil.copytree(tiny_model_dir, d / "badjson-model")
    (d / "badjson-model" / "config.json").write_text("{")
    shutil.copytree(tiny_model_dir, d / "cut-model")
    cut = d / "cut-model" / "model.safetensors"
    cut.write_bytes(cut.read_bytes()[:-10])
    (d / "afile").write_text("a file")
    (d / "base.yaml").write_text(yaml.safe_dump({
        "model": {"path": str(tiny_model_dir)}, "env": {"id": "agentgym/MentalMath-v0"},
        "tensorboard": False, "steps": 1,
        "rollout": {"tasks_per_step": 1, "group_size": 2, "max_tokens": 2}}))
    (d / "mix.yaml").write_text(yaml.safe_dump({"model": {"path": str(tiny_model_dir)}}))
    (d / "empty.yaml").write_text("# nothing here yet\n")
    (d / "list.yaml").write_text("- env\n")
    (d / "foreign").mkdir()
    (d / "foreign" / "config.yaml").write_text("my: notes\n")
    (d / "has-model" / "model").mkdir(parents=True)  # e.g. a folder of the user's models
    (d / "metrics-only").mkdir()
    (d / "metrics-only" / "metrics.jsonl").write_text('{"step": 1}\n')
    for name, text in (("a", json.dumps(RESULTS)), ("cut", json.dumps(RESULTS)[:60]),
                       ("nometrics", '{"policy": "x"}'), ("list", "[1, 2]"),
                       ("badcount", json.dumps({"metrics": {"a": {"episodes": "x"}}})),
                       ("other", json.dumps({**RESULTS, "metrics": {
                           "b": RESULTS["metrics"]["a"], "overall": RESULTS["metrics"]["a"]}}))):
        (d / f"eval-{name}").mkdir()
        (d / f"eval-{name}" / "results.json").write_text(text)
    (d / "eval-manifest").mkdir()
    (d / "eval-manifest" / "manifest.json").write_text('{"suite": ')
    for name, entry in (("seed", "tasks: 2\n    seed: -1"), ("seeds", "seeds: [3, -1]")):
        (d / f"suite-{name}.yaml").write_text(
            f"name: s\nversion: 1\nentries:\n  - env: agentgym/MentalMath-v0\n    {entry}\n")
    (d / "noeval-run").mkdir()
    (d / "noeval-run" / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n')
    (d / "corrupt-run").mkdir()
    (d / "corrupt-run" / "metrics.jsonl").write_text('{"step": 1\n{"step": 2}\n')
    demo = {"schema_version": 1, "id": "t0", "task_id": "t", "group_id": "g",
            "env_id": "agentgym/MentalMath-v0", "status": "terminated", "outcome_reward": 1.0,
            "prompt": [{"role": "user", "content": "What is 1 + 1?"}],
            "steps": [{"index": 0, "action": {"role": "assistant", "content": "2\ud800"},
                       "result": {"observation": [], "reward": 1.0, "terminated": True,
                                  "truncated": False, "info": {"success": True}}}]}
    (d / "surrogate.jsonl").write_text(json.dumps(demo) + "\n")  # \ud800 as a JSON escape
    (d / "sft.yaml").write_text(yaml.safe_dump({
        "data": {"paths": [str(d / "surrogate.jsonl")]}, "model": {"path": str(tiny_model_dir)},
        "env": {"id": "agentgym/MentalMath-v0"}, "tensorboard": False}))
    return d


def run(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["agentgym", *args])
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.delenv("AGENTGYM_TRACEBACK", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    captured = capsys.readouterr()
    return int(exit_info.value.code or 0), captured.out + captured.err


TRAIN = ("train", "{d}/base.yaml", "run_dir={d}/new-run")
EVAL = ("eval", "--suite", "arithmetic", "--tasks", "1", "--out", "{d}/new-eval")
ROLLOUT = ("rollout", "agentgym/MentalMath-v0", "--episodes", "2", "--out", "{d}/new.jsonl")
CUDA = "model.device=cuda"

CASES = [
    # export: damaged, truncated or foreign runs; a base that is no model; unwritable --out
    (("export", "{d}/cut-weights", "--out", "{d}/x"), "step-000002/model.safetensors is damaged"),
    (("export", "{d}/cut-weights", "--out", "{d}/x"), "use another checkpoint of the run"),
    (("export", "{d}/cut-header", "--out", "{d}/x"), "shorter than its header"),
    (("export", "{d}/cut-state", "--out", "{d}/x"), "state.json is damaged (not JSON"),
    (("export", "{d}/no-step", "--out", "{d}/x"), "state.json is damaged (step is None)"),
    (("export", "{d}/list-state", "--out", "{d}/x"), "a list, not an object"),
    (("export", "{d}/run", "--out", "{d}/x", "--base", "{d}/notmodel"),
     "--base '{d}/notmodel' is not a model folder: it has no config.json"),
    (("export", "{d}/run", "--out", "{d}/x", "--base", "{d}/nowhere"), "is not a local folder"),
    (("export", "{d}/run", "--out", "{d}/x", "--base", "{d}/badjson-model"),
     "config.json is not valid JSON"),
    (("export", "{d}/run", "--out", "{d}/x", "--base", "{d}/cut-model"),
     "cut-model/model.safetensors is damaged"),
    (("export", "{d}/run", "--out", "{d}/afile/sub"), "which is a file, not a folder"),
    (("export", "{d}/run", "--out", "{d}/afile"), "is a file; expected a folder"),
    (("export", "{d}/yaml-run", "--out", "{d}/x"), "yaml-run/config.yaml: line 2"),
    (("export", "{d}/list-run", "--out", "{d}/x"), "must hold a mapping of sections"),
    (("export", "{d}/foreign-run", "--out", "{d}/x"), "is not a run config agentgym can read"),
    (("export", "{d}/run", "--out", "{d}/x", "--step", "9"), "has steps [1, 2]"),
    # train: every field checked at load, before any model loads
    ((*TRAIN, "seed=1208925819614629174706176"), "seed must be an integer of at most 63 bits"),
    ((*TRAIN, "seed=-1"), "seed must be in [0, 2**32)"),
    ((*TRAIN, "model.lora.enabled=true", "model.lora.r=0"), "model.lora.r (the adapter rank)"),
    ((*TRAIN, "model.lora.enabled=true", "model.lora.target_modules=[q_proj, nope]"),
     "model.lora.target_modules ['nope'] match no module"),
    (("train", "{d}/base.yaml", "run_dir={d}/afile"), "run_dir '{d}/afile' is a file"),
    (("train", "{d}/base.yaml", "run_dir={d}/afile/run"), "which is a file, not a folder"),
    (("train", "{d}/mix.yaml", "run_dir={d}/new-run",
      "envs=[{id: agentgym/MentalMath-v0, weight: 1e308}, {id: agentgym/Sokoban-v0, "
      "weight: 1e308}]"), "the envs weights sum to inf"),
    ((*TRAIN, "rollout.tasks_per_step=1000000000"), "expected at most 1,000,000"),
    ((*TRAIN, "rollout.group_size=1000000000"), "expected at most 1,000,000"),
    ((*TRAIN, "env.eval_seeds=2000000"), "env.eval_seeds=2,000,000 x env.eval_draws=1"),
    (("train", "{d}/empty.yaml"), "config file '{d}/empty.yaml' is empty"),
    (("train", "{d}/list.yaml"), "must hold a mapping of sections"),
    (("train", "{d}"), "is a folder; expected a config YAML file"),
    ((*TRAIN, "optim.epochs=0"), "optim.epochs must be >= 1"),
    ((*TRAIN, "env.eval_seeds=-1"), "env.eval_seeds must be >= 0"),
    ((*TRAIN, "env.first_seed=-1"), "env.first_seed must be >= 0"),
    ((*TRAIN, "optim.lr=.inf"), "optim.lr must be a finite number, got inf"),
    ((*TRAIN, "optim.lr=.nan"), "optim.lr must be a finite number, got nan"),
    ((*TRAIN, "optim.lr=1e400"), "optim.lr must be a finite number, got inf"),
    ((*TRAIN, "optim.lr=5"), "optim.lr must be in (0, 1]"),
    ((*TRAIN, "loss.kl_coef=-.inf"), "loss.kl_coef must be a finite number"),
    ((*TRAIN, "algorithm.options.gamma=.nan"), "algorithm.options.gamma must be a finite"),
    ((*TRAIN, "env.kwargs={max_turns: .inf}"), "env.kwargs.max_turns must be a finite"),
    ((*TRAIN, "eval_every=-1"), "eval_every must be >= 0"),
    ((*TRAIN, "rollout.top_p=0"), "rollout.top_p must be in (0, 1]"),
    ((*TRAIN, "rollout.step_timeout=-5"), "rollout.step_timeout must be > 0"),
    ((*TRAIN, "rollout.concurrency=0"), "rollout.concurrency must be >= 1"),
    ((*TRAIN, "model.max_batch_size=0"), "model.max_batch_size must be in [1, 4096]"),
    ((*TRAIN, "model.path={d}/notmodel"), "model.path '{d}/notmodel' is not a model folder"),
    ((*TRAIN, "model.path={d}/cut-weights/checkpoints/step-000002"),
     "cut-weights/checkpoints/step-000002/model.safetensors is damaged"),
    (("train", "{d}/base.yaml", "run_dir={d}/foreign"), "holds a config.yaml that no agentgym"),
    (("train", "{d}/base.yaml", "run_dir={d}/metrics-only"), "holds metrics.jsonl but no"),
    (("train", "{d}/base.yaml", "run_dir={d}/cut-state", "--resume"), "state.json is damaged"),
    # eval
    ((*EVAL, "--policy", "random", "--concurrency", "0"), "--concurrency (episodes in flight"),
    (("eval", "--suite", "arithmetic", "--policy", "random", "--out", "{d}/afile"),
     "--out '{d}/afile' is a file"),
    (("eval", "--suite", "arithmetic", "--policy", "random", "--out", "{d}/afile/e"),
     "which is a file, not a folder"),
    ((*EVAL, "--policy", "hf:{d}/notmodel"), "--policy hf:{d}/notmodel '{d}/notmodel' is not a"),
    ((*EVAL, "--policy", "hf:"), "--policy hf: is empty"),
    ((*EVAL, "--policy", "random", "--policy", "nope"), "--policy: unknown policy 'nope'"),
    ((*EVAL, "--policy", "random", "--retries", "-1"), "--retries must be in [0, 100]"),
    ((*EVAL, "--policy", "random", "--max-turns", "0"), "--max-turns must be >= 1"),
    ((*EVAL, "--policy", "random", "--step-timeout", "-5"), "--step-timeout must be a number"),
    ((*EVAL, "--policy", "random", "--step-timeout", "nan"), "--step-timeout must be a number"),
    ((*EVAL, "--policy", "random", "--seed", "-1"), "--seed must be in [0, 2**63)"),
    (("eval", "--suite", "{d}/suite-seed.yaml", "--policy", "random", "--out", "{d}/e"),
     "`seed` (the first task seed) must be an int in [0, 2**63), got -1"),
    (("eval", "--suite", "{d}/suite-seeds.yaml", "--policy", "random", "--out", "{d}/e"),
     "`seeds` must lie in [0, 2**63), got [-1]"),
    (("eval", "--suite", "arithmetic", "--policy", "random", "--out", "{d}/eval-manifest"),
     "manifest.json is damaged (not JSON)"),
    (("eval", "--suite", "arithmetic", "--policy", "random", "--out", "{d}/eval-a"),
     "holds results.json but no manifest.json"),
    (("eval", "--train-run", "{d}/noeval-run", "--out", "{d}/e"), "holds no held-out evaluation"),
    (("eval", "--train-run", "{d}/corrupt-run", "--out", "{d}/e"), "metrics.jsonl:1: not a"),
    (("eval", "--train-run", "{d}/notmodel", "--out", "{d}/e"), "holds no metrics.jsonl"),
    # rollout
    ((*ROLLOUT, "--episodes", "1000000000"), "--episodes 1,000,000,000 is more than"),
    ((*ROLLOUT, "--step-timeout", "-5"), "--step-timeout must be a number of seconds > 0"),
    ((*ROLLOUT, "--concurrency", "0"), "--concurrency (episodes in flight) must be >= 1"),
    ((*ROLLOUT, "--out", "{d}/afile/x.jsonl"), "which is a file, not a folder"),
    ((*ROLLOUT, "--seed", "-1"), "--seed (the first task seed) must be in [0, 2**63)"),
    ((*ROLLOUT, "--history-length", "0"), "--history-length must be >= 1"),
    ((*ROLLOUT, "--policy", "hf:{d}/notmodel"), "is not a model folder"),
    ((*ROLLOUT, "--out", "{d}/base.yaml"), "exists and is not a trajectory file"),
    # compare
    (("compare", "{d}/eval-a", "{d}/eval-cut"), "eval-cut/results.json: not valid JSON"),
    (("compare", "{d}/eval-a", "{d}/eval-nometrics"), "holds no `metrics` mapping"),
    (("compare", "{d}/eval-a", "{d}/eval-list"), "holds no `metrics` mapping"),
    (("compare", "{d}/eval-badcount", "{d}/eval-a"), "entry 'a' needs whole counts"),
    (("compare", "{d}/eval-a", "{d}/afile"), "afile: not valid JSON"),
    (("compare", "{d}/eval-a", "{d}/eval-other"), "the two evals share no entry"),
    # sft
    (("sft", "{d}/sft.yaml", "run_dir={d}/new-sft"), "holds a lone surrogate (\\ud800"),
    (("sft", "{d}/sft.yaml", "run_dir={d}/new-sft"), "in steps[0].action.content"),
    (("sft", "{d}/empty.yaml"), "is empty"),
    (("sft", "{d}/sft.yaml", "run_dir={d}/foreign"), "holds a config.yaml that no agentgym"),
    (("sft", "{d}/sft.yaml", "run_dir={d}/has-model"), "holds model but no config.yaml"),
]


@pytest.mark.parametrize(("args", "expected"), CASES,
                         ids=lambda v: " ".join(v) if isinstance(v, tuple) else None)
def test_a_mistake_is_one_error_line(world, monkeypatch, capsys, args, expected):
    before = sorted(p.name for p in world.iterdir())
    code, output = run(monkeypatch, capsys, *(a.replace("{d}", str(world)) for a in args))
    assert "Traceback" not in output
    lines = [line for line in output.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), output
    assert expected.replace("{d}", str(world)) in lines[0], output
    assert sorted(p.name for p in world.iterdir()) == before  # nothing created


def test_a_device_this_torch_lacks_is_refused_before_loading(world, monkeypatch, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    for args in ((*TRAIN, CUDA), (*ROLLOUT, "--policy", "smollm2", "--device", "cuda")):
        code, output = run(monkeypatch, capsys, *(a.replace("{d}", str(world)) for a in args))
        assert code == 2 and "has no usable CUDA device" in output and "Traceback" not in output


def test_train_leaves_a_foreign_config_yaml_as_it_was(world, monkeypatch, capsys):
    """A folder that is not a run but holds a config.yaml: refused, the file kept."""
    mine = world / "foreign" / "config.yaml"
    before = mine.read_bytes()
    code, _ = run(monkeypatch, capsys, "train", str(world / "base.yaml"),
                  f"run_dir={world / 'foreign'}")
    assert code == 2 and mine.read_bytes() == before
    assert sorted(p.name for p in (world / "foreign").iterdir()) == ["config.yaml"]


def test_compare_of_different_entries_has_no_overall_row(tmp_path, monkeypatch, capsys):
    """Runs sharing some entries: those are compared; an overall B - A would mix tasks."""
    from agentgym.evaluation.compare import compare

    both = {**RESULTS, "metrics": {**RESULTS["metrics"], "b": RESULTS["metrics"]["a"]}}
    rows = compare(RESULTS, both, {}, {})
    assert list(rows) == ["a"]
    assert list(compare(RESULTS, RESULTS, {}, {})) == ["a", "overall"]
    for name, results in (("a", RESULTS), ("both", both)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(results))
    code, output = run(monkeypatch, capsys, "compare", str(tmp_path / "a"),
                       str(tmp_path / "both"))
    assert code == 0 and "overall" not in output.split("warning")[0]
    assert "no overall row" in output
