"""A model folder's held-out record (agentgym/trainers/heldout_record.py): which evaluations
it stands for, and that anything else reads as no record. The record written by a real SFT
on vLLM and taken by the RL run that starts from it is tested in test_vllm_training.py."""

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).parent.parent.parent


def _config(**model):
    from agentgym.trainers.config import TrainConfig, from_dict

    return from_dict(TrainConfig, {
        "env": {"id": "agentgym/MentalMath-v0", "eval_seeds": 4, "eval_kwargs": {"high": 9}},
        "model": {"generation": "vllm", **model}})


def test_the_agent_jobs_sft_and_rl_evaluate_alike_so_rl_can_take_the_sfts_record(
        smollm2_tokenizer, tmp_path: Path) -> None:
    from agentgym.trainers.config import load_config
    from agentgym.trainers.heldout_record import evaluation_key
    from agentgym.trainers.sft_config import load_sft_config

    demos = tmp_path / "expert.jsonl"  # the job writes its own; the key never reads them
    demos.write_text("")
    sft = load_sft_config(ROOT / "examples" / "sft_agent_calendar.yaml",
                          [f"data.paths=[{demos}]"]).as_train_config()
    rl = load_config(ROOT / "examples" / "agent_calendar.yaml")
    tokenizer = smollm2_tokenizer  # the engines' (base folder and export alike: same template)
    assert evaluation_key(rl, tokenizer) is not None
    assert evaluation_key(sft, tokenizer) == evaluation_key(rl, tokenizer)


def test_only_one_env_evaluated_on_an_engine_is_recordable() -> None:
    from dataclasses import replace

    from agentgym.trainers.heldout_record import evaluation_key

    config = _config()
    key = evaluation_key(config, None)
    assert key is not None and key["kwargs"] == {"high": 9}
    assert key["seeds"] == [config.env.eval_first_seed, 4]
    # in-process generation runs adapters unmerged: not the merged model the next run loads
    assert evaluation_key(_config(generation="transformers"), None) is None
    assert evaluation_key(replace(config, env=replace(config.env, eval_seeds=0)), None) is None
    sampled = replace(config, env=replace(config.env, eval_temperature=1.0))
    assert evaluation_key(sampled, None) is None  # run again, it would draw other episodes
    # every setting that changes what is played changes the key
    for changed in (replace(config, rollout=replace(config.rollout, max_tokens=7)),
                    replace(config, env=replace(config.env, eval_first_seed=5)),
                    replace(config, env=replace(config.env, max_turns=2)),
                    _config(vllm_dtype="bfloat16"), _config(max_batch_size=8)):
        assert evaluation_key(changed, None) != key

    class Edited:  # an export whose chat template was edited renders other prompts
        chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}"

        def __len__(self) -> int:
            return 49152

    assert evaluation_key(config, Edited()) != key


def test_a_llama_cpp_key_names_the_servers_settings_and_build(tmp_path, monkeypatch) -> None:
    from agentgym.trainers.heldout_record import evaluation_key

    def server(version: str) -> None:  # a stand-in binary that prints a version line
        binary = tmp_path / version / "llama-server"
        binary.parent.mkdir()
        binary.write_text(f"#!/bin/sh\necho 'version: {version} (build 1, commit x)' >&2\n")
        binary.chmod(0o755)
        monkeypatch.setenv("AGENTGYM_LLAMA_SERVER", str(binary))

    server("1.0")
    key = evaluation_key(_config(generation="llamacpp"), None)
    assert key is not None
    assert key["engine"]["llamacpp"] == {"slots": 16, "slot_tokens": 2048,
                                         "kv_dtype": "float16", "flash_attn": False,
                                         "build": "1.0 (build 1, commit x)"}
    assert evaluation_key(_config(generation="llamacpp", llamacpp_slots=8), None) != key
    server("2.0")  # another build can round differently: its own evaluation
    assert evaluation_key(_config(generation="llamacpp"), None) != key


def test_the_digest_is_of_names_and_every_byte() -> None:
    from agentgym.trainers.heldout_record import weights_digest

    state = {"a.weight": torch.arange(6.0).reshape(2, 3), "b.bias": torch.ones(3)}
    same = {k: v.clone() for k, v in reversed(state.items())}
    assert weights_digest(state) == weights_digest(same)
    nudged = {**same, "a.weight": same["a.weight"].clone()}
    nudged["a.weight"][1, 2] = torch.nextafter(torch.tensor(5.0), torch.tensor(6.0))
    renamed = {"a.weight": state["a.weight"], "c.bias": state["b.bias"]}
    reshaped = {**state, "a.weight": state["a.weight"].reshape(3, 2)}
    as_bf16 = {k: v.to(torch.bfloat16) for k, v in state.items()}
    digests = {weights_digest(x) for x in (state, nudged, renamed, reshaped, as_bf16)}
    assert len(digests) == 5


def test_a_record_reads_back_only_for_its_settings_and_weights(tmp_path: Path) -> None:
    from agentgym.trainers.heldout_record import RECORD, Record, evaluation_key, read_record

    key = evaluation_key(_config(), None)
    assert key is not None
    record = Record(key, "d1", {"eval/success_rate": 0.5, "eval/reward_mean": 0.5},
                    {"0": 1.0, "1": 0.0})
    record.write(tmp_path)
    assert read_record(tmp_path, key, "d1") == record
    assert read_record(tmp_path, key, "d2") is None  # other weights
    assert read_record(tmp_path, {**key, "draws": 2}, "d1") is None  # other settings
    assert read_record(tmp_path / "none", key, "d1") is None
    (tmp_path / RECORD).write_text('{"key": ')  # cut short: evaluate, as without one
    assert read_record(tmp_path, key, "d1") is None
