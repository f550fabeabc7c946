"""agentgym serve's inputs: a mistake is one ``error:`` line (exit 2), before the model loads."""

from __future__ import annotations

import shutil
import socket
import sys

import pytest

from agentgym import cli


def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
        ) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["agentgym", "serve", *args])
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.delenv("AGENTGYM_TRACEBACK", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    captured = capsys.readouterr()
    return int(exit_info.value.code or 0), captured.out + captured.err


@pytest.fixture
def folders(tmp_path, tiny_model_dir):
    """Folders that are not (complete) models, by name, and the tiny model's folder."""
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "notes.txt").write_text("hello")
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "broken-config").mkdir()
    (tmp_path / "broken-config" / "config.json").write_text("{")
    shutil.copytree(tiny_model_dir, tmp_path / "no-weights")
    (tmp_path / "no-weights" / "model.safetensors").unlink()
    shutil.copytree(tiny_model_dir, tmp_path / "truncated")
    weights = tmp_path / "truncated" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    return tmp_path, str(tiny_model_dir)


@pytest.fixture
def busy_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_serve_input_mistakes_are_one_error_line(monkeypatch, capsys, folders, busy_port):
    d, tiny = folders
    cases = [
        ((f"{d}/text",), "has no config.json"),
        ((f"{d}/a-file",), "is not a local folder"),
        ((f"{d}/broken-config",), "is not a readable JSON model config"),
        ((f"{d}/no-weights",), "holds no weights"),
        (("hf:",), "MODEL is empty"),
        ((tiny, "--port", "70000"), "--port must be in [0, 65535]"),
        ((tiny, "--port", "-1"), "--port must be in [0, 65535]"),
        ((tiny, "--port", str(busy_port)), f"port {busy_port} on 127.0.0.1 is in use"),
        ((tiny, "--host", "no-such-host.invalid"), "--host 'no-such-host.invalid' is not"),
        ((tiny, "--host", "192.0.2.1"), "is not an address of this machine"),
        ((tiny, "--device", "gpu"), "--device 'gpu' is not a torch device"),
        ((tiny, "--device", "meta"), "serving runs on cpu"),
        ((tiny, "--dtype", "float8"), "--dtype must be one of"),
        ((tiny, "--max-batch-size", "0"), "--max-batch-size must be in [1, 4096]"),
        ((f"{d}/truncated", "--port", "0"), "could not load the model in"),
    ]
    import torch

    if not torch.cuda.is_available():
        cases.append(((tiny, "--device", "cuda"), "has no usable CUDA device"))
    for args, needle in cases:
        code, out = run(monkeypatch, capsys, *args)
        assert code == 2, (args, out)
        assert out.startswith("error: ") and out.count("\n") == 1, (args, out)
        assert needle in out, (args, out)
        assert "Traceback" not in out
