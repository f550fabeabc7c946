"""The credit study's units: its setups, one cached piece of work each, and their keys.

A unit's files (rollouts, checkpoints, models) go under the cache; its result, a small JSON
file, under the records, and the unit is finished when that file exists. A unit's folder
and record are named by a key hashed from what makes its work what it is, so a finished
unit is found again, and a changed setup gets new keys. :mod:`.run` does a unit's work;
``benchmarks/credit_study.py`` is the command line.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym.evaluation.metrics import read_metrics

# The study runs from a clone (an editable install maps agentgym to its agentgym/
# folder): its records are committed in the repository, beside the script.
ROOT = Path(__file__).resolve().parents[3]
RECORDS = ROOT / "benchmarks" / "credit_study"  # finished units' results, committed
SCALED_RECORDS = RECORDS / "scaled"  # those of ``--scale`` runs (a GPU machine)
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agentgym" \
    / "credit_study"
ESTIMATORS = ("grpo", "gigpo", "hgpo", "salt")
SEEDS = (0, 1, 2)
DEFAULT_ENVS = "sokoban,sokoban_4x,frozenlake,swe,swe_editor"
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
    # a second RL budget of the env (the same records folder and demonstrations) with a warm
    # start of its own, the same recipe trained again (its key holds the arm): its name in the
    # plot's file; an arm is not an env of its own in the page's answer across envs
    arm: str = ""
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
                **self._extra(), **self.sampled()}

    def sampled(self) -> dict[str, Any]:
        """The held-out sampling temperature where one is set, as a config's env fields.

        Not part of the SFT key: how a model is evaluated does not change the model.
        """
        return {"eval_temperature": self.eval_temperature} if self.eval_temperature else {}

    def sft_key(self) -> str:
        """The warm start's cache key: what makes two SFT models the same."""
        fields = {k: getattr(self, k) for k in ("model", "env_id", "kwargs", "max_turns",
                                                "expert_episodes", "sft_epochs", "sft_lr",
                                                "sft_batch", "history_length", "max_tokens")}
        return "sft-" + _hash({**fields, **self._extra(),
                               **({"arm": self.arm} if self.arm else {})})


def _hash(data: Any) -> str:
    return hashlib.sha1(json.dumps(data, sort_keys=True).encode()).hexdigest()[:8]


def metrics(run: Path) -> list[dict[str, Any]]:
    """A run's logged steps, or none before it logged its first.

    Read by the package's reader: a last line cut short by a write in progress is left out.
    """
    return read_metrics(run) if (run / "metrics.jsonl").is_file() else []


def completion_loss(rows: list[dict[str, Any]], batch: int, parts: int = 6
                    ) -> list[tuple[int, int, float]]:
    """An SFT run's loss per demonstrated completion (nats), over ``parts`` equal stretches.

    Averaged over each stretch of its steps: ``(first step, last step, loss)``. A step's loss
    is the mean over its completion tokens, so times those tokens over the batch is the loss
    of one whole completion; against ln 4 = 1.39 it says whether a four-move game's move is
    learnt (the format tokens soon cost nothing). An epoch's last, smaller batch is counted as
    a full one.
    """
    steps = [r for r in rows if "loss" in r]
    size = math.ceil(len(steps) / parts) if steps else 1
    out = []
    for i in range(0, len(steps), size):
        chunk = steps[i:i + size]
        nats = sum(r["loss"] * r["trained_tokens"] / batch for r in chunk) / len(chunk)
        out.append((chunk[0]["step"], chunk[-1]["step"], round(nats, 3)))
    return out


def machine() -> str:
    """This machine in words: its CPU, cores, GPU where it has one, and load average."""
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
        """How the page names the unit's RL run (see :func:`variant_name`)."""
        return variant_name(self.estimator, self.accumulation)

    @property
    def done(self) -> bool:
        """Whether the unit has finished: its record exists."""
        return self.record.is_file()

    def result(self) -> dict[str, Any]:
        """The unit's record."""
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
