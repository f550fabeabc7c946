"""checkpoint.slim: a finished run keeps only its newest weights, which still load."""

from __future__ import annotations

import pytest
import torch

from agentgym.errors import ConfigError
from agentgym.trainers.checkpoint import (
    TrainState,
    check_resumable,
    latest,
    load_weights,
    read_state,
    save,
    slim,
)


def _trained() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()  # AdamW now holds its two moments: optimizer.pt is not empty
    return model, optimizer


def _size(paths) -> int:
    return sum(f.stat().st_size for p in paths
               for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file())


def test_keeps_the_newest_weights_and_frees_the_rest(tmp_path):
    model, optimizer = _trained()
    for step in (7, 8):
        save(tmp_path, TrainState(step=step, next_seed=100 + step), model, optimizer)
    root = tmp_path / "checkpoints"
    (root / ".tmp-step-000009").mkdir()  # a save cut short
    (root / ".tmp-step-000009" / "model.safetensors").write_bytes(b"x" * 10)
    expected = _size([root / "step-000007", root / ".tmp-step-000009",
                      root / "step-000008" / "optimizer.pt"])

    assert slim(tmp_path) == expected
    assert [p.name for p in root.iterdir()] == ["step-000008"]
    last = latest(tmp_path)
    assert last is not None and sorted(p.name for p in last.iterdir()) == [
        "model.safetensors", "rng.pt", "state.json"]
    assert read_state(last) == TrainState(step=8, next_seed=108)
    fresh = torch.nn.Linear(3, 2)
    load_weights(last, fresh)
    assert torch.equal(fresh.weight, model.weight) and torch.equal(fresh.bias, model.bias)
    with pytest.raises(ConfigError, match="cannot resume exactly"):
        check_resumable(last)
    assert slim(tmp_path) == 0  # nothing left to free


def test_a_run_without_a_complete_checkpoint_is_left_alone(tmp_path):
    assert slim(tmp_path) == 0  # no checkpoints folder at all
    partial = tmp_path / "checkpoints" / ".tmp-step-000001"
    partial.mkdir(parents=True)
    (partial / "model.safetensors").write_bytes(b"x")
    assert slim(tmp_path) == 0 and partial.is_dir()
