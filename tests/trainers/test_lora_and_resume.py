"""Training checks that can fail: LoRA adapters move; a resumed run keeps counting versions."""

import json
import shutil

import torch
from safetensors.torch import load_file

from agentgym.trainers.config import TrainConfig, from_dict
from agentgym.trainers.loop import build, train


def config(tmp_path, tiny_dir, **over):
    data = {
        "run_dir": str(tmp_path / "run"), "steps": 2, "save_every": 1, "tensorboard": False,
        "resumable_checkpoints": True,
        "env": {"id": "agentgym/Sokoban-v0", "max_turns": 2},
        "model": {"path": str(tiny_dir)},
        "rollout": {"tasks_per_step": 2, "group_size": 2, "max_tokens": 6},
        "optim": {"lr": 1e-3},
        **over,
    }
    return from_dict(TrainConfig, data)


def test_lora_moves_every_adapter_and_nothing_else(tmp_path, tiny_model_dir):
    cfg = config(tmp_path, tiny_model_dir,
                 model={"path": str(tiny_model_dir), "lora": {"enabled": True, "r": 4}})
    model = build(cfg).model
    before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    assert before and all(p.requires_grad == ("lora_" in n) for n, p in model.named_parameters())
    shutil.rmtree(cfg.run_dir)
    run = train(cfg)
    saved = load_file(run / "checkpoints" / "step-000002" / "model.safetensors")
    assert saved and all("lora_" in name for name in saved)

    def initial(name):  # saved names may drop the adapter's name or the wrapper's prefix
        return next(p for n, p in before.items()
                    if n.replace(".default", "").endswith(name.replace(".default", ""))
                    or name.replace(".default", "").endswith(n.replace(".default", "")))

    unchanged = [n for n, p in saved.items() if torch.equal(p, initial(n))]
    assert unchanged == []  # every adapter matrix (A and B) was updated


def test_resume_keeps_counting_policy_versions(tmp_path, tiny_model_dir):
    train(config(tmp_path, tiny_model_dir, steps=2))
    run = train(config(tmp_path, tiny_model_dir, steps=4), resume=True)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["policy_version"]) for r in rows if "policy_version" in r] == [
        (1, 1), (2, 2), (3, 3), (4, 4)]  # not 1, 2 again after --resume
