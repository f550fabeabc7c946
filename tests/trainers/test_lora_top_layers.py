"""model.lora.top_layers: adapters on the last k decoder layers only, and a backward pass that
stops at the lowest of them."""

import asyncio
import dataclasses

import pytest
import torch

from agentgym.errors import ConfigError
from agentgym.policies.models import tiny_model
from agentgym.trainers.config import LoraConfig, load_config
from agentgym.trainers.loop import build, train_step
from agentgym.trainers.lora import merged_state, peft_config, with_lora
from agentgym.trainers.models import checkpoint_activations

TARGETS = ("q_proj", "v_proj", "down_proj")


def replace_lora(config, **changes):
    lora = dataclasses.replace(config.model.lora, **changes)
    return dataclasses.replace(config, model=dataclasses.replace(config.model, lora=lora))


def layer_of(name):
    return int(name.split(".layers.")[1].split(".")[0])


@pytest.mark.parametrize("checkpointed", [False, True])
def test_only_the_top_layers_get_adapters_and_gradients(checkpointed):
    model = with_lora(tiny_model(vocab_size=64, layers=4),
                      LoraConfig(enabled=True, r=4, top_layers=2, target_modules=TARGETS))
    if checkpointed:
        checkpoint_activations(model)
    adapted = {layer_of(n) for n, p in model.named_parameters() if p.requires_grad}
    assert adapted == {2, 3}
    outputs = {}
    layers = model.get_base_model().model.layers
    for i, layer in enumerate(layers):
        layer.register_forward_hook(lambda _m, _a, out, i=i: outputs.__setitem__(i, out))
    model.train()
    model(input_ids=torch.randint(0, 64, (2, 12))).logits.sum().backward()

    def requires_grad(out):
        return (out[0] if isinstance(out, tuple) else out).requires_grad

    # no graph below the adapted layers: their activations are not kept for a backward pass
    assert [requires_grad(outputs[i]) for i in range(4)] == [False, False, True, True]
    graded = {layer_of(n) for n, p in model.named_parameters() if p.grad is not None}
    assert graded == {2, 3}


def test_merged_weights_change_only_where_adapters_are():
    base = tiny_model(vocab_size=64, layers=3)
    before = {n: p.detach().clone() for n, p in base.named_parameters()}
    model = with_lora(base, LoraConfig(enabled=True, r=4, top_layers=1, target_modules=TARGETS))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.fill_(0.1)  # B starts at zero: make the adapters do something
    merged = merged_state(model)
    changed = {n for n, t in merged.items() if not torch.equal(t, before[n])}
    assert changed and {layer_of(n) for n in changed} == {2}


def test_the_adapter_config_names_the_layers_for_a_vllm_engine():
    lora = LoraConfig(enabled=True, top_layers=3)
    assert peft_config(lora, 30).to_dict()["layers_to_transform"] == [27, 28, 29]
    assert peft_config(LoraConfig(enabled=True), 30).to_dict()["layers_to_transform"] is None


def test_more_top_layers_than_the_model_has_is_refused_with_the_count():
    with pytest.raises(ConfigError, match=r"top_layers=5.*has 4 decoder layers"):
        with_lora(tiny_model(vocab_size=64, layers=4), LoraConfig(enabled=True, top_layers=5))
    with pytest.raises(ConfigError, match=r"needs the model's decoder layer count"):
        peft_config(LoraConfig(enabled=True, top_layers=2), None)
    with pytest.raises(ConfigError, match=r"top_layers must be >= 0"):
        LoraConfig(enabled=True, top_layers=-1)


def test_a_run_reads_the_option_and_trains_the_top_layers(tmp_path, tiny_model_dir):
    config = load_config(None, [
        f"run_dir={tmp_path / 'run'}", "steps=1", "save_every=1", f"model.path={tiny_model_dir}",
        "rollout.tasks_per_step=2", "rollout.group_size=2", "rollout.max_tokens=4",
        "tensorboard=false", "env.id=agentgym/MentalMath-v0", "model.lora.enabled=true",
        "model.lora.r=4", "model.lora.top_layers=1"])
    with pytest.raises(ConfigError, match="has 1 decoder layers"):
        build(replace_lora(config, top_layers=2))
    assert config.model.lora.top_layers == 1
    run = build(config)
    trained = {layer_of(n) for n, p in run.learner.model.named_parameters() if p.requires_grad}
    assert trained == {0}  # the tiny model's one layer

    async def one_step():
        try:
            return await train_step(run)
        finally:
            await run.collector.aclose()

    before = {n: p.detach().clone() for n, p in run.learner.model.named_parameters()
              if p.requires_grad}
    asyncio.run(one_step())
    after = dict(run.learner.model.named_parameters())
    assert any(not torch.equal(after[n], t) for n, t in before.items())
