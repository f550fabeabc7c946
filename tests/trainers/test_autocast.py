"""optim.autocast: bf16 passes that move the weights as float32 ones do, weights kept float32."""

import numpy as np
import pytest
import torch

from agentgym.errors import ConfigError
from agentgym.trainers.config import LossConfig, OptimConfig, load_config

from .test_packing import group_samples, history_samples, sgd_step, tiny_llama


def cosine(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    x = torch.cat([v.flatten() for v in a.values()])
    y = torch.cat([b[k].flatten() for k in a])
    return float(x @ y / (x.norm() * y.norm()))


@pytest.mark.parametrize("pack", [False, True])
def test_a_bf16_update_moves_the_weights_as_a_float32_one(pack):
    rng = np.random.default_rng(5)
    samples = group_samples(rng, "a") + history_samples(rng)
    base = tiny_llama()
    loss = LossConfig(recompute_logprobs=False)  # the same recorded π_old for both passes
    (m32, d32) = sgd_step(base, samples, OptimConfig(max_tokens_per_micro_batch=10_000,
                                                     grad_clip=0.0, pack_prefixes=pack), loss)
    (m16, d16) = sgd_step(base, samples, OptimConfig(max_tokens_per_micro_batch=10_000,
                                                     grad_clip=0.0, pack_prefixes=pack,
                                                     autocast="bfloat16"), loss)
    assert m16["loss"] == pytest.approx(m32["loss"], rel=0.05, abs=1e-3)
    assert m16["grad_norm"] == pytest.approx(m32["grad_norm"], rel=0.05)
    assert cosine(d32, d16) > 0.99  # bf16 rounding, not a different gradient
    assert all(d.dtype == torch.float32 for d in d16.values())  # the weights stayed float32
    # and the passes did run in bf16: the change is not bit-identical to float32's
    assert any(not torch.equal(d16[n], d32[n]) for n in d32)


def test_an_unknown_precision_is_refused_with_the_choices(tmp_path):
    with pytest.raises(ConfigError, match="bfloat16"):
        load_config(None, [f"run_dir={tmp_path}", "optim.autocast=fp8"])


def test_the_sft_option_is_read(tmp_path):
    from agentgym.trainers.sft_config import load_sft_config

    (tmp_path / "x.jsonl").write_text("")
    path = tmp_path / "sft.yaml"
    path.write_text(f"data: {{paths: [{tmp_path / 'x.jsonl'}]}}\noptim: {{autocast: bfloat16}}\n")
    assert load_sft_config(path, []).optim.autocast == "bfloat16"


def test_the_sft_loss_in_bf16_is_the_float32_loss_rounded():
    from agentgym.trainers.sft import nll_step

    from .test_packing import PAD

    rng = np.random.default_rng(2)
    samples = history_samples(rng)
    model = tiny_llama()
    plain, tokens = nll_step(model, samples, budget=4096, pad_id=PAD, device="cpu",
                             backward=False)
    bf16, same = nll_step(model, samples, budget=4096, pad_id=PAD, device="cpu",
                          backward=False, autocast="bfloat16")
    assert tokens == same and bf16 == pytest.approx(plain, rel=0.02) and bf16 != plain
