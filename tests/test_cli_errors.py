"""Hostile inputs to every command: one clear message and a non-zero exit, never a traceback."""

from __future__ import annotations

import sys

import pytest

from agentgym import cli

TRAJECTORY_NAN = ('{"schema_version": 1, "id": "a", "task_id": "t", "group_id": "g", "prompt": [],'
                  ' "steps": [], "status": "terminated", "outcome_reward": NaN}\n')


@pytest.fixture
def files(tmp_path):
    """Hostile input files, by name."""
    made = {
        "binary.jsonl": b"\xff\xfe\x00\x01binary\n",
        "latin1.jsonl": '{"id": "caf\xe9"}\n'.encode("latin-1"),
        "deep.jsonl": b"[" * 100_000 + b"\n",
        "digits.jsonl": b'{"a": ' + b"9" * 10_000 + b"}\n",
        "nan.jsonl": TRAJECTORY_NAN.encode(),
        "inf.jsonl": TRAJECTORY_NAN.replace("NaN", "-Infinity").encode(),
        "syntax.yaml": b"name: x\nentries: [\n  {env: a\n",
        "indent.yaml": b"name: x\nentries:\n  - env: agentgym/MentalMath-v0\n   tasks: 2\n",
        "huge.yaml": b"name: x\nentries:\n  - env: agentgym/MentalMath-v0\n    tasks: 10000000000"
                     b"00\n    rollouts: 1000\n",
        "binary.yaml": b"\xff\xfe\x00name: x\n",
    }
    for name, data in made.items():
        (tmp_path / name).write_bytes(data)
    return tmp_path


def run(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["agentgym", *args])
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.delenv("AGENTGYM_TRACEBACK", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    captured = capsys.readouterr()
    return int(exit_info.value.code or 0), captured.out + captured.err


CASES = [
    (("advantages", "{d}/binary.jsonl", "--estimator", "grpo"), "binary.jsonl:1: not UTF-8"),
    (("advantages", "{d}/latin1.jsonl", "--estimator", "grpo"), "not UTF-8 text (byte 0xe9"),
    (("advantages", "{d}/deep.jsonl", "--estimator", "grpo"), "nested too deeply"),
    (("advantages", "{d}/digits.jsonl", "--estimator", "grpo"), "number too long"),
    (("advantages", "{d}/nan.jsonl", "--estimator", "grpo"), "NaN is not a JSON number"),
    (("advantages", "{d}/inf.jsonl", "--estimator", "grpo"), "-Infinity is not a JSON number"),
    (("advantages", "{d}/missing.jsonl", "--estimator", "grpo"), "does not exist"),
    (("view", "{d}/missing.jsonl"), "no trajectory file"),
    (("view", "{d}"), "no trajectory file"),
    (("progress", "train", "{d}/binary.jsonl"), "not UTF-8"),
    (("progress", "train", "{d}/deep.jsonl"), "nested too deeply"),
    (("eval", "--suite", "{d}/syntax.yaml", "--policy", "random"), "line 4, column 1"),
    (("eval", "--suite", "{d}/indent.yaml", "--policy", "random"), "line 4, column 4"),
    (("eval", "--suite", "{d}/huge.yaml", "--policy", "random"), "at most 1,000,000"),
    (("eval", "--suite", "{d}/binary.yaml", "--policy", "random"), "not UTF-8"),
    (("eval", "--suite", "no-such-suite", "--policy", "random"), "no suite named"),
    (("train", "{d}/syntax.yaml"), "not valid YAML"),
    (("train", "{d}/indent.yaml"), "line 4, column 4"),
    (("train", "{d}/missing.yaml"), "no config file"),
    (("rollout", "agentgym/MentalMath-v0", "--kw", "x=["), "not valid YAML"),
    (("rollout", "agentgym/MentalMath-v0", "--out", "{d}"), "is a directory"),
    (("rollout", "agentgym/MentalMath-v0", "--episodes", "0"), "positive multiple"),
    (("rollout", "agentgym/MentalMath-v0", "--kw", "nope=1"), "unexpected keyword"),
    (("play", "agentgym/MentalMth-v0"), "did you mean 'agentgym/MentalMath-v0'"),
    (("compare", "{d}/a", "{d}/b"), "no results.json"),
    (("serve", "{d}/no-model"), "not a local folder"),
]


@pytest.mark.parametrize(("args", "expected"), CASES, ids=lambda v: " ".join(v)[:60]
                         if isinstance(v, tuple) else None)
def test_a_caller_mistake_is_one_message(files, monkeypatch, capsys, args, expected):
    code, output = run(monkeypatch, capsys, *(a.format(d=files) for a in args))
    assert code != 0
    assert "Traceback" not in output
    assert expected in " ".join(output.split()), output


def test_view_refuses_to_overwrite_its_input(files, monkeypatch, capsys):
    source = files / "run.jsonl"
    source.write_text("{}\n")
    code, output = run(monkeypatch, capsys, "view", str(source), "-o", str(source))
    assert code != 0 and "also an input" in output
    assert source.read_text() == "{}\n"
    link = files / "link.html"
    link.symlink_to(source)  # the same file under another name
    code, output = run(monkeypatch, capsys, "view", str(source), "-o", str(link))
    assert code != 0 and source.read_text() == "{}\n"


def test_train_never_rewrites_the_config_it_reads(tmp_path, monkeypatch, capsys):
    """A run's own config.yaml as CONFIG: kept byte for byte; with overrides, refused."""
    from agentgym.trainers.config import load_config, save_config

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    own = run_dir / "config.yaml"
    save_config(load_config(None, [f"run_dir={run_dir}"]), own)
    before = own.read_bytes()
    save_config(load_config(own), own)  # what train does on `train RUN/config.yaml --resume`
    assert own.read_bytes() == before
    code, output = run(monkeypatch, capsys, "train", str(own), "optim.lr=0.5")
    assert code != 0 and "the run's own resolved config" in " ".join(output.split()), output
    assert own.read_bytes() == before


def test_a_bug_still_shows_its_traceback(monkeypatch, capsys):
    """Only input mistakes are turned into messages; anything else stays a traceback."""
    monkeypatch.setattr(sys, "argv", ["agentgym", "envs"])

    def broken():
        raise KeyError("internal")

    monkeypatch.setattr(cli, "app", broken)
    with pytest.raises(KeyError):
        cli.main()
