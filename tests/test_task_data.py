"""Tasks from JSONL, JSON, CSV, TSV and Parquet files and from datasets.Dataset objects."""

import asyncio
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentgym
from agentgym import Message
from agentgym.errors import ConfigError, SchemaError
from agentgym.task_data import read_records
from agentgym.tool_env import ToolEnv

ROWS = [
    {"id": "q1", "prompt": "What is 2 + 3?", "answer": 5, "topic": "sums"},
    {"id": "q2", "question": "Capital of France?", "answer": ["Paris", "paris"]},
]
datasets = pytest.importorskip("datasets")
pq = pytest.importorskip("pyarrow.parquet")
pa = pytest.importorskip("pyarrow")


def write(tmp_path, fmt, rows=ROWS):
    path = tmp_path / f"tasks.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif fmt == "json":
        path.write_text(json.dumps(rows), encoding="utf-8")
    elif fmt in ("csv", "tsv"):
        sep = "," if fmt == "csv" else "\t"
        keys = list(dict.fromkeys(k for r in rows for k in r))

        def cell(v):
            text = "" if v is None else json.dumps(v) if isinstance(v, list) else str(v)
            return f'"{text.replace(chr(34), chr(34) * 2)}"' if sep in text or '"' in text \
                else text
        path.write_text("\n".join([sep.join(keys)] + [sep.join(cell(r.get(k)) for k in keys)
                                                     for r in rows]) + "\n", encoding="utf-8")
    elif fmt == "parquet":
        keys = list(dict.fromkeys(k for r in rows for k in r))
        table = {}
        for k in keys:  # typed columns: a column with a list holds lists of strings
            values = [r.get(k) for r in rows]
            listy = any(isinstance(v, list) for v in values)
            table[k] = [None if v is None else [str(x) for x in v] if isinstance(v, list)
                        else [str(v)] if listy else str(v) for v in values]
        pq.write_table(pa.table(table), path)
    return path


def answer_of(env, seed):
    asyncio.run(env.reset(seed=seed))
    return env.task


def tools_env(source):
    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: The first.
            b: The second.
        """
        return a + b

    return ToolEnv(source, [add], verifier="exact")


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv", "tsv", "parquet"])
def test_tool_env_reads_each_file_format(tmp_path, fmt):
    env = tools_env(write(tmp_path, fmt))
    first, second = answer_of(env, 0), answer_of(env, 1)
    assert first.id == "q1" and first.prompt == "What is 2 + 3?"
    assert first.answer in (5, "5", ["5"]) and first.data["topic"] == "sums"
    assert second.prompt == "Capital of France?"  # 'question' is accepted for 'prompt'
    answers = second.answer if isinstance(second.answer, list) else json.loads(second.answer)
    assert answers == ["Paris", "paris"]

    async def episode():
        await env.reset(seed=1)
        return (await env.step(Message("assistant", "<answer>Paris</answer>"))).reward
    assert asyncio.run(episode()) == 1.0


def test_tool_env_reads_a_dataset_object():
    ds = datasets.Dataset.from_list([{"prompt": "What is 2 + 3?", "answer": "5"},
                                     {"prompt": "What is 1 + 1?", "answer": "2"}])
    env = tools_env(ds)
    assert answer_of(env, 1).prompt == "What is 1 + 1?"
    assert answer_of(env, 1).id == "task-1"


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_schema_errors_name_row_and_field(tmp_path, fmt):
    rows = [{"prompt": "ok", "answer": "1"}, {"answer": "2", "note": "no prompt"}]
    with pytest.raises(SchemaError, match=r"row 1.*missing the field 'prompt' or 'question'"
                       if fmt != "jsonl" else r"record 1 \(line 2\).*'prompt'"):
        tools_env(write(tmp_path, fmt, rows))


def test_wrong_types_and_bad_files_are_named(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a"}\n{"prompt": 12}\n', encoding="utf-8")
    with pytest.raises(SchemaError, match=r"bad.jsonl record 1 \(line 2\): field 'prompt' must "
                                          r"be str, got 12 \(int\)"):
        tools_env(bad)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"prompt": "a"}\n{"prompt": \n', encoding="utf-8")
    with pytest.raises(SchemaError, match="broken.jsonl:2"):
        read_records(broken)
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("prompt,answer\nwhat?,1,extra\n", encoding="utf-8")
    with pytest.raises(SchemaError, match=r"row 0 \(line 2\): 3 cells, but the header names 2"):
        read_records(ragged)
    with pytest.raises(ConfigError, match=r"expected one of \.jsonl"):
        read_records(tmp_path / "tasks.xlsx")
    with pytest.raises(ConfigError, match="no task file"):
        read_records(tmp_path / "missing.csv")
    (tmp_path / "empty.csv").write_text("prompt,answer\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="no task records"):
        read_records(tmp_path / "empty.csv")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(SchemaError, match="not a readable Parquet file"):
        read_records(tmp_path / "junk.parquet")
    solution = [{"prompt": "p", "solution": [{"arguments": {}}]}]
    with pytest.raises(SchemaError, match="field 'solution' item 0"):
        tools_env(write(tmp_path, "jsonl", solution))
    ds = datasets.Dataset.from_list([{"prompt": "a"}, {"prompt": None}])
    with pytest.raises(SchemaError, match="dataset row 1: missing the field 'prompt'"):
        tools_env(ds)


def test_swe_tasks_from_csv_parquet_and_a_dataset(tmp_path):
    from agentgym.envs.swe.task import load_tasks

    rows = [{"instance_id": f"demo__{i}", "problem_statement": "fix it",
             "FAIL_TO_PASS": json.dumps(["test_a.py::test_x"]), "PASS_TO_PASS": "[]",
             "image": "img"} for i in range(2)]
    for source in (write(tmp_path, "csv", rows), write(tmp_path, "parquet", rows),
                   datasets.Dataset.from_list(rows)):
        tasks = load_tasks(source)
        assert [t.instance_id for t in tasks] == ["demo__0", "demo__1"]
        assert tasks[0].fail_to_pass == ("test_a.py::test_x",)
    rows[1] = {**rows[1], "FAIL_TO_PASS": "not json"}
    with pytest.raises(SchemaError, match=r"row 1 \(line 3\) \(demo__1\): FAIL_TO_PASS"):
        load_tasks(write(tmp_path, "csv", rows))


def test_a_registered_env_takes_a_task_file(tmp_path):
    rows = [{"prompt": "What is 6 * 7?", "answer": 42}]
    env = agentgym.make("agentgym/CodeMath-v0", tasks=str(write(tmp_path, "parquet", rows)))
    assert answer_of(env, 3).prompt == "What is 6 * 7?"
    asyncio.run(env.aclose())


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300), st.sampled_from(["jsonl", "json", "csv", "tsv", "parquet"]))
def test_garbage_files_fail_with_a_named_error(tmp_path, data, fmt):
    """Any bytes under any suffix: records, or an error naming the file; never a traceback."""
    path = tmp_path / f"junk.{fmt}"
    path.write_bytes(data)
    try:
        records = read_records(path)
    except (SchemaError, ConfigError) as exc:
        assert "junk" in str(exc)
    else:
        assert all(isinstance(r.data, dict) and "junk" in r.where for r in records)
