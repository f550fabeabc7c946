"""A run whose loss, gradient norm or updated weights stop being finite stops at that step,
naming the step and the quantity, before the step is checkpointed."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

from agentgym import cli
from agentgym.trainers.batching import Sample
from agentgym.trainers.config import TrainConfig, load_config
from agentgym.trainers.finite import NonFiniteError, check_update, check_weights
from agentgym.trainers.loop import train
from agentgym.trainers.models import load_trained_model
from agentgym.trainers.update import Learner, UpdateConfig, ppo_update


@pytest.mark.parametrize(("loss", "norm", "quantity"), [
    (math.nan, 1.0, "the loss is nan"), (1.0, math.inf, "the gradient norm is inf"),
    (-math.inf, math.nan, "the loss is -inf")])
def test_a_non_finite_loss_or_gradient_names_the_step_and_the_quantity(loss, norm, quantity):
    with pytest.raises(NonFiniteError, match=f"training step 7: {quantity} .optimizer step 2 "
                                             "of 3.*before step 7 is checkpointed"):
        check_update(7, loss, norm, optimizer_step=2, optimizer_steps=3)
    check_update(7, 1.0, 2.0)  # finite: nothing to say


def test_non_finite_weights_are_named():
    good, bad = torch.ones(3), torch.tensor([1.0, math.nan])
    check_weights(1, [("a", good)])
    with pytest.raises(NonFiniteError, match=r"training step 4: 1 updated weight tensor\(s\) "
                                             r"hold NaN or inf \(b\)"):
        check_weights(4, [("a", good), ("b", bad)])


def test_the_update_stops_on_a_nan_loss_before_the_optimizer_step(tiny_model_dir):
    """A model whose forward pass gives NaN: ppo_update raises, the weights stay as they were."""
    model, tokenizer = load_trained_model(str(tiny_model_dir))
    with torch.no_grad():
        model.get_input_embeddings().weight[5].fill_(math.nan)  # a token the sample reads
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    learner = Learner(model, optimizer, None, torch.device("cpu"), tokenizer.pad_token_id)
    sample = Sample("t", "g", 0, (1, 5, 7, 9, 11, 13), 3, 1.0, (-1.0, -1.0, -1.0))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    config = UpdateConfig.of(TrainConfig())
    with pytest.raises(NonFiniteError, match="training step 3: the loss is nan"):
        ppo_update(learner, [sample], config, step=2)
    after = dict(model.named_parameters())
    assert all(torch.equal(p, after[n]) or n.endswith("embed_tokens.weight")
               for n, p in before.items())
    assert not optimizer.state  # no optimizer step was taken


def test_train_stops_at_the_step_whose_weights_went_non_finite(tmp_path, tiny_model_dir,
                                                                monkeypatch, capsys):
    """Resumed with an optimizer whose learning rate became inf: step 2 writes inf weights.

    The run stops with one error line naming step 2 and the weights; checkpoint 1 stays the
    newest and metrics.jsonl holds no step 2.
    """
    run = tmp_path / "run"
    overrides = [f"run_dir={run}", "save_every=1", f"model.path={tiny_model_dir}",
                 "rollout.tasks_per_step=1", "rollout.group_size=2", "rollout.max_tokens=2",
                 "tensorboard=false", "env.id=agentgym/MentalMath-v0",
                 "resumable_checkpoints=true", "algorithm.options.invalid_penalty=0.1"]
    train(load_config(None, [*overrides, "steps=1"]))
    state_file = run / "checkpoints" / "step-000001" / "optimizer.pt"
    state = torch.load(state_file, weights_only=False)
    for group in state["param_groups"]:
        group["lr"] = math.inf  # what a diverging schedule or a corrupted state leads to
    torch.save(state, state_file)
    config = tmp_path / "train.yaml"
    config.write_text("tensorboard: false\n")
    monkeypatch.setattr(sys, "argv", ["agentgym", "train", str(config), *overrides, "steps=3",
                                      "--resume"])
    monkeypatch.setenv("COLUMNS", "400")
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    output = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in output
    (line,) = [x for x in output.splitlines() if x.startswith("error:")]
    assert "training step 2:" in line and "updated weight tensor(s) hold NaN or inf" in line
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-000001"]
    rows = [json.loads(x) for x in Path(run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1]
