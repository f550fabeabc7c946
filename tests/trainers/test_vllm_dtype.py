"""model.vllm_dtype: the engine's weights dtype, apart from the trainer's."""

import pytest

from agentgym.errors import ConfigError
from agentgym.trainers.config import load_config


class Captured(Exception):
    pass


@pytest.mark.parametrize(("args", "want"), [([], "float32"),
                                             (["model.vllm_dtype=bfloat16"], "bfloat16"),
                                             (["model.dtype=bfloat16"], "bfloat16")])
def test_the_engine_gets_its_own_dtype_or_the_model_s(monkeypatch, tmp_path, args, want):
    import agentgym.policies.vllm as vllm_module
    from agentgym.trainers.vllm_generation import vllm_policy

    def engine(folder, **kwargs):
        raise Captured(kwargs["dtype"])

    monkeypatch.setattr(vllm_module, "VLLMPolicy", engine)
    config = load_config(None, [f"run_dir={tmp_path}", "model.generation=vllm", *args])
    with pytest.raises(Captured) as got:
        vllm_policy(config)
    assert str(got.value) == want
    assert config.model.dtype == ("bfloat16" if "model.dtype=bfloat16" in args else "float32")


def test_an_unknown_engine_dtype_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="vllm_dtype"):
        load_config(None, [f"run_dir={tmp_path}", "model.vllm_dtype=int4"])
