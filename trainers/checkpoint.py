"""Checkpoints that resume a run exactly.

A checkpoint is a folder ``<run_dir>/checkpoints/step-<N>/`` holding:

- ``model.safetensors``: the trainable parameters (every weight, or only the LoRA adapters);
- ``optimizer.pt``: the optimizer state, only in a resumable checkpoint (AdamW keeps two
  float32 moments per trained parameter, twice the weights: left out unless asked for);
- ``state.json``: the step, the data position (next training seed) and the metrics so far;
- ``rng.pt``: Python, numpy and torch random states.

It is written to a temporary folder and renamed into place, so a run killed mid-save leaves
the previous checkpoint intact; ``latest()`` finds the newest complete one.
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from agentgym.errors import ConfigError

MARKER = "state.json"  # written last: a folder without it is incomplete


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
    save_file(trainable_state(model), tmp / "model.safetensors")
    if optimizer is not None:
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save({"python": random.getstate(), "numpy": np.random.get_state(),
                "torch": torch.get_rng_state()}, tmp / "rng.pt")
    (tmp / MARKER).write_text(json.dumps({"step": state.step, "next_seed": state.next_seed}))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in sorted(p for p in root.glob("step-*") if (p / MARKER).exists())[:-keep]:
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


def latest(run_dir: Path) -> Path | None:
    """The newest complete checkpoint folder, or None."""
    done = sorted(p for p in (Path(run_dir) / "checkpoints").glob("step-*")
                  if (p / MARKER).exists())
    return done[-1] if done else None


def resume_point(run_dir: Path, resume: bool) -> Path | None:
    """The checkpoint a run continues from: the latest one under ``--resume``, else None.

    Checked before any model loads.

    Raises:
        ConfigError: ``run_dir`` holds checkpoints but ``resume`` is off (they would be
            overwritten), ``resume`` finds none, or the latest cannot resume exactly.
    """
    last = latest(run_dir)
    if last is not None and not resume:
        raise ConfigError(f"{run_dir} already holds checkpoints; pass --resume to continue the "
                          "run, or set run_dir to a new folder")
    if resume and last is None:
        raise ConfigError(f"--resume: no checkpoint in {run_dir}; start the run without --resume")
    if last is not None:
        check_resumable(last)
    return last


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
    weights = load_file(Path(path) / "model.safetensors")
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
    check_resumable(path)
    load_weights(path, model)
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
    rng: dict[str, Any] = torch.load(path / "rng.pt", weights_only=False)
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    meta = json.loads((path / MARKER).read_text())
    return TrainState(step=int(meta["step"]), next_seed=int(meta["next_seed"]))
