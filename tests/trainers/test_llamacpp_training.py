"""Training with rollouts on a llama.cpp server (``model.generation: llamacpp``), end to end.

A tiny random Llama, LoRA adapters: ``agentgym sft`` evaluates the base model and the warm
start on the server, ``agentgym train`` samples every rollout there, sends the merged weights
after each update and stops the server while it updates. Needs a ``llama-server`` built by
``scripts/build_llama_server.sh`` (skips without one; CI builds it and requires it).
"""

from __future__ import annotations

import json
import subprocess

import pytest
from test_agent_job import cli, rows

pytestmark = pytest.mark.slow


def servers(scratch) -> list[str]:
    """The llama-servers serving a GGUF under ``scratch`` (this test's own, whatever else runs)."""
    out = subprocess.run(["pgrep", "-f", f"llama-server --model {scratch}"],
                         capture_output=True, text=True).stdout
    return out.split()


def test_sft_then_grpo_generate_on_a_llama_server(llama_server, tmp_path, tiny_vllm_model_dir,
                                                  monkeypatch):
    pytest.importorskip("torch")
    scratch = tmp_path / "scratch"  # where the runs' policies write their GGUF
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    demos, sft_dir, rl_dir = tmp_path / "expert.jsonl", tmp_path / "sft", tmp_path / "rl"
    cli(["rollout", "agentgym/Calendar-v0", "--policy", "expert", "--episodes", "4",
         "--seed", "100000", "--kw", "split=train", "--out", str(demos)])
    engine = ["model.generation=llamacpp", "model.llamacpp_slots=4",
              "model.llamacpp_slot_tokens=1024", "env.eval_seeds=4", "tensorboard=false"]
    sft_out = cli(["sft", "examples/sft_agent_calendar.yaml", f"run_dir={sft_dir}",
                   f"model.path={tiny_vllm_model_dir}", f"data.paths=[{demos}]",
                   "optim.epochs=1", *engine])
    sft_rows = rows(sft_dir)
    assert sft_rows[0]["step"] == 0 and "eval/success_rate" in sft_rows[0]
    assert "eval/success_rate" in sft_rows[-1]
    record = json.loads((sft_dir / "model" / "heldout.json").read_text())
    server = record["key"]["engine"]["llamacpp"]
    assert (server["slots"], server["slot_tokens"], server["flash_attn"]) == (4, 1024, False)

    # a random model writes many tokens that end inside multi-byte characters, which the
    # server gives no log-prob: the update scores those samples' π_old itself
    rl_out = cli(["train", "examples/agent_calendar.yaml", f"run_dir={rl_dir}",
                  f"model.path={sft_dir / 'model'}", "steps=2", "save_every=2",
                  "rollout.tasks_per_step=2", "rollout.group_size=2", *engine])
    rl_rows = rows(rl_dir)
    steps = [r for r in rl_rows if r.get("rollout_s") is not None]
    assert [r["policy_version"] for r in steps] == [1.0, 2.0]
    assert all(r["error_rate"] == 0 for r in steps)
    assert rl_rows[0].get("eval/recorded") == 1.0  # the SFT's own evaluation, taken over
    assert "heldout/gain" in rl_rows[-1]
    assert servers(scratch) == []  # every server the runs started has stopped
    assert "Unclosed" not in sft_out + rl_out  # and every connection to them closed
