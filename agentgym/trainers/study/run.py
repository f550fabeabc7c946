"""The credit study's work: each unit's run, as a subprocess of the CLI, and its result.

Every unit calls ``agentgym`` (``rollout``, ``sft``, ``train``, ``export``) with the setup's
settings, under a time limit it resumes from; when it finishes, its result is written to its
record. :func:`run_setup` runs an env's unfinished units in order.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from agentgym.files import atomic_write
from agentgym.trainers.study.units import (
    BAND,
    HELD_OUT_FIRST_SEED,
    ROOT,
    SWE_RATES,
    TUNING_FIRST_SEED,
    Setup,
    Unit,
    completion_loss,
    machine,
    metrics,
    needed_files,
    warm_enough,
)


def _write_json(path: Path, data: Any) -> None:
    atomic_write(path, json.dumps(data, indent=2) + "\n")


def _cli(args: list[str], limit_s: float) -> bool:
    """Run ``agentgym ARGS``; False when it ran out of time (it resumes on the next call)."""
    try:
        subprocess.run([sys.executable, "-m", "agentgym.cli", *args], cwd=ROOT, check=True,
                       timeout=limit_s)
    except subprocess.TimeoutExpired:
        print(f"stopped at the time limit; the next call resumes: agentgym {' '.join(args)}")
        return False
    return True


def run_unit(unit: Unit, cache: Path, limit_s: float) -> bool:
    """Do (or go on with) one unit; True when it finished (its record is then written).

    A unit run again only for its files (its record exists) keeps its record; a result
    that differs from it is printed.
    """
    s, folder = unit.setup, unit.folder
    folder.mkdir(parents=True, exist_ok=True)
    sft_dir = cache / s.name / s.sft_key()
    demos = cache / s.name / f"demos-{s.expert_episodes}" / "expert.jsonl"
    env = {"id": s.env_id, "kwargs": s.kwargs, "max_turns": s.max_turns,
           **({"eval_kwargs": s.eval_kwargs} if s.eval_kwargs else {})}
    rollout = {"context": "window", "history_length": s.history_length,
               "max_tokens": s.max_tokens, **(s.rollout_options or {})}
    start = time.time()
    if unit.kind == "demos":
        ok, result = demonstrations(s, demos, limit_s)
    elif unit.kind == "random":
        ok, result = random_play(s, folder, limit_s)
    elif unit.kind == "sft":
        ok, result = supervised(s, folder, env, rollout, demos, limit_s)
    elif unit.kind == "revisits":
        ok, result = revisits(s, sft_dir / "model", folder, limit_s)
    elif unit.kind == "warmth":
        ok, result = warmth(s, sft_dir / "model", demos, folder, limit_s)
    elif unit.kind == "baseline":
        ok, result = finer_held_out(s, sft_dir / "model", folder, limit_s)
    elif unit.kind == "final":
        ok, result = final_held_out(s, folder, limit_s)
    else:
        config = {"run_dir": str(folder / "run"), "seed": unit.seed, "steps": s.steps,
                  "save_every": 1, "resumable_checkpoints": True, "eval_every": s.eval_every,
                  "env": {**env, "eval_seeds": s.eval_seeds, **s.sampled(),
                          "eval_first_seed": HELD_OUT_FIRST_SEED,
                          "first_seed": 10_000 * unit.seed},
                  "model": {"path": str(sft_dir / "model"), "device": s.device,
                            "dtype": s.dtype, "generation": s.generation},
                  "rollout": {**rollout, "tasks_per_step": s.tasks_per_step,
                              "group_size": s.group_size},
                  "algorithm": {"estimator": unit.estimator,
                                **({"reward_accumulation": unit.accumulation}
                                   if unit.accumulation != "none" else {})},
                  "optim": {"lr": s.lr, **(s.optim_options or {})}}
        path = folder / "config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        resume = ["--resume"] if (folder / "run" / "checkpoints").is_dir() else []
        ok = _cli(["train", str(path), *resume], limit_s)
        result = rl_result(folder / "run")
    wall = folder / "wall.json"
    spent = (json.loads(wall.read_text())["seconds"] if wall.is_file() else 0.0)
    spent += time.time() - start
    _write_json(wall, {"seconds": spent, "machine": machine()})
    if ok:
        result = {**result, "wall_seconds": spent, "machine": machine()}
        _write_json(folder / "result.json", result)
        if not unit.done:
            unit.record.parent.mkdir(parents=True, exist_ok=True)
            _write_json(unit.record, result)
        else:
            changed = record_changes(unit.result(), result)
            print(f"regenerated {unit.kind} {folder.name}: "
                  + (f"differs from its record: {changed}" if changed else "as recorded"))
    return ok


def rl_result(run: Path) -> dict[str, Any]:
    """An RL run's result, from its ``metrics.jsonl``.

    The held-out curve, cost, and per training step its success, tokens and, where logged,
    the SWE rates, the invalid-step rate and the accumulated rewards (``reward_terms``: the
    ``reward/…`` and ``accumulated/…`` means that G-RA and direct accumulation log).
    """
    rows = metrics(run)
    curve = [(r["step"], r["eval/success_rate"]) for r in rows if "eval/success_rate" in r]
    train = [r for r in rows if "loss" in r]
    terms = sorted({k for r in train for k in r if k.startswith(("reward/", "accumulated/"))})
    result = {"curve": curve, "held_out_before": curve[0][1] if curve else None,
              "held_out_after": curve[-1][1] if curve else None,
              "tokens": sum(r.get("prompt_tokens", 0) + r.get("completion_tokens", 0)
                            for r in train),
              "train_seconds": sum(r.get("rollout_s", 0) + r.get("update_s", 0)
                                   for r in train),
              "train_success": [r.get("success_rate") for r in train],
              "step_tokens": [r.get("prompt_tokens", 0) + r.get("completion_tokens", 0)
                              for r in train],
              **{rate: [r.get(rate) for r in train] for rate in SWE_RATES
                 if any(rate in r for r in train)}}
    if terms:  # the reward the estimator trained on, where it is not the env's
        result["invalid_step_rate"] = [r.get("invalid_step_rate") for r in train]
        result["reward_terms"] = {k: [r.get(k) for r in train] for k in terms}
    return result


def record_changes(record: dict[str, Any], result: dict[str, Any]) -> dict[str, tuple]:
    """Where a regenerated unit's result differs from its committed record.

    Compared as stored (JSON turns tuples into lists); wall time, machine and a note are not
    results.
    """
    stored = json.loads(json.dumps(result))
    return {k: (v, stored.get(k)) for k, v in record.items()
            if k not in ("wall_seconds", "machine", "note") and stored.get(k) != v}


def supervised(s: Setup, folder: Path, env: dict[str, Any], rollout: dict[str, Any],
               demos: Path, limit_s: float) -> tuple[bool, dict]:
    """``agentgym sft`` of the setup's model on its demonstrations (resumes a stopped run)."""
    config = {"run_dir": str(folder), "save_every": s.sft_save_every,
              "resumable_checkpoints": True,
              "env": {**env, "eval_seeds": s.eval_seeds,
                      "eval_first_seed": TUNING_FIRST_SEED},
              "rollout": rollout, "data": {"paths": [str(demos)]},
              "model": {"path": s.model, "device": s.device, "dtype": s.dtype,
                        "generation": s.generation},
              "optim": {"lr": s.sft_lr, "epochs": s.sft_epochs, "batch_size": s.sft_batch}}
    path = folder.parent / f"{folder.name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    resume = ["--resume"] if (folder / "checkpoints").is_dir() else []
    ok = _cli(["sft", str(path), *resume], limit_s)
    rows = metrics(folder)
    result = {"tuning_success_before": rows[0].get("eval/success_rate"),
              "tuning_success_after": rows[-1].get("eval/success_rate"),
              "steps": rows[-1]["step"], "samples": rows[0].get("data/samples"),
              "completion_loss": completion_loss(rows, s.sft_batch)}
    return ok, result


def env_flags(s: Setup) -> list[str]:
    """``--kw`` flags of ``agentgym rollout`` for the setup's env and turn limit."""
    return [f"--kw={k}={v}" for k, v in {**s.kwargs, "max_turns": s.max_turns}.items()]


def model_rollouts(s: Setup, model: Path, out: Path, limit_s: float, *args: str) -> bool:
    """``agentgym rollout`` of the SFT model with the setup's env, context and action size."""
    kw = env_flags(s)
    backend = "vllm" if s.generation == "vllm" else "hf"
    return _cli(["rollout", s.env_id, "--policy", f"{backend}:{model}", "--device", s.device,
                 "--dtype", s.dtype, *args, "--context", "window",
                 "--history-length", str(s.history_length), "--max-tokens", str(s.max_tokens),
                 "--out", str(out), *kw], limit_s)


def top_action(path: Path) -> tuple[str, float]:
    """The most frequent action of a rollout file (a tool call by its name) and its share."""
    from collections import Counter

    from agentgym.jsonl import read_trajectories
    from agentgym.parsing import parse_tool_calls

    def calls(step: Any) -> str:  # an env that reads its own calls records only the text
        found = step.action.tool_calls or parse_tool_calls(step.action.content).calls
        return " ".join(c.name for c in found) or step.action.content.strip()

    counts = Counter(calls(step) for t in read_trajectories(path) for step in t.steps)
    action, n = counts.most_common(1)[0] if counts else ("", 0)
    return action, n / max(sum(counts.values()), 1)


def demonstrations(s: Setup, demos: Path, limit_s: float) -> tuple[bool, dict]:
    """``agentgym rollout ENV --policy expert`` on the training seeds, into ``demos``."""
    kw = [f"--kw={k}={v}" for k, v in s.kwargs.items()]
    ok = _cli(["rollout", s.env_id, "--policy", "expert", "--episodes",
               str(s.expert_episodes), "--out", str(demos), *kw], limit_s)
    if ok and (failed := errored(demos)):
        # an expert episode that errored is an infrastructure fault (no Docker engine, say):
        # stop here, and drop the file so the next call makes it again
        print(f"{failed} of {s.expert_episodes} expert episodes ended in an error (see "
              "above); fix that and run the study again", flush=True)
        demos.unlink()
        ok = False
    return ok, {"episodes": s.expert_episodes, **({"top_action": top_action(demos)} if ok
                                                   else {})}


def errored(path: Path) -> int:
    """How many episodes of a rollout file ended with ``status="error"``."""
    from agentgym.jsonl import read_trajectories

    return sum(t.status == "error" for t in read_trajectories(path))


def tuning_success(path: Path) -> tuple[int, float]:
    """Scorable episodes in a rollout file and the share that succeeded."""
    from agentgym.evaluation.metrics import succeeded
    from agentgym.jsonl import read_trajectories

    trajs = [t for t in read_trajectories(path) if t.scorable]
    return len(trajs), sum(map(succeeded, trajs)) / max(len(trajs), 1)


def random_play(s: Setup, folder: Path, limit_s: float) -> tuple[bool, dict]:
    """Tuning-seed success of ``--policy random``: a uniformly random tool call each turn."""
    out = folder / "tuning.jsonl"
    kw = env_flags(s)
    if not _cli(["rollout", s.env_id, "--policy", "random", "--episodes",
                 str(s.random_episodes), "--seed", str(TUNING_FIRST_SEED), "--out", str(out),
                 *kw], limit_s):
        return False, {}
    episodes, success = tuning_success(out)
    return True, {"episodes": episodes, "tuning_success": success}


def revisits(s: Setup, model: Path, folder: Path, limit_s: float) -> tuple[bool, dict]:
    """Share of steps whose level-k HGPO group has another member (k = 1 … K + 1)."""
    out = folder / "groups.jsonl"
    if not model_rollouts(s, model, out, limit_s, "--episodes", str(8 * s.group_size),
                          "--group-size", str(s.group_size), "--seed", "20000"):
        return False, {}
    from agentgym.jsonl import read_trajectories
    from agentgym.trainers.advantages.diagnostics import state_keys, step_group_recurrence
    from agentgym.types import Group

    groups = Group.from_trajectories(list(read_trajectories(out)))
    r = step_group_recurrence(state_keys(groups), levels=s.history_length + 1)
    _, success = tuning_success(out)  # over every scorable episode of the groups
    return True, {"steps": r.steps, "groups": len(groups), "group_size": s.group_size,
                  "share_grouped": {str(k): share for k, share in enumerate(r.grouped, 1)},
                  "train_success_t1": success}


def finer_held_out(s: Setup, model: Path, folder: Path, limit_s: float
                   ) -> tuple[bool, dict]:
    """Held-out success over ``final_draws`` sampled episodes per held-out seed.

    Sampling seed 1 (the trainer's evaluation uses 0), with each seed's count of successes.
    """
    out = folder / "heldout.jsonl"
    if not model_rollouts(s, model, out, limit_s, "--episodes",
                          str(s.eval_seeds * s.final_draws), "--group-size",
                          str(s.final_draws), "--seed", str(HELD_OUT_FIRST_SEED),
                          "--temperature", str(s.eval_temperature or 0.0),
                          "--sampling-seed", "1"):
        return False, {}
    from agentgym.evaluation.metrics import succeeded
    from agentgym.jsonl import read_trajectories

    per_seed: dict[str, int] = {}
    trajs = [t for t in read_trajectories(out) if t.scorable]
    for t in trajs:
        per_seed[str(t.seed)] = per_seed.get(str(t.seed), 0) + int(succeeded(t))
    return True, {"episodes": len(trajs), "draws": s.final_draws,
                  "success": sum(per_seed.values()) / max(len(trajs), 1),
                  "per_seed": per_seed, "top_action": top_action(out)}


def final_held_out(s: Setup, folder: Path, limit_s: float) -> tuple[bool, dict]:
    """``finer_held_out`` of an RL run's last checkpoint (the run is ``folder``'s parent)."""
    model = folder / "model"  # exported for the evaluation, then removed (0.5 GB)
    if not model.is_dir() and not _cli(["export", str(folder.parent / "run"), "--out",
                                        str(model)], limit_s):
        return False, {}
    ok, result = finer_held_out(s, model, folder, limit_s)
    if ok:
        shutil.rmtree(model)
    return ok, result


def demonstration_fit(s: Setup, model_dir: Path, demos: Path, samples: int = 64) -> float:
    """Mean probability the model gives a demonstrated action on its demonstration's prompt.

    The action is its whole completion, over evenly spaced demonstration steps: how much of
    what it was taught the warm start took in (a model that learnt the format but not the
    move gives a four-move game's expert move about 25%).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentgym.context import ContextConfig
    from agentgym.jsonl import read_trajectories
    from agentgym.policies.sampling import completion_logprobs
    from agentgym.trainers.sft_data import demonstration_samples

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    # Any: transformers' wrapped ``to`` does not type-check as a bound method
    model: Any = AutoModelForCausalLM.from_pretrained(model_dir,
                                                      dtype=getattr(torch, s.dtype))
    model = model.to(s.device).eval()
    limit = (s.rollout_options or {}).get("max_prompt_tokens")  # as the SFT run's context
    context = ContextConfig(mode="window", history_length=s.history_length,
                            **({"max_prompt_tokens": limit} if limit else {}))
    every = demonstration_samples(list(read_trajectories(demos)), tokenizer, context)
    picked = every[::max(1, len(every) // samples)][:samples]
    probs = [math.exp(sum(completion_logprobs(model, x.input_ids[:x.prompt_len],
                                              x.input_ids[x.prompt_len:]))) for x in picked]
    return sum(probs) / max(len(probs), 1)


def warmth(s: Setup, model: Path, demos: Path, folder: Path, limit_s: float
           ) -> tuple[bool, dict]:
    """Tuning-seed success of the SFT model sampled at ``eval_temperature``."""
    out = folder / "tuning.jsonl"
    if not model_rollouts(s, model, out, limit_s, "--episodes", str(s.eval_seeds), "--seed",
                          str(TUNING_FIRST_SEED), "--temperature", str(s.eval_temperature)):
        return False, {}
    episodes, success = tuning_success(out)
    return True, {"episodes": episodes, "temperature": s.eval_temperature,
                  "tuning_success": success, "top_action": top_action(out),
                  "demonstration_fit": demonstration_fit(s, model, demos)}


def finished_runs(every: list[Unit]) -> list[Path]:
    """Training folders no unit resumes.

    Those are finished SFT runs (the later units read their exported model) and RL runs
    done with their finer evaluation (or that have none).
    """
    finals = {u.folder.parent: u.done for u in every if u.kind == "final"}
    return [u.folder / "run" if u.kind == "rl" else u.folder for u in every
            if u.done and (u.kind == "sft"
                           or (u.kind == "rl" and finals.get(u.folder, True)))]


def run_setup(setup: Setup, every: list[Unit], cache: Path, records: Path,
              end: float | None) -> bool:
    """Run the setup's unfinished units in order; False when the time limit stopped one.

    Args:
        setup: The env's setup.
        every: Its units (:func:`~agentgym.trainers.study.units.units`).
        cache: Where the units' files go.
        records: Where their results go.
        end: When to stop (``time.time()``), or None for no time limit.
    """
    from agentgym.trainers.checkpoint import slim  # torch: only when units run

    for run in finished_runs(every):
        if freed := slim(run):
            print(f"freed {freed / 2**30:.1f} GiB of {run}: only its last checkpoint's "
                  "weights are kept", flush=True)
    for unit in (u for u in every if not u.done):
        if unit.kind in ("baseline", "rl", "final") \
                and not warm_enough(setup, cache, records):
            print(f"unit: {setup.name} rl waits: the SFT model's tuning-seed success "
                  f"is outside {BAND[0]:.0%}-{BAND[1]:.0%}", flush=True)
            return True
        chain = [unit]  # a fresh clone has the records but not the files: make them first
        while (lost := needed_files(chain[0], every)) is not None:
            chain.insert(0, lost)
        for todo in chain:
            left = end - time.time() if end is not None else 1e9
            if left < 60:
                return False
            print(f"unit: {setup.name} {todo.kind} {todo.estimator} {todo.seed}".strip()
                  + (" (its files, for the next unit)" if todo.done else ""), flush=True)
            if not run_unit(todo, cache, left):
                return False
    return True
