"""The llama.cpp backend: the GGUF it writes, and a real ``llama-server`` against transformers.

The GGUF is checked without llama.cpp: transformers' own GGUF loader reads it back, and the
model it builds must give the original's logits. The server tests run the embedded SmolLM2
on a ``llama-server`` built by ``scripts/build_llama_server.sh``; they skip where none is
built, and fail instead under ``AGENTGYM_REQUIRE_LLAMA_SERVER=1`` (CI builds one).
"""

import asyncio
import contextlib
import json
import math
import shutil

import pytest

torch = pytest.importorskip("torch")

LOGPROB_MEAN, LOGPROB_MAX = 3e-3, 3e-2
"""Largest mean and largest single |server log-prob − transformers log-prob|: float32
weights, the float16 KV cache (the default)."""
EXACT_MEAN, EXACT_MAX = 2e-5, 2e-4
"""The same with a float32 KV cache: then only the products' summation order differs."""
MARGIN = 2e-3
"""A greedy divergence is explained when the two best next tokens are closer than this in
log-prob under the transformers model (kernel and summation order decide such near-ties)."""


@pytest.fixture(scope="module")
def model_dir():
    from agentgym.policies.models import embedded_model_dir

    return embedded_model_dir()


@pytest.fixture(scope="module")
def reference(model_dir):
    from agentgym.policies.models import load_model

    return load_model(str(model_dir))


def _prompt_ids(tokenizer, text):
    from agentgym import Message
    from agentgym.prompting import render_prompt

    return tokenizer(render_prompt(tokenizer, [Message("user", text)], []),
                     add_special_tokens=False)["input_ids"]


PROMPTS = ["What is 7 * 8?", "Name a color that starts with the letter B.",
           "Write one sentence about the sea.", "List three fruits."]


def test_the_gguf_loads_back_in_transformers_with_the_same_logits(model_dir, reference,
                                                                   tmp_path):
    from transformers import AutoModelForCausalLM

    from agentgym.policies.gguf_export import folder_tensors, write_gguf

    model, tokenizer = reference
    write_gguf(model_dir, folder_tensors(model_dir), tmp_path / "m.gguf")
    shutil.copy(model_dir / "config.json", tmp_path / "config.json")
    back = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="m.gguf",
                                                dtype=torch.float32).eval()
    ids = torch.tensor([_prompt_ids(tokenizer, PROMPTS[0])])
    with torch.no_grad():
        want, got = model(ids).logits, back(ids).logits
    assert torch.allclose(want, got, atol=1e-4), (want - got).abs().max()


def test_another_architecture_or_a_missing_weight_is_refused(model_dir, tmp_path):
    from agentgym.errors import ConfigError
    from agentgym.policies.gguf_export import folder_tensors, write_gguf

    other = tmp_path / "qwen"
    other.mkdir()
    config = json.loads((model_dir / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "model_type": "qwen2"}))
    with pytest.raises(ConfigError, match="model_type 'qwen2'"):
        write_gguf(other, [], tmp_path / "q.gguf")
    some = [(n, t) for n, t in folder_tensors(model_dir) if "layers.3." not in n]
    with pytest.raises(ConfigError, match="a full set of weights has 272 tensors"):
        write_gguf(model_dir, some, tmp_path / "m.gguf")


def test_a_missing_server_says_how_to_build_one(tmp_path, monkeypatch):
    from agentgym.policies.llamacpp import LlamaServerMissingError, server_binary

    monkeypatch.setenv("AGENTGYM_LLAMA_SERVER", str(tmp_path / "nowhere"))
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LlamaServerMissingError, match="scripts/build_llama_server.sh"):
        server_binary()


def test_the_server_names_its_build(llama_server):
    from agentgym.policies.llamacpp import server_build

    assert "commit" in server_build()


def _requests(ids_list, **params):
    from agentgym.policies.base import GenerationRequest, SamplingParams

    return [GenerationRequest(prompt_ids=ids, params=SamplingParams(**params))
            for ids in ids_list]


def _explained(model, prompt, want, got):
    """Whether greedy ``got`` equals ``want`` up to a near-tie where they part."""
    if want == got:
        return True
    at = next(i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b)
    with torch.no_grad():
        logits = model(torch.tensor([prompt + want[:at]])).logits[0, -1]
    top = torch.log_softmax(logits.double(), -1).topk(2).values
    return float(top[0] - top[1]) < MARGIN


@pytest.mark.slow
def test_greedy_replies_and_log_probs_match_transformers(llama_server, model_dir, reference):
    from agentgym.policies.llamacpp import LlamaCppPolicy

    model, tokenizer = reference
    prompts = [_prompt_ids(tokenizer, p) for p in PROMPTS]

    async def run():
        policy = LlamaCppPolicy(str(model_dir), max_num_seqs=4, slot_tokens=512)
        try:
            greedy = await policy.generate(_requests(prompts, temperature=0, max_tokens=24))
            sampled = await policy.generate(_requests(prompts, temperature=1.0, max_tokens=16,
                                                      seed=3))
            return greedy, sampled
        finally:
            await policy.aclose()

    greedy, sampled = asyncio.run(run())
    with torch.no_grad():
        for prompt, completion in zip(prompts, greedy, strict=True):
            out = model.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False)
            want = out[0, len(prompt):].tolist()
            assert _explained(model, prompt, want, list(completion.completion_ids))
            assert completion.prompt_ids == tuple(prompt)
            assert completion.text == tokenizer.decode(completion.completion_ids,
                                                       skip_special_tokens=True)
    gaps = _gaps(model, prompts, sampled)
    # the float16 KV cache: about 1e-3 per token on average, 7e-3 at most (measured on 419
    # tokens; the float32 products alone differ by 4e-6 on average, 3e-5 at most)
    assert sum(gaps) / len(gaps) < LOGPROB_MEAN and max(gaps) < LOGPROB_MAX, gaps


def _gaps(model, prompts, completions):
    """|server log-prob − transformers log-prob| of every sampled token that has one."""
    gaps = []
    with torch.no_grad():
        for prompt, completion in zip(prompts, completions, strict=True):
            ids = list(completion.completion_ids)
            logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1]
            exact = torch.log_softmax(logits.double(), -1)[range(len(ids)), ids]
            assert len(completion.logprobs) == len(ids) > 0
            # NaN: the token ends inside a multi-byte character (the server gives none)
            gaps += [abs(a - b) for a, b in zip(completion.logprobs, exact.tolist(),
                                                strict=True) if not math.isnan(a)]
    assert gaps
    return gaps


@pytest.mark.slow
def test_with_a_float32_kv_cache_log_probs_equal_transformers(llama_server, model_dir,
                                                               reference):
    """Only the products' summation order is left: 4e-6 per token on average here."""
    from agentgym.policies.llamacpp import LlamaCppPolicy

    model, tokenizer = reference
    prompts = [_prompt_ids(tokenizer, p) for p in PROMPTS]

    async def run():
        policy = LlamaCppPolicy(str(model_dir), max_num_seqs=4, slot_tokens=512,
                                kv_dtype="float32")
        try:
            return await policy.generate(_requests(prompts, temperature=1.0, max_tokens=24,
                                                   seed=5))
        finally:
            await policy.aclose()

    gaps = _gaps(model, prompts, asyncio.run(run()))
    assert sum(gaps) / len(gaps) < EXACT_MEAN and max(gaps) < EXACT_MAX, gaps


@pytest.mark.slow
def test_a_weight_sync_restarts_the_server_on_the_new_weights(llama_server, model_dir, reference):
    from agentgym.policies.gguf_export import folder_tensors
    from agentgym.policies.llamacpp import LlamaCppPolicy

    _, tokenizer = reference
    prompt = _prompt_ids(tokenizer, PROMPTS[1])
    weights = {name: stored.load() for name, stored in folder_tensors(model_dir)}
    # a zero final norm makes every logit 0: each token then has log-prob -log(vocabulary)
    flat = {**weights, "model.norm.weight": torch.zeros_like(weights["model.norm.weight"])}

    async def run():
        policy = LlamaCppPolicy(str(model_dir), max_num_seqs=2, slot_tokens=512)
        try:
            before = (await policy.generate(_requests([prompt], temperature=1.0,
                                                      max_tokens=4, seed=1)))[0]
            version = await policy.update_weights(flat)
            after = (await policy.generate(_requests([prompt], temperature=1.0, max_tokens=4,
                                                     seed=1)))[0]
            await policy.suspend()
            stopped = policy._process is None  # noqa: SLF001 (the test looks inside)
            back = await policy.update_weights(weights.items(), version=7)
            again = (await policy.generate(_requests([prompt], temperature=1.0,
                                                     max_tokens=4, seed=1)))[0]
            return before, version, after, stopped, back, again
        finally:
            await policy.aclose()

    before, version, after, stopped, back, again = asyncio.run(run())
    assert (before.policy_version, version, after.policy_version) == (0, 1, 1)
    uniform = -math.log(49152)
    assert all(abs(lp - uniform) < 1e-3 for lp in after.logprobs)
    assert not any(abs(lp - uniform) < 1e-3 for lp in before.logprobs)
    assert stopped and back == 7 and again.policy_version == 7
    assert again.completion_ids == before.completion_ids  # the same weights, the same seed


CHILD = """
import asyncio, sys
from agentgym.policies.base import GenerationRequest, SamplingParams
from agentgym.policies.llamacpp import LlamaCppPolicy

async def main():
    policy = LlamaCppPolicy(sys.argv[1], max_num_seqs=1, slot_tokens=256)
    request = GenerationRequest(prompt_ids=[1, 2, 3], params=SamplingParams(max_tokens=1))
    await policy.generate([request])
    print("ready", flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


@pytest.mark.slow
def test_the_server_dies_with_the_process_that_started_it(llama_server, model_dir):
    """A trainer killed outright (SIGKILL, the OOM killer) leaves no server holding memory."""
    if shutil.which("setpriv") is None:
        pytest.skip("util-linux's setpriv, which arms the server's parent-death signal, is missing")
    import subprocess
    import sys

    psutil = pytest.importorskip("psutil")
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(model_dir)],
                             stdout=subprocess.PIPE, text=True)
    server = []
    try:
        line = child.stdout.readline()  # once it has answered a request
        assert line == "ready\n", f"the child printed {line!r}"
        server = psutil.Process(child.pid).children()
        assert len(server) == 1, server
        child.kill()
        child.wait()
        _, alive = psutil.wait_procs(server, timeout=60)
        assert not alive
        # its GGUF's folder stays, and the next backend's sweep takes it
        from process_fixtures import swept_after_its_owner

        assert swept_after_its_owner("agentgym-llamacpp-", child.pid)
    finally:
        child.kill()
        for process in server:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()


def test_log_probs_line_up_with_the_tokens_the_server_sampled():
    """A token ending inside a multi-byte character has no probability (NaN); EOS is put back."""
    from agentgym.errors import AgentGymError
    from agentgym.policies.llamacpp import sampled_tokens

    body = {"tokens": [5, 7, 9], "stop_type": "eos",
            "completion_probabilities": [{"id": 5, "prob": 0.5}, {"id": 9, "prob": 0.25},
                                         {"id": 2, "prob": 1.0}]}
    tokens, logprobs = sampled_tokens(body)
    assert tokens == [5, 7, 9, 2]
    assert logprobs[0] == math.log(0.5) and math.isnan(logprobs[1])
    assert logprobs[2:] == [math.log(0.25), 0.0]
    limit = {**body, "stop_type": "limit", "completion_probabilities": [{"id": 5, "prob": 1}]}
    assert sampled_tokens(limit)[0] == [5, 7, 9]
    with pytest.raises(AgentGymError, match="left over"):
        sampled_tokens({**limit, "completion_probabilities": [{"id": 8, "prob": 1}] * 2})
