"""16-bit dtypes on a CPU without AVX-512 are warned about where they are chosen."""

import platform
import warnings

import pytest

from agentgym.cpu import slow_on_this_cpu, warn_if_slow

x86 = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                         reason="the check is for x86-64 CPUs")


@x86
def test_half_precision_is_slow_without_avx512_only():
    for dtype in ("bfloat16", "float16"):
        assert slow_on_this_cpu(dtype, "AVX2") and slow_on_this_cpu(dtype, "DEFAULT")
        assert not slow_on_this_cpu(dtype, "AVX512")
    assert not slow_on_this_cpu("float32", "AVX2")


@x86
def test_the_check_agrees_with_torchs_own_bf16_support_on_this_machine():
    import torch

    assert slow_on_this_cpu("bfloat16") == (not torch.ops.mkldnn._is_mkldnn_bf16_supported())


@x86
def test_the_warning_says_what_to_choose_instead():
    with pytest.warns(UserWarning, match=r"optim.autocast is bfloat16.*no AVX-512.*Train in"):
        assert warn_if_slow("bfloat16", "optim.autocast", "Train in float32.", "AVX2")
    assert not warn_if_slow("bfloat16", "optim.autocast", "Train in float32.", "AVX512")


@x86
def test_loading_a_bf16_model_and_bf16_autocast_warn_on_an_avx2_cpu(monkeypatch):
    import torch

    from agentgym.policies.models import load_model
    from agentgym.trainers.precision import training_precision

    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    with pytest.warns(UserWarning, match="the model's dtype is bfloat16"):
        load_model("smollm2", dtype="bfloat16")
    with pytest.warns(UserWarning, match="optim.autocast is bfloat16"):
        training_precision("cpu", "bfloat16")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        training_precision("cpu", "bfloat16")
