"""vLLM backend, on a GPU (CI has none; these run wherever one is)."""

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def vllm_policy(tmp_path_factory):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    pytest.importorskip("vllm")
    from agentgym.policies.models import embedded_model_dir
    from agentgym.policies.vllm import VLLMPolicy

    path = embedded_model_dir(tmp_path_factory.mktemp("cache"))
    return VLLMPolicy(str(path), gpu_memory_utilization=0.3, max_model_len=2048, dtype="float32")


async def test_logprobs_match_rescoring(vllm_policy):
    import torch
    from transformers import AutoModelForCausalLM

    from agentgym import Message
    from agentgym.policies.base import GenerationRequest, SamplingParams

    req = GenerationRequest((Message("user", "What is the capital of France?"),),
                            params=SamplingParams(temperature=1.0, max_tokens=16, seed=0))
    (c,) = await vllm_policy.generate([req])
    assert len(c.logprobs) == len(c.completion_ids) > 0
    model = AutoModelForCausalLM.from_pretrained(vllm_policy.engine.model_config.model,
                                                 dtype=torch.float32)
    ids = torch.tensor([c.prompt_ids + c.completion_ids])
    logits = model(ids).logits[0, len(c.prompt_ids) - 1: -1]
    expected = torch.log_softmax(logits, -1).gather(-1, ids[0, len(c.prompt_ids):, None])[:, 0]
    assert torch.allclose(expected, torch.tensor(c.logprobs), atol=2e-2)


async def test_update_weights_changes_outputs_and_version(vllm_policy):
    import torch
    from transformers import AutoModelForCausalLM

    from agentgym import Message
    from agentgym.policies.base import GenerationRequest, SamplingParams

    req = GenerationRequest((Message("user", "Say hello."),),
                            params=SamplingParams(temperature=0, max_tokens=8))
    (before,) = await vllm_policy.generate([req])
    model = AutoModelForCausalLM.from_pretrained(vllm_policy.engine.model_config.model,
                                                 dtype=torch.float32)
    noisy = [(n, p.detach() + 0.05 * torch.randn_like(p)) for n, p in model.named_parameters()]
    await vllm_policy.update_weights(noisy)
    (after,) = await vllm_policy.generate([req])
    assert vllm_policy.policy_version == 1 and after.policy_version == 1
    assert after.logprobs != before.logprobs
