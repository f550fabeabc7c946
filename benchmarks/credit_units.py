"""The credit study's units: its setups, one cached piece of work each, and how each runs.

A unit runs as a subprocess of the CLI; its files go under the cache, its result (a small JSON
file) under the records. ``benchmarks/credit_study.py`` plans them and writes the page.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from agentgym.evaluation.metrics import read_metrics
from agentgym.files import atomic_write

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "benchmarks" / "credit_study"  # finished units' results, committed
SCALED_RECORDS = RECORDS / "scaled"  # those of ``--scale`` runs (a GPU machine)
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agentgym" \
    / "credit_study"
ESTIMATORS = ("grpo", "gigpo", "hgpo", "salt")
SEEDS = (0, 1, 2)
DEFAULT_ENVS = "sokoban,frozenlake,swe,swe_editor"
TUNING_FIRST_SEED = 500_000
BAND = (0.15, 0.60)  # tuning-seed success (greedy, or sampled where a setup says) RL starts from
HELD_OUT_FIRST_SEED = 1_000_000
SWE_RATES = ("completion_rate", "modification_rate", "resolve_rate")  # per training step


@dataclass(frozen=True)
class Setup:
    """One env of the study: its id, demonstrations, SFT amount and RL budget."""

    name: str
    env_id: str
    kwargs: dict[str, Any]
    max_turns: int
    max_tokens: int
    expert_episodes: int
    sft_epochs: int = 1
    sft_lr: float = 5e-5
    sft_batch: int = 16
    steps: int = 8
    tasks_per_step: int = 2
    group_size: int = 4
    history_length: int = 1
    eval_seeds: int = 24
    eval_every: int = 4
    lr: float = 1e-5
    estimators: tuple[str, ...] = ESTIMATORS
    seeds: tuple[int, ...] = SEEDS
    model: str = "smollm2"
    device: str = "cpu"  # of SFT, RL and every model rollout
    dtype: str = "float32"
    # what samples every rollout and held-out episode: "transformers", or "vllm" (the model
    # trains in this process and is synced into vLLM's engine; ``--set generation=vllm``)
    generation: str = "transformers"
    # steps between the SFT run's resumable checkpoints (model and optimizer, 1.6 GB at
    # 135M in float32): saving one every step added about 6 s to each 35 s CPU step
    sft_save_every: int = 5
    # the SWE comparison: G-RA against direct accumulation under one estimator
    accumulations: tuple[str, ...] = ("none",)
    band: tuple[float, float] | None = BAND  # None: RL does not wait on the SFT success
    eval_kwargs: dict[str, Any] | None = None  # merged over kwargs for every evaluation
    # held-out success sampled at this temperature instead of greedy: the policy RL trains;
    # the band is then judged by a ``warmth`` unit (the SFT model sampled on tuning seeds)
    eval_temperature: float | None = None
    # episodes of the model-free ``random`` policy on the tuning seeds (0: none): the success
    # of play that ignores the board, beside the SFT model's (envs whose random policy knows
    # the action format: one with tools)
    random_episodes: int = 0
    # sampling draws per held-out seed of a second, finer held-out evaluation of the SFT
    # model (``baseline``) and of each RL run's last checkpoint (``final``), all from one
    # sampling seed, so every model meets the same random numbers (0: none). The trainer's
    # own evaluation is one draw (sampling seed 0): at 24 seeds it resolves ±14 points
    final_draws: int = 0
    # moves of a grid game (the page sets a completion's loss beside a uniform guess among
    # them); 0 for an env whose actions are free text
    moves: int = 0
    rollout_options: dict[str, Any] | None = None  # more rollout fields (SFT and RL)
    optim_options: dict[str, Any] | None = None  # more RL optimizer fields
    label: str = ""  # what sets this setup apart from another of the same env, on the page
    about: str = ""  # why the setup is there, under its heading (markdown)

    @property
    def title(self) -> str:
        """How the page names the setup: its env, and its label where it has one."""
        return f"{self.env_id} ({self.label})" if self.label else self.env_id

    def _extra(self) -> dict[str, Any]:
        # only fields that are set, so the cache keys of setups without them never change
        extra = {k: getattr(self, k) for k in ("eval_kwargs", "rollout_options",
                                               "optim_options") if getattr(self, k)}
        if self.generation != "transformers":  # another sampler draws other episodes
            extra["generation"] = self.generation
        return extra

    def budget(self) -> dict[str, Any]:
        """What makes two RL runs comparable (part of every RL cache key)."""
        return {**{k: getattr(self, k) for k in ("steps", "tasks_per_step", "group_size",
                                                 "history_length", "max_turns", "max_tokens",
                                                 "eval_seeds", "eval_every", "lr")},
                **self._extra(), **self._sampled()}

    def _sampled(self) -> dict[str, Any]:
        # not part of the SFT key: how a model is evaluated does not change the model
        return {"eval_temperature": self.eval_temperature} if self.eval_temperature else {}

    def sft_key(self) -> str:
        fields = {k: getattr(self, k) for k in ("model", "env_id", "kwargs", "max_turns",
                                                "expert_episodes", "sft_epochs", "sft_lr",
                                                "sft_batch", "history_length", "max_tokens")}
        return "sft-" + _hash({**fields, **self._extra()})


def _hash(data: Any) -> str:
    return hashlib.sha1(json.dumps(data, sort_keys=True).encode()).hexdigest()[:8]


def _write_json(path: Path, data: Any) -> None:
    atomic_write(path, json.dumps(data, indent=2) + "\n")


def metrics(run: Path) -> list[dict[str, Any]]:
    """A run's logged steps (the package's reader: a last line cut short by a write in
    progress is left out), or none before it logged its first."""
    return read_metrics(run) if (run / "metrics.jsonl").is_file() else []


def completion_loss(rows: list[dict[str, Any]], batch: int, parts: int = 6
                    ) -> list[tuple[int, int, float]]:
    """An SFT run's loss per demonstrated completion (nats), averaged over ``parts`` equal
    stretches of its steps: ``(first step, last step, loss)``. A step's loss is the mean
    over its completion tokens, so times those tokens over the batch is the loss of one
    whole completion; against ln 4 = 1.39 it says whether a four-move game's move is
    learnt (the format tokens soon cost nothing). An epoch's last, smaller batch is
    counted as a full one."""
    steps = [r for r in rows if "loss" in r]
    size = math.ceil(len(steps) / parts) if steps else 1
    out = []
    for i in range(0, len(steps), size):
        chunk = steps[i:i + size]
        nats = sum(r["loss"] * r["trained_tokens"] / batch for r in chunk) / len(chunk)
        out.append((chunk[0]["step"], chunk[-1]["step"], round(nats, 3)))
    return out


def _cli(args: list[str], limit_s: float) -> bool:
    """Run ``agentgym ARGS``; False when it ran out of time (it resumes on the next call)."""
    try:
        subprocess.run([sys.executable, "-m", "agentgym.cli", *args], cwd=ROOT, check=True,
                       timeout=limit_s)
    except subprocess.TimeoutExpired:
        print(f"stopped at the time limit; the next call resumes: agentgym {' '.join(args)}")
        return False
    return True


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(x.split(":", 1)[1].strip() for x in Path("/proc/cpuinfo").read_text()
                   .splitlines() if x.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpu = ""
    try:  # the card, where the machine has one
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return (f"{cpu}, {os.cpu_count()} cores" + (f", {gpu}" if gpu else "")
            + f", load average {os.getloadavg()[0]:.2f}")


# ----------------------------------------------------------------------------------- units

def variant_name(estimator: str, accumulation: str) -> str:
    """How the page names an RL run: the estimator, and the accumulation when there is one."""
    return estimator if accumulation == "none" else f"{estimator} {accumulation}"


@dataclass(frozen=True)
class Unit:
    """One cached piece of work."""

    setup: Setup
    kind: str  # random | demos | sft | warmth | revisits | baseline | rl | final
    folder: Path
    record: Path  # its result (JSON); the unit is finished when this file exists
    estimator: str = ""
    seed: int = 0
    accumulation: str = "none"  # algorithm.reward_accumulation of an RL run

    @property
    def variant(self) -> str:
        return variant_name(self.estimator, self.accumulation)

    @property
    def done(self) -> bool:
        return self.record.is_file()

    def result(self) -> dict[str, Any]:
        return json.loads(self.record.read_text())


def units(setup: Setup, cache: Path, records: Path | None = None) -> Iterator[Unit]:
    """Every unit of ``setup`` in order; ``records`` defaults to the cache itself."""
    records = cache if records is None else records

    def unit(rel: str, kind: str, *rl: Any) -> Unit:
        return Unit(setup, kind, cache / setup.name / rel,
                    records / setup.name / f"{rel}.json", *rl)

    sft = setup.sft_key()
    if setup.random_episodes:
        yield unit(f"random-{setup.random_episodes}-"
                   f"{_hash([setup.env_id, setup.kwargs, setup.max_turns])}", "random")
    yield unit(f"demos-{setup.expert_episodes}", "demos")
    yield unit(sft, "sft")
    if setup.eval_temperature:
        yield unit(f"{sft}/warmth-{_hash([setup.eval_temperature, setup.eval_seeds])}", "warmth")
    if setup.accumulations == ("none",):  # HGPO's groups; G-RA's comparison has none
        yield unit(f"{sft}/revisits", "revisits")
    finer = f"heldout-{_hash([setup.eval_temperature, setup.eval_seeds, setup.final_draws])}"
    if setup.final_draws:
        yield unit(f"{sft}/{finer}", "baseline")
    for seed in setup.seeds:  # seeds outer: every estimator gets seed 0 before any gets seed 1
        for estimator in setup.estimators:
            for acc in setup.accumulations:
                name = estimator if acc == "none" else f"{estimator}-{acc}"
                run = f"rl/{name}-seed{seed}-{_hash([sft, setup.budget()])}"
                yield unit(run, "rl", estimator, seed, acc)
                if setup.final_draws:
                    yield unit(f"{run}/{finer}", "final", estimator, seed, acc)


def needed_files(unit: Unit, all_units: list[Unit]) -> Unit | None:
    """The finished unit whose files ``unit`` reads and the cache has lost, if any."""
    if unit.kind == "final":  # the run's last checkpoint
        run = next(u for u in all_units if u.kind == "rl" and u.folder == unit.folder.parent)
        if not (run.folder / "run" / "checkpoints").is_dir():
            return run
    by_kind = {u.kind: u for u in all_units if u.kind in ("demos", "sft")}
    if unit.kind in ("sft", "warmth") and not (by_kind["demos"].folder /
                                               "expert.jsonl").is_file():
        return by_kind["demos"]
    if unit.kind in ("warmth", "revisits", "baseline", "rl") \
            and not (by_kind["sft"].folder / "model").is_dir():
        return by_kind["sft"]
    return None


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
                  "env": {**env, "eval_seeds": s.eval_seeds, **s._sampled(),
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
    """An RL run's result, from its ``metrics.jsonl``: the held-out curve, cost, and per
    training step its success, tokens and, where logged, the SWE rates, the invalid-step
    rate and the accumulated rewards (``reward_terms``: the ``reward/…`` and
    ``accumulated/…`` means that G-RA and direct accumulation log)."""
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
    """Where a regenerated unit's result differs from its committed record: compared as
    stored (JSON turns tuples into lists); wall time, machine and a note are not results."""
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
    """Held-out success over ``final_draws`` sampled episodes per held-out seed, sampling
    seed 1 (the trainer's evaluation uses 0), with each seed's count of successes."""
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
    """Mean probability the model gives a demonstrated action (its whole completion) on the
    demonstration's own prompt, over evenly spaced demonstration steps: how much of what it
    was taught the warm start took in (a model that learnt the format but not the move gives
    a four-move game's expert move about 25%)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentgym.context import ContextConfig
    from agentgym.jsonl import read_trajectories
    from agentgym.policies.sampling import completion_logprobs
    from agentgym.trainers.sft_data import demonstration_samples

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, s.dtype)
                                                 ).to(s.device).eval()
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


def warm_enough(setup: Setup, cache: Path, records: Path | None = None) -> bool:
    """Whether the setup's finished SFT model is in the band RL starts from."""
    every = {u.kind: u for u in units(setup, cache, records)}
    sft = every["warmth"] if setup.eval_temperature else every["sft"]
    if not sft.done:
        return False
    if setup.band is None:
        return True
    success = sft.result()["tuning_success" if setup.eval_temperature
                           else "tuning_success_after"]
    return setup.band[0] <= success <= setup.band[1]
