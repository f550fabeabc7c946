"""Checkpoints that resume a run exactly.

A checkpoint is a folder ``<run_dir>/checkpoints/step-<N>/`` holding:

- ``model.safetensors``: the trainable parameters (every weight, or only the LoRA adapters);
- ``optimizer.pt``: the optimizer state, only in a resumable checkpoint (AdamW keeps two
  float32 moments per trained parameter, twice the weights: left out unless asked for);
- ``state.json``: the step, the data position (next training seed) and the metrics so far;
- ``rng.pt``: Python, numpy and torch random states.

It is written to a temporary folder and renamed into place, so a run killed mid-save leaves
the previous checkpoint intact; ``latest()`` finds the newest complete one.

Reading one checks it first (:func:`read_state`, :func:`check_checkpoint`): a damaged
``state.json`` or a ``model.safetensors`` cut short is a :class:`ConfigError` naming the file,
never a traceback from deep in a loader. A run folder is recognised by the first line of its
``config.yaml`` (:data:`agentgym.trainers.config.CONFIG_HEADER`), and :func:`check_run_dir`
refuses a folder holding files a run did not write.
"""

from __future__ import annotations

import json
import random
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from agentgym.errors import ConfigError
from agentgym.evaluation.inputs import check_output_dir, check_safetensors
from agentgym.trainers.config import CONFIG_HEADER

MARKER = "state.json"  # written last: a folder without it is incomplete
WEIGHTS = "model.safetensors"
RUN_FILES = ("metrics.jsonl", "checkpoints", "model", "heldout", "eval", "tensorboard")
"""What a run writes into its folder besides config.yaml (sft's exported ``model`` too)."""


@dataclass(frozen=True)
class TrainState:
    """Where a run stands.

    Attributes:
        step: Training steps completed.
        next_seed: The next training task seed (the data position).
    """

    step: int
    next_seed: int


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The parameters that train (all of them, or only the LoRA adapters), contiguous."""
    return {n: p.detach().contiguous().cpu() for n, p in model.named_parameters()
            if p.requires_grad}


def save(run_dir: Path, state: TrainState, model: torch.nn.Module,
         optimizer: torch.optim.Optimizer | None, keep: int = 2) -> Path:
    """Write a checkpoint atomically; keep the newest ``keep`` ones.

    Args:
        run_dir: The run folder.
        state: Where the run stands.
        model: The model whose trainable parameters are saved.
        optimizer: Its optimizer, saved for an exact resume; None leaves it out.
        keep: How many complete checkpoints to keep.
    """
    root = Path(run_dir) / "checkpoints"
    final = root / f"step-{state.step:06d}"
    tmp = root / f".tmp-step-{state.step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(trainable_state(model), tmp / WEIGHTS)
    if optimizer is not None:
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save({"python": random.getstate(), "numpy": np.random.get_state(),
                "torch": torch.get_rng_state()}, tmp / "rng.pt")
    (tmp / MARKER).write_text(json.dumps({"step": state.step, "next_seed": state.next_seed}))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in complete(Path(run_dir))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


@dataclass(frozen=True)
class Checkpointer:
    """Writes a run's checkpoints on schedule.

    Attributes:
        run_dir: The run folder (checkpoints go to ``<run_dir>/checkpoints/``).
        every: Save every this many steps (and at the last step).
        keep: How many complete checkpoints to keep.
        resumable: Also save the optimizer state, so that ``--resume`` continues exactly.
    """

    run_dir: Path
    every: int
    keep: int = 2
    resumable: bool = False

    def due(self, step: int, *, last: int) -> bool:
        """Whether step ``step`` (1-based, of ``last``) is saved."""
        return step % self.every == 0 or step == last

    def save(self, state: TrainState, model: torch.nn.Module,
             optimizer: torch.optim.Optimizer) -> Path:
        """:func:`save` into this run's folder (with the optimizer state when resumable)."""
        return save(self.run_dir, state, model, optimizer if self.resumable else None,
                    keep=self.keep)


def complete(run_dir: Path) -> list[Path]:
    """The run's complete checkpoint folders (``step-N`` holding ``state.json``), oldest first."""
    return sorted(p for p in (Path(run_dir) / "checkpoints").glob("step-*")
                  if p.name.removeprefix("step-").isdigit() and (p / MARKER).is_file())


def latest(run_dir: Path) -> Path | None:
    """The newest complete checkpoint folder, or None."""
    done = complete(run_dir)
    return done[-1] if done else None


def slim(run_dir: Path) -> int:
    """Keep only a finished run's newest complete checkpoint, without its optimizer state.

    For runs nothing will resume: ``agentgym export``, evaluation and ``model.path`` read
    only the weights, while a resumable checkpoint of a 135M model in float32 is about
    1.6 GB, two per run. Everything else under ``checkpoints/`` goes (older checkpoints, a
    save cut short). Afterwards ``--resume`` refuses the run (:func:`check_resumable`);
    never slim a run that is still training.

    Returns:
        The bytes freed (0 when the run has no complete checkpoint: nothing is removed).
    """
    last = latest(run_dir)
    if last is None:
        return 0
    drop = [p for p in (Path(run_dir) / "checkpoints").iterdir() if p != last]
    drop += [last / "optimizer.pt"] if (last / "optimizer.pt").is_file() else []
    freed = 0
    for path in drop:
        files = [path] if path.is_file() else [f for f in path.rglob("*") if f.is_file()]
        freed += sum(f.stat().st_size for f in files)
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    return freed


def resume_point(run_dir: Path, resume: bool) -> Path | None:
    """The checkpoint a run continues from: the latest one under ``--resume``, else None.

    Checked before any model loads.

    Raises:
        ConfigError: ``run_dir`` holds checkpoints but ``resume`` is off (they would be
            overwritten), ``resume`` finds none, or the latest cannot resume exactly.
    """
    check_run_dir(run_dir)
    last = latest(run_dir)
    if last is not None and not resume:
        raise ConfigError(f"{run_dir} already holds checkpoints; pass --resume to continue the "
                          "run, or set run_dir to a new folder")
    if resume and last is None:
        raise ConfigError(f"--resume: no checkpoint in {run_dir}; start the run without --resume")
    if last is not None:
        check_checkpoint(last)
        check_resumable(last)
    return last


def check_run_dir(run_dir: Path) -> None:
    """Refuse a ``run_dir`` that a run cannot use without overwriting what it did not write.

    A run writes ``config.yaml`` (its first line :data:`CONFIG_HEADER`) first, then
    :data:`RUN_FILES`. A folder whose ``config.yaml`` lacks that line and has no metrics or
    checkpoints beside it (runs before the header had them), or that holds any of
    :data:`RUN_FILES` without a ``config.yaml``, is someone else's.

    Raises:
        ConfigError: ``run_dir`` is a file, lies under one, is not writable, or holds
            files that are not a run's.
    """
    check_output_dir(run_dir, "run_dir")
    config, metrics = Path(run_dir) / "config.yaml", Path(run_dir) / "metrics.jsonl"
    if config.exists():
        if not config.is_file():
            raise ConfigError(f"run_dir {str(run_dir)!r} holds a folder named config.yaml, "
                              "where a run writes its config; set run_dir to a new folder")
        with config.open("rb") as f:
            own = f.readline().rstrip(b"\r\n") == CONFIG_HEADER.encode()
        if not own and not (metrics.is_file() or (Path(run_dir) / "checkpoints").is_dir()):
            raise ConfigError(
                f"run_dir {str(run_dir)!r} holds a config.yaml that no agentgym run wrote; a "
                "run writes its resolved config there and would replace that file. Set "
                "run_dir to a new folder, or keep your config outside the run folder")
    else:
        theirs = [name for name in RUN_FILES if (Path(run_dir) / name).exists()]
        if theirs:
            raise ConfigError(f"run_dir {str(run_dir)!r} holds {', '.join(theirs)} but no "
                              "config.yaml: it is not an agentgym run, and a run would write "
                              "over what is there. Set run_dir to a new folder")


def read_state(path: Path) -> TrainState:
    """Where a checkpoint's run stood: its ``state.json``, checked.

    Raises:
        ConfigError: The file is missing, not JSON, or lacks an integer ``step`` >= 1 or
            ``next_seed`` >= 0, naming the file.
    """
    file = Path(path) / MARKER
    damaged = (f"{file} is damaged ({{}}); expected a JSON object with integer step and "
               "next_seed, as a checkpoint writes it: ")
    fix = _earlier(Path(path))
    try:
        meta = json.loads(file.read_bytes())
    except FileNotFoundError:
        raise ConfigError(f"{file} is missing: {path} is not a complete checkpoint; "
                          + fix) from None
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ConfigError(damaged.format("not JSON: cut short?") + fix) from None
    if not isinstance(meta, dict):
        raise ConfigError(damaged.format(f"a {type(meta).__name__}, not an object") + fix)
    step, seed = meta.get("step"), meta.get("next_seed")
    if type(step) is not int or step < 1:
        raise ConfigError(damaged.format(f"step is {step!r}") + fix)
    if type(seed) is not int or seed < 0:
        raise ConfigError(damaged.format(f"next_seed is {seed!r}") + fix)
    return TrainState(step=step, next_seed=seed)


def _earlier(path: Path) -> str:
    """The fix for a damaged checkpoint: the run's other complete checkpoints."""
    others = [p.name for p in complete(path.parent.parent) if p != path]
    if others:
        return (f"use another checkpoint of the run ({', '.join(others)}), or delete "
                f"{path.name} so that the run goes on from the one before")
    return "the run has no other checkpoint: train it again"


def check_checkpoint(path: Path) -> TrainState:
    """A checkpoint's state, after checking its state and weights files are whole.

    Raises:
        ConfigError: A damaged ``state.json`` or ``model.safetensors`` (named).
    """
    state = read_state(path)
    check_safetensors(Path(path) / WEIGHTS, fix=_earlier(Path(path)))
    for name in ("optimizer.pt", "rng.pt"):  # torch.save's zip: a cut-short copy has no index
        file = Path(path) / name
        if file.exists() and not zipfile.is_zipfile(file):
            raise ConfigError(f"{file} is damaged (not a whole torch.save archive: cut short?); "
                              f"{_earlier(Path(path))}")
    return state


def check_resumable(path: Path) -> None:
    """Raise unless the checkpoint folder holds the optimizer state an exact resume needs.

    Raises:
        ConfigError: The checkpoint was saved without ``resumable_checkpoints``.
    """
    if not (Path(path) / "optimizer.pt").exists():
        raise ConfigError(
            f"checkpoint {path} holds no optimizer state, so the run cannot resume exactly "
            "(it was saved with resumable_checkpoints=false, the default); set "
            "resumable_checkpoints=true in the config of runs you will resume")


def load_weights(path: Path, model: torch.nn.Module) -> None:
    """Copy a checkpoint's weights into the model's trainable parameters (all, or the adapters).

    Raises:
        ValueError: The checkpoint's parameter names are not the model's trainable ones
            (another model, or other LoRA settings).
    """
    check_safetensors(Path(path) / WEIGHTS, fix=_earlier(Path(path)))
    weights = load_file(Path(path) / WEIGHTS)
    params = dict(model.named_parameters())
    missing = sorted(set(weights) ^ {n for n, p in params.items() if p.requires_grad})
    if missing:
        raise ValueError(
            f"checkpoint {path} does not match the model: parameters {missing[:5]} differ; "
            "use the same model and LoRA settings as the run that saved it")
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value)


def load(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> TrainState:
    """Restore parameters, optimizer and random states; returns where the run stands.

    Raises:
        ConfigError: The checkpoint holds no optimizer state (:func:`check_resumable`).
    """
    path = Path(path)
    state = check_checkpoint(path)
    check_resumable(path)
    load_weights(path, model)
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
    rng: dict[str, Any] = torch.load(path / "rng.pt", weights_only=False)
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    return state
