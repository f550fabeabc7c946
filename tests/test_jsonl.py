"""Trajectory JSONL: strict reading with clear errors, atomic writing."""

from __future__ import annotations

import math

import pytest

from agentgym import Message, Trajectory
from agentgym.errors import SchemaError
from agentgym.files import atomic_write
from agentgym.jsonl import TrajectoryWriter, loads_strict, read_trajectories


def _traj(i: int) -> Trajectory:
    return Trajectory(f"t{i}", "task", "g", (Message("user", "hi"),), outcome_reward=1.0)


@pytest.mark.parametrize(("text", "why"), [
    ("[" * 100_000, "nested too deeply"),
    ('{"a": ' + "1" * 10_000 + "}", "number too long"),
    ('{"r": NaN}', "NaN is not a JSON number"),
    ('{"r": Infinity}', "Infinity is not a JSON number"),
    ("{oops", "not valid JSON"),
])
def test_loads_strict_refuses_with_a_schema_error(text, why):
    with pytest.raises(SchemaError, match=why):
        loads_strict(text)


def test_a_nan_outcome_is_refused():
    with pytest.raises(ValueError, match="finite"):
        Trajectory("t", "task", "g", (), outcome_reward=math.nan)


def test_read_names_file_and_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(_traj(0).to_json().encode() + b"\n\xff\n")
    with pytest.raises(SchemaError, match=r"t.jsonl:2: not UTF-8"):
        list(read_trajectories(path))


def test_writer_replaces_the_file_only_when_complete(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(_traj(99).to_json() + "\n")
    writer = TrajectoryWriter(path)
    writer.write(_traj(0))
    assert [t.id for t in read_trajectories(path)] == ["t99"]  # the old file is intact
    assert (tmp_path / "t.jsonl.partial").exists()  # a crash here keeps what finished
    writer.write(_traj(1))
    writer.close()
    writer.close()
    assert [t.id for t in read_trajectories(path)] == ["t0", "t1"]
    assert not (tmp_path / "t.jsonl.partial").exists()


def test_append_mode_writes_in_place(tmp_path):
    path = tmp_path / "t.jsonl"
    with TrajectoryWriter(path) as w:
        w.write(_traj(0))
    with TrajectoryWriter(path, append=True) as w:
        w.write(_traj(1))
    assert [t.id for t in read_trajectories(path)] == ["t0", "t1"]


def test_atomic_write_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "sub" / "page.html"
    atomic_write(target, "one")
    atomic_write(target, b"two")
    assert target.read_text() == "two"
    assert [p.name for p in target.parent.iterdir()] == ["page.html"]
