"""agentgym export: a trained run's checkpoint as a folder that plain transformers, peft and
agentgym serve load, giving the same greedy outputs as the run's own policy."""

import asyncio
import hashlib
import json
import threading
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from agentgym.cli import app
from agentgym.errors import ConfigError
from agentgym.policies.base import GenerationRequest, SamplingParams
from agentgym.trainers.config import load_config
from agentgym.trainers.export import export_run
from agentgym.trainers.loop import build, train_step
from agentgym.types import Message

PROMPT = (Message("user", "Push the box onto the target."),)
GREEDY = SamplingParams(temperature=0.0, max_tokens=10)


def trained_run(tmp_path, tiny_model_dir, *extra):
    """A run trained one step and checkpointed; returns the live run (its own policy)."""
    cfg = load_config(None, [
        f"run_dir={tmp_path / 'run'}", "steps=1", "save_every=1", f"model.path={tiny_model_dir}",
        "rollout.tasks_per_step=2", "rollout.group_size=4", "rollout.max_tokens=4",
        "tensorboard=false", "optim.lr=0.01", "env.id=agentgym/Sokoban-v0", "env.max_turns=2",
        "algorithm.options.invalid_penalty=0.1", *extra])
    run = build(cfg)
    asyncio.run(train_step(run))
    run.checkpointer.save(run.state, run.weights, run.learner.optimizer)
    return run


def greedy(policy):
    return asyncio.run(policy.generate([GenerationRequest(PROMPT, params=GREEDY)]))[0]


def hf_greedy(model, prompt_ids):
    ids = torch.tensor([prompt_ids])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=GREEDY.max_tokens, pad_token_id=0)
    return tuple(out[0, len(prompt_ids):].tolist())


def tree_digest(folder):
    h = hashlib.sha256()
    for p in sorted(Path(folder).rglob("*")):
        h.update(str(p.relative_to(folder)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def test_full_run_exports_a_model_folder_transformers_loads_with_the_same_greedy_output(
        tmp_path, tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = trained_run(tmp_path, tiny_model_dir)
    before = tree_digest(run.config.run_dir)
    done = export_run(run.config.run_dir, tmp_path / "out")
    assert tree_digest(run.config.run_dir) == before  # the run folder is only read
    assert done.kind == "model" and done.step == 1
    out = tmp_path / "out"
    assert {"model.safetensors", "config.json", "generation_config.json",
            "agentgym-export.json"} <= {p.name for p in out.iterdir()}
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.chat_template and tokenizer.chat_template == run.policy.tokenizer.chat_template
    trained = dict(run.weights.named_parameters())
    assert all(torch.equal(p, trained[n]) for n, p in model.named_parameters())
    initial = load_file(Path(tiny_model_dir) / "model.safetensors")
    assert any(not torch.equal(initial[n], p) for n, p in model.named_parameters())  # trained
    own = greedy(run.policy)
    assert len(own.completion_ids) == GREEDY.max_tokens
    assert hf_greedy(model, own.prompt_ids) == tuple(own.completion_ids)


def test_lora_run_exports_a_peft_adapter_and_a_merged_model(tmp_path, tiny_model_dir):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run = trained_run(tmp_path, tiny_model_dir, "model.lora.enabled=true", "model.lora.r=4")
    done = export_run(run.config.run_dir, tmp_path / "adapter")
    assert done.kind == "adapter"
    adapter = tmp_path / "adapter"
    meta = json.loads((adapter / "adapter_config.json").read_text())
    assert meta["base_model_name_or_path"] == str(Path(tiny_model_dir).resolve())
    weights = load_file(adapter / "adapter_model.safetensors")
    assert any("lora_B" in n and v.abs().sum() > 0 for n, v in weights.items())  # trained B
    base = AutoModelForCausalLM.from_pretrained(meta["base_model_name_or_path"]).eval()
    peft_model = PeftModel.from_pretrained(base, adapter).eval()
    own = greedy(run.policy)
    assert hf_greedy(peft_model, own.prompt_ids) == tuple(own.completion_ids)

    export_run(run.config.run_dir, tmp_path / "merged", merge=True)
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged").eval()
    assert not any("lora" in n for n, _ in merged.named_parameters())
    ids = torch.tensor([own.prompt_ids])
    with torch.no_grad():
        want = run.policy.model(ids).logits
        got = merged(ids).logits
        plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir)(ids).logits
    assert torch.allclose(got, want, atol=1e-5) and not torch.allclose(plain, want, atol=1e-5)


def test_serve_answers_an_openai_request_with_the_runs_greedy_text(tmp_path, tiny_model_dir):
    """The exported adapter folder, served: an OpenAI-client chat request at temperature 0."""
    from agentgym.policies.hf import TransformersPolicy
    from agentgym.serve import serve

    run = trained_run(tmp_path, tiny_model_dir, "model.lora.enabled=true", "model.lora.r=4")
    export_run(run.config.run_dir, tmp_path / "adapter")
    own = greedy(run.policy)
    policy = TransformersPolicy.load(str(tmp_path / "adapter"))
    ready, urls = threading.Event(), []
    loop = asyncio.new_event_loop()

    def on_ready(url):
        urls.append(url)
        ready.set()

    server = loop.create_task(serve(policy, port=0, model_name="exported", on_ready=on_ready))

    def run_server():
        try:
            loop.run_until_complete(server)
        except asyncio.CancelledError:
            pass  # stopped by the test
        finally:
            loop.close()

    thread = threading.Thread(target=run_server, daemon=True)
    thread.start()
    try:
        assert ready.wait(60)
        body = {"model": "exported", "messages": [{"role": "user", "content": PROMPT[0].content}],
                "temperature": 0, "max_tokens": GREEDY.max_tokens}
        try:
            from openai import OpenAI
        except ImportError:  # the same request over plain HTTP
            import urllib.request

            request = urllib.request.Request(f"{urls[0]}/chat/completions",
                                             json.dumps(body).encode(),
                                             {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=60) as r:
                text = json.loads(r.read())["choices"][0]["message"]["content"]
        else:
            reply = OpenAI(base_url=urls[0], api_key="none").chat.completions.create(**body)
            text = reply.choices[0].message.content
    finally:
        loop.call_soon_threadsafe(server.cancel)
        thread.join(30)
        asyncio.run(policy.aclose())
    assert text == own.text and text


def test_bad_exports_are_refused_with_the_fix_and_lose_nothing(tmp_path, tiny_model_dir):
    run = trained_run(tmp_path, tiny_model_dir)
    run_dir = Path(run.config.run_dir)
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    cases = [
        (["export", str(run_dir), "--out", str(full)], "not an empty folder"),
        (["export", str(run_dir), "--out", str(run_dir / "export")], "inside the run folder"),
        (["export", str(tmp_path), "--out", str(tmp_path / "a")], "no config.yaml"),
        (["export", str(run_dir), "--out", str(tmp_path / "b"), "--step", "7"],
         r"has steps \[1\]"),
        (["export", str(run_dir), "--out", str(tmp_path / "c"), "--merge"],
         "leave --merge out"),
        (["export", str(run_dir), "--out", str(tmp_path / "d"), "--base", str(tmp_path / "x")],
         "--base .* is not a local folder"),
    ]
    before = tree_digest(run_dir)
    for args, message in cases:
        with pytest.raises(ConfigError, match=message):
            CliRunner().invoke(app, args, catch_exceptions=False)
    assert (full / "keep.txt").read_text() == "mine" and len(list(full.iterdir())) == 1
    assert tree_digest(run_dir) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full", "run"]  # no half exports


def test_cli_mistake_exits_2_with_the_message(tmp_path, monkeypatch, capsys):
    import sys

    from agentgym import cli

    monkeypatch.setattr(sys, "argv", ["agentgym", "export", str(tmp_path), "--out",
                                      str(tmp_path.parent / f"{tmp_path.name}-out")])
    with pytest.raises(SystemExit) as exc:
        cli.main()
    assert exc.value.code == 2
    assert "not a training run folder (no config.yaml)" in " ".join(capsys.readouterr().err.split())


def test_run_started_from_another_runs_checkpoint_exports_merged(tmp_path, tiny_model_dir):
    """SFT/RL chains: model.path names a checkpoint; export rebuilds that base too."""
    from transformers import AutoModelForCausalLM

    first = trained_run(tmp_path / "a", tiny_model_dir)
    start = Path(first.config.run_dir) / "checkpoints" / "step-000001"
    second = trained_run(tmp_path / "b", tiny_model_dir, f"model.path={start}",
                         "model.lora.enabled=true", "model.lora.r=4")
    with pytest.raises(ConfigError, match="pass --merge for a full model"):
        export_run(second.config.run_dir, tmp_path / "adapter")
    export_run(second.config.run_dir, tmp_path / "merged", merge=True)
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged").eval()
    ids = torch.tensor([greedy(second.policy).prompt_ids])
    with torch.no_grad():
        assert torch.allclose(merged(ids).logits, second.policy.model(ids).logits, atol=1e-5)
