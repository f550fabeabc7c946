"""Multi-rank update logic on CPU with gloo (world size 2, launched by torchrun), and the
same on a GPU with NCCL where one is available (marked gpu)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from agentgym.trainers.batching import Sample
from agentgym.trainers.config import load_config
from agentgym.trainers.distributed import shard_samples

WORKER = textwrap.dedent('''
    """One rank: shard the tiny model, recompute, update, gather; results from rank 0."""
    import sys

    import torch
    from transformers import AutoModelForCausalLM

    from agentgym.trainers import distributed
    from agentgym.trainers.config import load_config
    from agentgym.trainers.update import Learner, UpdateConfig

    model_dir, data, out = sys.argv[1:4]
    payload = torch.load(data, weights_only=False)
    rank, world = distributed.init(payload["backend"])
    device = torch.device(f"cuda:{rank}" if payload["backend"] == "nccl" else "cpu")
    cfg = load_config(None, payload["overrides"])
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device)
    model = distributed.shard_model(model, cfg.distributed.gradient_checkpointing)
    optimizer = torch.optim.SGD([p for p in model.parameters()], lr=1.0)
    learner = Learner(model, optimizer, None, device, pad_token_id=0)
    updater = distributed.FSDPUpdater(learner, UpdateConfig.of(cfg))
    if rank == 0:
        samples = payload["samples"]
        proximal = updater.recompute_all(samples)
        metrics = updater.update(samples, step=0)
        state = updater.full_state()
        updater.stop()
        torch.save({"proximal": proximal, "metrics": metrics, "state": state,
                    "world": world}, out)
    else:
        updater.serve()
    torch.distributed.destroy_process_group()
''')

# 32 tokens per micro-batch: in the second mini-batch rank 0 runs one micro-batch and rank 1
# two, so rank 0 also runs a zero-loss filler (every rank must join every collective).
OVERRIDES = ["optim.mini_batches=2", "optim.max_tokens_per_micro_batch=32", "optim.grad_clip=1.0",
             "rollout.temperature=1.0"]


def _samples(model, n=7, seed=0, shared=False, long_prompt=0):
    """Random sequences whose old log-probs are the model's own (ratio 1: gradients flow).

    ``shared``: the samples of a group start with the same prompt (what packing shares).
    ``long_prompt``: every sample starts with one prompt of this many tokens (packing runs it
    once before a batch of the rests).
    """
    from agentgym.trainers.update import proximal_logprobs

    rng = np.random.default_rng(seed)
    raw = []
    prompts = [tuple(int(x) for x in rng.integers(1, 1000, size=5)) for _ in range(3)]
    for i in range(n):
        length, prompt = int(rng.integers(8, 30)), int(rng.integers(2, 6))
        ids = tuple(int(x) for x in rng.integers(1, 1000, size=length))
        if shared:
            prompt, ids = 5, prompts[i % 3] + ids[5:]
        if long_prompt:
            head = tuple(int(x) for x in np.random.default_rng(99).integers(1, 1000, long_prompt))
            prompt, ids = long_prompt + prompt, head + ids
        raw.append(Sample(f"t{i}", f"g{i % 3}", 0, ids, prompt, float(rng.normal()),
                          (0.0,) * (len(ids) - prompt)))
    cfg = load_config(None, OVERRIDES)
    return proximal_logprobs(model, raw, budget=cfg.optim.max_tokens_per_micro_batch, pad_id=0,
                             device="cpu", temperature=cfg.rollout.temperature)


def _reference(model_dir, samples, extra=()):
    """One process, every sample: the update the ranks must reproduce."""
    from transformers import AutoModelForCausalLM

    from agentgym.trainers.update import Learner, UpdateConfig, ppo_update

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    learner = Learner(model, torch.optim.SGD(model.parameters(), lr=1.0), None,
                      torch.device("cpu"), pad_token_id=0)
    metrics = ppo_update(learner, samples,
                         UpdateConfig.of(load_config(None, OVERRIDES + list(extra))), step=0)
    return model, metrics


def _launch(tmp_path, model_dir, samples, world, backend, extra=()):
    script, data, out = tmp_path / "worker.py", tmp_path / "data.pt", tmp_path / "out.pt"
    script.write_text(WORKER)
    torch.save({"samples": samples, "backend": backend,
                "overrides": OVERRIDES + list(extra)}, data)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc-per-node={world}", str(script), str(model_dir), str(data),
                           str(out)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(out, weights_only=False)


def test_shard_samples_partitions_and_balances_tokens():
    samples = [Sample(f"t{i}", "g", 0, (1,) * n, 1, 0.0, (0.0,) * (n - 1))
               for i, n in enumerate([50, 10, 40, 20, 30, 5])]
    shares = [shard_samples(samples, r, 2) for r in range(2)]
    assert sorted(shares[0] + shares[1]) == list(range(6))
    loads = [sum(samples[i].length for i in s) for s in shares]
    assert abs(loads[0] - loads[1]) <= 5  # 80 / 75


@pytest.mark.parametrize("pack", ["false", "true", "long prompt"])
def test_two_gloo_ranks_reproduce_the_single_process_update(tmp_path, tiny_model_dir, pack):
    from transformers import AutoModelForCausalLM

    # shared-prefix packing is exact on ranks too; with a long shared prompt (and room for
    # several 220-token rows in a micro-batch) ranks keep to the tree, whose one forward pass
    # per micro-batch keeps FSDP's gathers in step (a prompt run before batches hung here)
    extra = [f"optim.pack_prefixes={pack != 'false'}",
             *(["optim.max_tokens_per_micro_batch=1024"] if pack == "long prompt" else [])]

    start = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    samples = _samples(start, shared=pack == "true", long_prompt=200 if pack == "long prompt"
                       else 0)
    from agentgym.trainers.batching import micro_batches

    order = np.random.default_rng([0, 0]).permutation(len(samples))  # the update's shuffle
    last = [samples[i] for i in np.array_split(order, 2)[1]]
    if pack == "false":
        assert [len(micro_batches([last[i] for i in shard_samples(last, r, 2)], 32, 0))
                for r in range(2)] == [1, 2]
    result = _launch(tmp_path, tiny_model_dir, samples, world=2, backend="gloo", extra=extra)
    assert result["world"] == 2
    for got, want in zip(result["proximal"], samples, strict=True):  # sharded forward
        np.testing.assert_allclose(got.completion_logprobs, want.completion_logprobs, atol=1e-5)
    reference, metrics = _reference(tiny_model_dir, samples, extra)
    want = reference.state_dict()
    moved = 0
    for name, tensor in result["state"].items():
        torch.testing.assert_close(tensor, want[name], atol=2e-5, rtol=1e-4)
        moved += not torch.equal(tensor, start.state_dict()[name])
    assert moved == len(result["state"])  # every parameter was updated
    assert result["metrics"]["loss"] == pytest.approx(metrics["loss"], abs=1e-5)
    assert result["metrics"]["grad_norm"] == pytest.approx(metrics["grad_norm"], rel=1e-4)


@pytest.mark.gpu
def test_fsdp_world_size_one_on_gpu_with_checkpointing(tmp_path, tiny_model_dir):
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU")
    from transformers import AutoModelForCausalLM

    start = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    samples = _samples(start)
    result = _launch(tmp_path, tiny_model_dir, samples, world=1, backend="nccl",
                     extra=["distributed.gradient_checkpointing=true"])
    reference, _ = _reference(tiny_model_dir, samples)
    want = reference.state_dict()
    for name, tensor in result["state"].items():  # GPU kernels: looser tolerance
        torch.testing.assert_close(tensor, want[name], atol=1e-4, rtol=1e-3)


@pytest.mark.gpu
async def test_weight_sync_into_vllm(tiny_model_dir):
    """Gathered weights loaded into an in-process vLLM engine change what it samples."""
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU")
    pytest.importorskip("vllm")
    from agentgym.policies.base import GenerationRequest, SamplingParams
    from agentgym.policies.vllm import VLLMPolicy
    from agentgym.types import Message

    policy = VLLMPolicy(str(tiny_model_dir), dtype="float32", gpu_memory_utilization=0.3,
                        max_model_len=512)
    request = GenerationRequest((Message("user", "hi"),),
                                params=SamplingParams(temperature=0, max_tokens=8))
    try:
        [before] = await policy.generate([request])
        from safetensors.torch import load_file

        state = {n: torch.zeros_like(p) for n, p in
                 load_file(Path(tiny_model_dir) / "model.safetensors").items()}
        assert await policy.update_weights(state, version=7) == 7
        [after] = await policy.generate([request])
        assert after.policy_version == 7
        # All-zero weights give uniform logits: log-prob log(1/V) for every token.
        from transformers import AutoConfig

        vocab = AutoConfig.from_pretrained(tiny_model_dir).vocab_size
        assert after.logprobs and all(abs(lp + np.log(vocab)) < 0.1 for lp in after.logprobs)
        assert before.logprobs != after.logprobs
    finally:
        await policy.aclose()


@pytest.mark.slow
def test_torchrun_trains_with_two_gloo_ranks(tmp_path, tiny_model_dir):
    """The documented launch: rank 0 runs the loop, rank 1 holds the other shard."""
    from safetensors.torch import load_file

    from agentgym.trainers.metrics import read_metrics

    root = Path(__file__).parent.parent.parent
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         "-m", "agentgym.trainers.torchrun", str(root / "examples" / "train_ray.yaml"),
         "engine=local", f"run_dir={run}", "steps=2", "save_every=2",
         f"model.path={tiny_model_dir}", "env.eval_seeds=0", "rollout.tasks_per_step=2",
         "rollout.group_size=4", "rollout.max_tokens=4", "tensorboard=false", "optim.lr=0.01",
         "algorithm.options.invalid_penalty=0.1"],
        capture_output=True, text=True, timeout=400, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_metrics(run)
    assert [r["policy_version"] for r in rows] == [1.0, 2.0]
    assert all(r["samples"] > 0 and np.isfinite(r["loss"]) for r in rows)
    after = load_file(run / "checkpoints" / "step-000002" / "model.safetensors")
    before = load_file(Path(tiny_model_dir) / "model.safetensors")
    assert all(not torch.equal(after[n], before[n]) for n in before)
