"""The agentgym command line, run as a user runs it (a subprocess)."""

import json
import subprocess
import sys

import pytest


def agentgym(*args, input=None):
    return subprocess.run([sys.executable, "-m", "agentgym.cli", *args], capture_output=True,
                          text=True, input=input, timeout=120,
                          env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


def test_envs_lists_builtins():
    out = agentgym("envs")
    assert out.returncode == 0
    assert "agentgym/Sokoban-v0" in out.stdout and "agentgym/Arithmetic-v0" in out.stdout


def test_rollout_writes_jsonl(tmp_path):
    path = tmp_path / "r.jsonl"
    out = agentgym("rollout", "agentgym/Arithmetic-v0", "--policy", "scripted", "--episodes", "6",
                   "--group-size", "2", "--out", str(path))
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 6 and all(t["outcome_reward"] == 1.0 for t in lines)
    assert "100.0%" in out.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["rollout", "agentgym/Sokobn-v0"], "did you mean 'agentgym/Sokoban-v0'"),
        (["rollout", "agentgym/Arithmetic-v0", "--kw", "splt=test"], "did you mean 'split'"),
        (["rollout", "agentgym/Arithmetic-v0", "--policy", "smart"], "unknown policy 'smart'"),
        (["play", "agentgym/Arithmetic-v1"], "registered versions: ['agentgym/Arithmetic-v0']"),
        (["rollout", "agentgym/Arithmetic-v0", "--episodes", "5", "--group-size", "2"],
         "multiple of --group-size"),
    ],
)
def test_caller_mistakes_exit_2_with_a_clear_line(args, needle):
    out = agentgym(*args)
    assert out.returncode == 2
    assert needle in out.stderr and "Traceback" not in out.stderr


def test_play_reads_actions_from_stdin():
    out = agentgym("play", "agentgym/Arithmetic-v0", "--seed", "3",
                   input='calculator(expression="36*30")\nanswer(value=-248)\n')
    assert out.returncode == 0, out.stderr
    assert "1080" in out.stdout and "reward 1.0" in out.stdout and "terminated" in out.stdout


def test_import_agentgym_stays_light():
    code = ("import sys, agentgym; heavy = [m for m in ('torch', 'docker', 'playwright', 'vllm',"
            " 'ray', 'transformers') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stderr
