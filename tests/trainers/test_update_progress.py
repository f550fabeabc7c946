"""The update names its progress: "update micro-batch i/n", as plain lines off a terminal."""

import io
import re

from rich.console import Console

from agentgym.phases import Phases
from agentgym.trainers.config import TrainConfig, from_dict
from agentgym.trainers.loop import train


def test_the_update_reports_each_micro_batch_as_plain_lines(tmp_path, tiny_model_dir):
    config = from_dict(TrainConfig, {
        "run_dir": str(tmp_path / "run"), "steps": 1, "save_every": 1, "tensorboard": False,
        "env": {"id": "agentgym/Sokoban-v0", "max_turns": 2},
        "model": {"path": str(tiny_model_dir)},
        "rollout": {"tasks_per_step": 2, "group_size": 2, "max_tokens": 6},
        # Sokoban prompts are ~700 tokens: one sample per micro-batch, several to count
        "optim": {"lr": 1e-3, "mini_batches": 2, "max_tokens_per_micro_batch": 1000},
    })
    out = io.StringIO()
    with Phases(Console(file=out, width=200), live=False, heartbeat=False) as phases:
        train(config, progress=phases)
    text = out.getvalue()
    start = re.search(r"\] update micro-batch 0/(\d+)\n", text)
    assert start is not None, text
    total = int(start.group(1))
    assert total >= 2
    assert f"] update micro-batch {total}/{total} done" in text, text
    assert text.index("update micro-batch 0/") < text.index(f"update micro-batch {total}/")



async def test_an_update_with_nothing_to_train_on_says_so(monkeypatch):
    """When every sample is skipped (all advantages zero), no micro-batch is planned; the
    phase says why instead of showing a stalled "0/0"."""
    from agentgym.trainers import update

    def nothing_planned(learner, samples, config, *, step, on_micro_batch):
        on_micro_batch(0, 0)
        return {}

    monkeypatch.setattr(update, "ppo_update", nothing_planned)
    out = io.StringIO()
    with Phases(Console(file=out, width=200), live=False, heartbeat=False) as phases:
        assert await update.ppo_update_in_thread(None, [], None, step=1, progress=phases) == {}
    text = out.getvalue()
    assert "update: every advantage is zero, nothing to train on" in text, text
    assert "0/0" not in text
