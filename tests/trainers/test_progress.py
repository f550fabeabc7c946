"""SPA's progress estimator: packing, learning a synthetic decomposition, checkpoints, CLI."""

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from agentgym.jsonl import read_trajectories, write_trajectories
from agentgym.trainers.batching import TrainingDataError
from agentgym.trainers.config import ProgressConfig
from agentgym.trainers.progress import ProgressModel, fit_metrics, micro_batches, pack
from agentgym.trainers.progress_train import ProgressFitter
from agentgym.types import Group, Message, Step, StepResult, StepTokens, Trajectory

MARK = 500  # reward = how many times this token appears in the actions


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny matrices: one thread is ~20x faster than two on a busy shared CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def step(k, prompt, completion, valid=True):
    return Step(k, Message("assistant", f"action {k}"), StepResult((), None),
                StepTokens(tuple(prompt), tuple(completion)), valid=valid)


def synthetic(n, seed, prefix="t"):
    """Trajectories of 1-3 independent steps; R = count of MARK over all actions."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        steps, total = [], 0
        for k in range(int(rng.integers(1, 4))):
            action = [int(x) for x in rng.integers(100, 110, size=6)]
            marks = int(rng.integers(0, 3))
            for pos in rng.choice(6, size=marks, replace=False):
                action[pos] = MARK
            total += marks
            steps.append(step(k, (1, 2, 3 + k), action))  # prompts never extend: one row each
        out.append(Trajectory(f"{prefix}{i}", f"task{i % 8}", f"{prefix}g{i % 8}", (),
                              tuple(steps), outcome_reward=float(total)))
    return out


def test_pack_shares_a_row_when_prompts_extend_each_other():
    full = Trajectory("a", "t", "g", (), (step(0, [1, 2], [3, 4]), step(1, [1, 2, 3, 4, 9], [5]),
                                           step(2, [7], [8, 8])), outcome_reward=2.0)
    p = pack(full)
    assert p.rows == ((1, 2, 3, 4, 9, 5), (7, 8, 8))
    assert p.marks == ((0, 3, 0), (0, 5, 1), (1, 2, 2)) and p.target == 2.0
    bare = Trajectory("b", "t", "g", (), (Step(0, Message("assistant", "x"),
                                               StepResult(())),))
    with pytest.raises(TrainingDataError, match="recorded tokens"):
        pack(bare)
    assert micro_batches([p, p, p], max_tokens=24) == [[0, 1], [2]]


def test_packed_batch_matches_one_pass_per_step(tiny_model_dir):
    model = ProgressModel.load(tiny_model_dir)
    torch.nn.init.normal_(model.head.weight)  # a non-zero head, so ĉ depends on h
    a = Trajectory("a", "t", "g", (), (step(0, [1, 2], [3, 4]), step(1, [1, 2, 3, 4, 9], [5])))
    b = Trajectory("b", "t", "g", (), (step(0, [7, 7, 7, 7, 7, 7, 7], [8]),))
    together = model.contributions([pack(a), pack(b)])
    alone = [model.contributions([pack(Trajectory("x", "t", "g", (), (s,)))])[0][0]
             for s in a.steps + b.steps]
    np.testing.assert_allclose(np.concatenate(together), alone, rtol=1e-4, atol=1e-5)
    assert not model.training


def small_vocab_model():
    """A tiny random Llama over 512 token ids (the synthetic data uses ids < 512)."""
    from agentgym.policies.models import tiny_model

    return ProgressModel.from_causal_lm(tiny_model(vocab_size=512, hidden_size=32, layers=1,
                                                   heads=2), source="tiny")


def test_estimator_learns_a_synthetic_decomposition():
    torch.manual_seed(0)
    train, held = synthetic(128, seed=0), synthetic(48, seed=1, prefix="h")
    fitter = ProgressFitter(small_vocab_model(),
                            ProgressConfig(lr=3e-3, head_lr=3e-2, batch_size=16))
    held_packs = [pack(t) for t in held]
    before = fit_metrics(fitter.score(held), held_packs)
    losses = fitter.fit(train, epochs=12)
    scores = fitter.score(held)
    after = fit_metrics(scores, held_packs)
    assert losses[-1] < 0.2 * losses[0]
    assert after["mse"] < 0.1 * before["mse"] and after["corr"] > 0.9
    # Not only the sums: each step's ĉ tracks the markers in that step's own action.
    counts = [s.tokens.completion_ids.count(MARK) for t in held for s in t.steps]
    assert np.corrcoef(np.concatenate(scores), counts)[0, 1] > 0.85


def test_checkpoint_restores_estimator_optimizer_and_buffer(tiny_model_dir, tmp_path):
    trajs = synthetic(8, seed=2)
    cfg = ProgressConfig(lr=1e-3, head_lr=1e-2, batch_size=4)
    fitter = ProgressFitter(ProgressModel.load(tiny_model_dir), cfg)
    fitter.buffer.extend(Group.from_trajectories(trajs))
    fitter.fit(trajs, epochs=1)
    fitter.save(tmp_path, step=3)
    other = ProgressFitter(ProgressModel.load(tiny_model_dir), cfg)
    other.load(tmp_path, step=3)
    np.testing.assert_allclose(np.concatenate(other.score(trajs)),
                               np.concatenate(fitter.score(trajs)), rtol=1e-6)
    assert [t.id for g in other.buffer for t in g.trajectories] == [t.id for t in trajs]
    assert other.optimizer.state_dict()["state"].keys() == \
        fitter.optimizer.state_dict()["state"].keys()
    # Fitting on from there goes the same way in both.
    fitter.fit(trajs, 1, rng_key=(4,))
    other.fit(trajs, 1, rng_key=(4,))
    np.testing.assert_allclose(np.concatenate(other.score(trajs)),
                               np.concatenate(fitter.score(trajs)), rtol=1e-5)


def test_spa_training_run_resumes_with_its_estimator(tiny_model_dir, tmp_path):
    from agentgym.trainers.config import load_config
    from agentgym.trainers.loop import train
    from agentgym.trainers.metrics import read_metrics

    args = [f"run_dir={tmp_path / 'run'}", "save_every=1", f"model.path={tiny_model_dir}",
            "resumable_checkpoints=true",
            "env.id=agentgym/MentalMath-v0", "algorithm.estimator=spa",
            "rollout.tasks_per_step=2", "rollout.group_size=2", "rollout.max_tokens=4",
            "tensorboard=false", "progress.explore_tasks=1", "progress.head_lr=0.01"]
    train(load_config(None, ["steps=1", *args]))
    saved = tmp_path / "run" / "progress" / "step-000001"
    assert (saved / "progress.json").exists() and (saved / "buffer.jsonl").exists()
    head = torch.load(saved / "optimizer.pt", weights_only=False)
    assert head["state"], "the estimator's optimizer took steps"
    train(load_config(None, ["steps=2", *args]), resume=True)
    rows = read_metrics(tmp_path / "run")
    assert rows[0]["progress/explore_trajectories"] == 2.0
    assert "progress/explore_trajectories" not in rows[1]  # explored once, not on resume
    assert rows[1]["progress/buffer_trajectories"] == 2 + 4 + 4


def test_cli_train_then_score(tiny_model_dir, tmp_path):
    from agentgym.cli import app

    data = tmp_path / "trajs.jsonl"
    write_trajectories(data, synthetic(48, seed=3))
    out = tmp_path / "estimator"
    runner = CliRunner()
    result = runner.invoke(app, ["progress", "train", str(data), "--model", str(tiny_model_dir),
                                 "--out", str(out), "--epochs", "2", "--lr", "3e-3",
                                 "--head-lr", "3e-2", "--batch-size", "16"])
    assert result.exit_code == 0, result.output
    assert "held-out corr" in result.output and (out / "progress.json").exists()
    scored = tmp_path / "scored.jsonl"
    result = runner.invoke(app, ["progress", "score", "--estimator", str(out), str(data),
                                 "--out", str(scored), "--limit", "2"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "t0 · task task0" in result.output and "Σĉ so far" in result.output
    assert "t2 · task" not in result.output  # --limit
    first = next(read_trajectories(scored))
    assert all(isinstance(s.result.info["progress"], float) for s in first.steps)
    # The scored file feeds the spa estimator directly.
    result = runner.invoke(app, ["advantages", str(scored), "--estimator", "spa"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in result.output.splitlines()]
    assert len(lines) == 48 and len(lines[0]["advantages"]) == len(first.steps)


def test_cli_rejects_trajectories_without_tokens(tiny_model_dir, tmp_path):
    from agentgym.cli import app

    data = tmp_path / "bare.jsonl"
    write_trajectories(data, [Trajectory("a", "t", "g", (), (Step(0, Message("assistant", "x"),
                                                                  StepResult(())),),
                                         outcome_reward=1.0)])
    result = CliRunner().invoke(app, ["progress", "train", str(data), "--model",
                                      str(tiny_model_dir), "--heldout", "0"])
    assert isinstance(result.exception, TrainingDataError)
    assert "no recorded tokens" in str(result.exception)



def test_a_non_finite_loss_stops_the_progress_model_before_its_step():
    from agentgym.trainers.finite import NonFiniteError

    fitter = ProgressFitter(small_vocab_model(), ProgressConfig(lr=1e-3, head_lr=1e-2,
                                                                batch_size=4))
    with torch.no_grad():  # a diverged model: every prediction, so the loss, is NaN
        next(p for p in fitter.model.parameters() if p.requires_grad).fill_(float("nan"))
    with pytest.raises(NonFiniteError, match="fitting SPA's progress model: the loss is nan"):
        fitter.fit(synthetic(4, seed=3), epochs=1)
    assert not fitter.optimizer.state  # no optimizer step was taken
