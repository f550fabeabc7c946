"""`agentgym rollout --policy smollm2` records tokens and log-probs a re-scoring reproduces."""

import subprocess
import sys

import pytest

from agentgym.jsonl import read_trajectories

pytestmark = pytest.mark.slow


def test_smollm2_rollout_tokens_match_rescoring(tmp_path):
    out = tmp_path / "sokoban.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "agentgym.cli", "rollout", "agentgym/Sokoban-v0",
         "--policy", "smollm2", "--group-size", "4", "--episodes", "8", "--max-tokens", "24",
         "--kw", "max_turns=2", "--out", str(out)],
        capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    trajs = list(read_trajectories(out))
    assert len(trajs) == 8 and len({t.group_id for t in trajs}) == 2
    assert all(t.status != "error" for t in trajs), [t.error for t in trajs]

    from agentgym.policies.hf import completion_logprobs
    from agentgym.policies.models import load_model

    model, _ = load_model("smollm2")
    steps = [s for t in trajs for s in t.steps]
    assert steps and all(s.tokens is not None for s in steps)
    for step in steps[:6]:
        tokens = step.tokens
        assert len(tokens.logprobs) == len(tokens.completion_ids) > 0
        again = completion_logprobs(model, tokens.prompt_ids, tokens.completion_ids, 1.0)
        assert max(abs(a - b) for a, b in zip(again, tokens.logprobs, strict=True)) < 1e-3
    # Full context: a later step's prompt continues the earlier prompt + sampled ids exactly.
    for t in trajs:
        for prev, step in zip(t.steps, t.steps[1:], strict=False):
            head = prev.tokens.prompt_ids + prev.tokens.completion_ids
            assert step.tokens.prompt_ids[: len(head)] == head
