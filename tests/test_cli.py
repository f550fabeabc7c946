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
        (["rollout", "agentgym/Arithmetic-v0", "--policy", "smollm2", "--constrain-tool-calls"],
         "use a vllm:PATH policy"),
        (["eval", "--suite", "smoke", "--policy", "random", "--constrain-tool-calls"],
         "use a vllm:PATH policy"),
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


def test_rollout_summarize_context_records_summary_turns(tmp_path, tiny_model_dir):
    """--context summarize with a small W: LogSearch's long pages force summary turns."""
    path = tmp_path / "s.jsonl"
    out = agentgym("rollout", "agentgym/LogSearch-v0", "--policy", f"hf:{tiny_model_dir}",
                   "--episodes", "1", "--max-tokens", "24", "--context", "summarize",
                   "--working-tokens", "1024", "--max-summaries", "2", "--step-timeout", "60",
                   "--kw", "max_turns=12", "--out", str(path))
    assert out.returncode == 0, out.stderr
    (traj,) = [json.loads(line) for line in path.read_text().splitlines()]
    assert traj["status"] != "error", traj["error"]
    steps = traj["steps"]
    sizes = [len(s["tokens"]["prompt_ids"]) for s in steps]
    at = [i for i, s in enumerate(steps) if s.get("summary")]
    assert at and traj["metrics"]["summaries"] == len(at)
    assert all(sizes[i + 1] < sizes[i] for i in at if i + 1 < len(steps))  # the window restarts
    assert max(n for i, n in enumerate(sizes) if i not in at) <= 1024


def test_rollout_sampling_seed_repeats_the_episodes(tmp_path, tiny_model_dir):
    """--sampling-seed: the same seed gives the same completions, and a group's rollouts
    still differ from one another (each call draws from its own derived seed)."""
    def texts(name: str, seed: str) -> list[list[str]]:
        path = tmp_path / f"{name}.jsonl"
        out = agentgym("rollout", "agentgym/MentalMath-v0", "--policy", f"hf:{tiny_model_dir}",
                       "--episodes", "4", "--group-size", "4", "--max-tokens", "12",
                       "--sampling-seed", seed, "--out", str(path))
        assert out.returncode == 0, out.stderr
        return [[s["action"]["content"] for s in json.loads(line)["steps"]]
                for line in path.read_text().splitlines()]

    first = texts("a", "1")
    assert texts("b", "1") == first
    assert len({tuple(t) for t in first}) > 1
    assert texts("c", "2") != first
