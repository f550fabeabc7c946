"""CUDA training and generation on one GPU (marked gpu: `benchmarks/gpu_check.sh` runs them
where a GPU is lent; CI has none). Each CUDA result is checked against the same computation
on the CPU, so a wrong device path fails rather than merely running."""

import shutil

import numpy as np
import pytest
import torch

from agentgym.trainers.batching import Sample
from agentgym.trainers.config import TrainConfig, from_dict, load_config
from agentgym.trainers.update import Learner, UpdateConfig, ppo_update, proximal_logprobs

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

OVERRIDES = ["optim.mini_batches=2", "optim.max_tokens_per_micro_batch=64", "optim.grad_clip=1.0",
             "rollout.temperature=1.0"]


def _samples(model, device, n=6):
    """Random sequences whose old log-probs are the model's own (ratio 1: gradients flow)."""
    rng = np.random.default_rng(0)
    raw = []
    for i in range(n):
        ids = tuple(int(x) for x in rng.integers(1, 1000, size=int(rng.integers(8, 24))))
        prompt = int(rng.integers(2, 6))
        raw.append(Sample(f"t{i}", f"g{i % 2}", 0, ids, prompt, float(rng.normal()),
                          (0.0,) * (len(ids) - prompt)))
    return proximal_logprobs(model, raw, budget=64, pad_id=0, device=device, temperature=1.0)


def _update(model_dir, device):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device)
    start = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}
    samples = _samples(model, device)
    learner = Learner(model, torch.optim.SGD(model.parameters(), lr=1.0), None,
                      torch.device(device), pad_token_id=0)
    metrics = ppo_update(learner, samples, UpdateConfig.of(load_config(None, OVERRIDES)), step=0)
    return start, {n: p.detach().cpu() for n, p in model.named_parameters()}, metrics


def test_one_update_on_cuda_equals_the_cpu_update(tiny_model_dir):
    start, on_gpu, gpu_metrics = _update(tiny_model_dir, "cuda")
    _, on_cpu, cpu_metrics = _update(tiny_model_dir, "cpu")
    moved = [n for n in on_gpu if not torch.equal(on_gpu[n], start[n])]
    assert moved == list(on_gpu)  # every parameter was updated on the GPU
    for name, tensor in on_gpu.items():  # GPU kernels sum in another order: loose tolerance
        torch.testing.assert_close(tensor, on_cpu[name], atol=1e-4, rtol=1e-3)
    assert gpu_metrics["loss"] == pytest.approx(cpu_metrics["loss"], abs=1e-4)


def _config(tmp_path, model_dir, lora):
    model = {"path": str(model_dir), "device": "cuda",
             **({"lora": {"enabled": True, "r": 4}} if lora else {})}
    return from_dict(TrainConfig, {
        "run_dir": str(tmp_path / "run"), "steps": 2, "save_every": 2, "tensorboard": False,
        "env": {"id": "agentgym/Sokoban-v0", "max_turns": 2}, "model": model,
        "rollout": {"tasks_per_step": 2, "group_size": 2, "max_tokens": 6},
        "optim": {"lr": 1e-3}})


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_the_training_loop_runs_on_cuda(tmp_path, tiny_model_dir, lora):
    from safetensors.torch import load_file

    from agentgym.trainers.loop import build, train

    cfg = _config(tmp_path, tiny_model_dir, lora)
    run = build(cfg)
    assert next(run.model.parameters()).device.type == "cuda"
    before = {n: p.detach().cpu().clone() for n, p in run.model.named_parameters()
              if p.requires_grad}
    shutil.rmtree(cfg.run_dir)
    saved = load_file(train(cfg) / "checkpoints" / "step-000002" / "model.safetensors")
    assert saved and all(("lora_" in n) == lora for n in saved)
    assert all(torch.isfinite(t).all() for t in saved.values())
    same = [n for n, t in saved.items()
            if any(torch.equal(t, b) for k, b in before.items() if k.endswith(n)
                   or n.endswith(k.replace("base_model.model.", "")))]
    assert same == []  # every trained tensor moved


async def test_cuda_generation_records_the_models_own_logprobs(tiny_model_dir):
    from agentgym.policies.base import GenerationRequest, SamplingParams
    from agentgym.policies.hf import TransformersPolicy
    from agentgym.types import Message

    policy = TransformersPolicy.load(str(tiny_model_dir), device="cuda")
    try:
        requests = [GenerationRequest((Message("user", f"count to {i}"),),
                                      params=SamplingParams(temperature=1.0, max_tokens=12,
                                                            seed=i)) for i in range(4)]
        completions = await policy.generate(requests)
        for c in completions:
            assert len(c.logprobs) == len(c.completion_ids) > 0
            ids = torch.tensor([c.prompt_ids + c.completion_ids], device="cuda")
            with torch.no_grad():
                logits = policy.model(ids).logits[0, len(c.prompt_ids) - 1: -1].float()
            want = torch.log_softmax(logits, -1).gather(-1, ids[0, len(c.prompt_ids):, None])
            torch.testing.assert_close(want[:, 0].cpu(), torch.tensor(c.logprobs), atol=1e-3,
                                       rtol=0)
    finally:
        await policy.aclose()
