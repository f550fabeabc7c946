"""logging.wandb: a real W&B offline run directory holds the metrics.jsonl scalars of every
step, the config, and a table of sample trajectories (read back from W&B's own run files)."""

import json
import struct

import pytest

from agentgym.errors import ConfigError
from agentgym.trainers.config import load_config
from agentgym.trainers.loop import train
from agentgym.trainers.metrics import read_metrics

BLOCK, HEADER = 32768, 7  # the .wandb file: LevelDB-log blocks of protobuf Records


def wandb_records(path):
    """The protobuf Records of a .wandb run file."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, partial = HEADER, b""
    while pos + HEADER <= len(data):
        room = BLOCK - pos % BLOCK
        if room < HEADER:  # a block's tail too short for a header is padding
            pos += room
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        chunk = data[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if kind == 0:
            break
        partial = chunk if kind in (1, 2) else partial + chunk  # full/first, middle/last
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(partial)
            yield record


def history(records):
    rows = []
    for r in records:
        if r.WhichOneof("record_type") == "history":
            rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                         for i in r.history.item})
    return rows


def test_offline_wandb_run_holds_the_metrics_and_sample_trajectories(
        tmp_path, tiny_model_dir, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")  # logging.wandb_mode unset: follows WANDB_MODE
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = train(load_config(None, [
        f"run_dir={tmp_path / 'run'}", "steps=2", "save_every=2", f"model.path={tiny_model_dir}",
        "rollout.tasks_per_step=2", "rollout.group_size=2", "rollout.max_tokens=4",
        "tensorboard=false", "env.id=agentgym/Sokoban-v0", "env.max_turns=2",
        "env.eval_seeds=2", "logging.wandb=true", "logging.sample_trajectories=3"]))
    [folder] = list((run / "wandb").glob("offline-run-*"))
    [file] = list(folder.glob("run-*.wandb"))
    records = list(wandb_records(file))
    rows = history(records)
    logged = {int(r["_step"]): r for r in rows}
    expected = read_metrics(run)
    assert [r["step"] for r in expected] == [0, 1, 2]  # held-out eval at 0, then two steps
    for want in expected:
        got = logged[want["step"]]
        for key, value in want.items():
            if key != "step":
                assert got[key] == pytest.approx(value), key
    [config] = [r.run.config for r in records if r.WhichOneof("record_type") == "run"]
    settings = {i.key: json.loads(i.value_json) for i in config.update}
    assert settings["logging"]["wandb"] is True and settings["steps"] == 2
    for step in (1, 2):  # each training step's samples table, 3 trajectories of 4
        table = logged[step]
        assert table["trajectories/_type"] == "table-file" and table["trajectories/nrows"] == 3
        content = json.loads((folder / "files" / table["trajectories/path"]).read_text())
        assert content["columns"][-1] == "conversation"
        assert all(row[0] == step and "[user]" in row[-1] and "[assistant]" in row[-1]
                   for row in content["data"])


def test_logging_section_rejects_bad_values():
    with pytest.raises(ConfigError, match="wandb_mode must be one of"):
        load_config(None, ["logging.wandb_mode=cloud"])
    with pytest.raises(ConfigError, match="sample_trajectories must be >= 0"):
        load_config(None, ["logging.sample_trajectories=-1"])
