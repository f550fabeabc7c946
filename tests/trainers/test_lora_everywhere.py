"""LoRA beyond the embedded loop: async training, Ray generation workers and FSDP ranks train
the adapters and sync only them to generation; the one combination that cannot is refused."""

import asyncio
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from agentgym.errors import ConfigError
from agentgym.policies.base import GenerationRequest, SamplingParams
from agentgym.trainers.checkpoint import trainable_state
from agentgym.trainers.config import load_config
from agentgym.trainers.loop import build, train_step

LORA = ["model.lora.enabled=true", "model.lora.r=4"]


def overrides(tmp_path, tiny_model_dir, *extra):
    return [f"run_dir={tmp_path / 'run'}", "steps=2", "save_every=2",
            f"model.path={tiny_model_dir}", "rollout.tasks_per_step=2",
            "rollout.group_size=4", "rollout.max_tokens=4", "tensorboard=false",
            "optim.lr=0.01", "env.id=agentgym/Sokoban-v0", "env.max_turns=2",
            "algorithm.options.invalid_penalty=0.1", *LORA, *extra]


def frozen_and_adapters(model):
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    return frozen, {n: p.clone() for n, p in trainable_state(model).items()}  # not views


def spy_on(obj, method, sent):
    """Record the parameter names each weight sync through ``obj.method`` sends."""
    original = getattr(obj, method)

    async def spy(state, *args, **kwargs):
        sent.append(sorted(dict(state)))
        return await original(state, *args, **kwargs)

    setattr(obj, method, spy)


async def train_two_steps(run):
    try:
        for _ in range(2):
            await train_step(run)
    finally:
        await run.collector.aclose()


def test_async_training_syncs_trained_adapters_into_the_generation_copy(tmp_path, tiny_model_dir):
    run = build(load_config(None, overrides(tmp_path, tiny_model_dir,
                                            "async_training.enabled=true")))
    trained, generating = run.learner.model, run.policy.model
    assert trained is not generating  # overlap: generation reads its own copy
    base, start = frozen_and_adapters(trained)
    assert start and all("lora_" in n for n in start)
    sent = []
    spy_on(run.policy, "update_weights", sent)
    asyncio.run(train_two_steps(run))
    assert sent == [sorted(start)] * 2  # each sync carried the adapters and nothing else
    after = trainable_state(trained)
    moved = [n for n in after if "lora_B" in n and not torch.equal(after[n], start[n])]
    assert moved  # B starts at zero: a moved B is a trained adapter
    synced = trainable_state(generating)
    assert synced.keys() == after.keys()
    assert all(torch.equal(synced[n], after[n]) for n in after)  # the last sync holds them
    assert all(torch.equal(p, base[n]) for n, p in generating.named_parameters()
               if not p.requires_grad)  # the base weights never changed on either side
    assert run.policy.policy_version == 2


@pytest.mark.slow
def test_ray_generation_workers_generate_with_the_trained_adapters(tmp_path, tiny_model_dir):
    pytest.importorskip("ray")
    run = build(load_config(None, overrides(
        tmp_path, tiny_model_dir, "engine=ray", "ray.num_cpus=2", "ray.env_workers=1",
        "ray.env_worker_cpus=0.5", "ray.generation_workers=1", "ray.generation_cpus=0.5")))
    engine = run.collector.engine
    assert engine is not None
    base, start = frozen_and_adapters(run.learner.model)
    sent = []
    spy_on(engine, "sync_weights", sent)

    async def main():
        for _ in range(2):
            await train_step(run)
        # The same greedy request on the trainer's model and on the Ray worker.
        prompt = tuple(run.policy.tokenizer.encode("Push the box onto the target:"))
        request = GenerationRequest(prompt_ids=prompt,
                                    params=SamplingParams(temperature=0.0, max_tokens=8))
        local = (await run.policy.generate([request]))[0]
        worker = engine.generation_workers[0]
        remote = (await worker.generate.remote([request]))[0]
        await run.collector.aclose()
        return local, remote

    try:
        local, remote = asyncio.run(main())
    finally:
        import ray

        ray.shutdown()
    after = trainable_state(run.learner.model)
    assert any(not torch.equal(after[n], start[n]) for n in after if "lora_B" in n)
    assert remote.completion_ids == local.completion_ids and remote.policy_version == 2
    assert sent == [sorted(start)] * 3  # the first sync before any rollout, then one a step
    assert remote.logprobs == pytest.approx(local.logprobs, abs=1e-5)
    assert all(torch.equal(p, base[n]) for n, p in run.learner.model.named_parameters()
               if not p.requires_grad)


@pytest.mark.slow
def test_two_gloo_fsdp_ranks_train_lora_and_sync_only_adapters(tmp_path, tiny_model_dir):
    """torchrun, two ranks: the checkpoint (saved from rank 0's generation copy) holds the
    trained adapters, so the gathered adapters reached generation."""
    from agentgym.trainers.metrics import read_metrics

    run, config = tmp_path / "run", tmp_path / "config.yaml"
    config.write_text("{}\n")  # the defaults; the overrides say the rest
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         "-m", "agentgym.trainers.torchrun", str(config),
         *overrides(tmp_path, tiny_model_dir)],
        capture_output=True, text=True, timeout=400, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_metrics(run)
    assert [r["policy_version"] for r in rows] == [1.0, 2.0]
    saved = load_file(run / "checkpoints" / "step-000002" / "model.safetensors")
    assert saved and all("lora_" in n for n in saved)
    assert any(n.endswith("lora_B.default.weight") and saved[n].abs().sum() > 0 for n in saved)


def test_lora_with_vllm_generation_workers_is_refused(tmp_path, tiny_model_dir):
    cfg = load_config(None, overrides(tmp_path, tiny_model_dir, "engine=ray",
                                      "ray.generation_backend=vllm"))
    with pytest.raises(ConfigError, match="built without an adapter config"):
        build(cfg)


def test_merged_state_equals_peft_merge_and_leaves_the_model_alone(tiny_model_dir):
    """LoRA runs sync merged weights to vLLM on a CPU: W + (α/r)·BA, named as the base model."""
    import copy

    from transformers import AutoModelForCausalLM

    from agentgym.trainers.config import LoraConfig
    from agentgym.trainers.lora import merged_state, with_lora

    model = with_lora(AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32),
                      LoraConfig(enabled=True, r=4, alpha=8))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    merged = merged_state(model)
    want = copy.deepcopy(model).merge_and_unload().state_dict()
    assert set(merged) <= set(want) and set(want) - set(merged) <= {"lm_head.weight"}  # tied
    for name, tensor in merged.items():
        torch.testing.assert_close(tensor, want[name], atol=1e-6, rtol=1e-6)
    assert not any(t.requires_grad for t in merged.values())  # no graph held beside them
    assert any(not torch.equal(merged[n], before[f"base_model.model.{n}".replace(
        "proj.weight", "proj.base_layer.weight")]) for n in merged if "q_proj" in n)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
