"""Task records from local data files and ``datasets.Dataset`` objects, with schema checks.

Every dataset-driven env reads its tasks through :func:`read_records`, whatever the source:

- ``.jsonl``: one JSON object a line (strict JSON, as :mod:`agentgym.jsonl` reads it);
- ``.json``: a list of objects (or one object);
- ``.csv`` / ``.tsv``: a header row, then one task a row; a cell that holds a JSON list or
  object (``["a", "b"]``, ``{"k": 1}``) is read as that value, an empty cell as missing;
- ``.parquet``: one task a row (``pyarrow``, the ``[data]`` extra);
- a ``datasets.Dataset`` (or any sequence of mappings): one task a row. No hub access: load
  or build the dataset yourself, e.g. ``datasets.Dataset.from_parquet(path)``.

Each record comes with ``where`` ("tasks.csv row 3 (line 4)"), and :func:`check_fields`
raises :class:`~agentgym.errors.SchemaError` naming that row and the field:
``tasks.csv row 3 (line 4): field 'prompt' must be a string, got 12 (int)``.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from agentgym.errors import ConfigError, MissingExtraError, SchemaError
from agentgym.jsonl import json_lines, loads_strict

FORMATS = (".jsonl", ".json", ".csv", ".tsv", ".parquet")
"""File suffixes :func:`read_records` reads."""


@dataclass(frozen=True)
class Record:
    """One task record and where it came from.

    Attributes:
        where: The file (or dataset) and row, for error messages.
        index: Position among the source's records (0-based).
        data: The record's fields.
    """

    where: str
    index: int
    data: Mapping[str, Any]


@dataclass(frozen=True)
class Field:
    """A field a record must (or may) have.

    Attributes:
        name: The field's name.
        types: Accepted Python types of its value.
        required: Whether a record without it (or with an empty value) is refused.
        aliases: Other names accepted for it (the first present wins).
    """

    name: str
    types: tuple[type, ...] = (str,)
    required: bool = True
    aliases: tuple[str, ...] = ()


def is_data_source(obj: Any) -> bool:
    """Whether ``obj`` is something :func:`read_records` reads (a path or a dataset)."""
    return isinstance(obj, str | os.PathLike) or _is_dataset(obj)


def read_records(source: str | os.PathLike[str] | Any) -> list[Record]:
    """Every record of a task file or dataset; see the module docstring for the formats.

    Args:
        source: A path to a ``.jsonl``, ``.json``, ``.csv``, ``.tsv`` or ``.parquet`` file,
            or a ``datasets.Dataset`` (any object with ``column_names`` whose rows are
            mappings).

    Raises:
        ConfigError: No such file, an unknown suffix, or an empty source.
        SchemaError: A row that is not an object, or a file that cannot be parsed (naming
            the line or row).
        MissingExtraError: A Parquet file without ``pyarrow`` installed.
    """
    if _is_dataset(source):
        rows = cast(Iterable[Any], source)  # a datasets.Dataset iterates over its rows
        records = _rows(rows, "dataset", "row")
    else:
        if not isinstance(source, str | os.PathLike):
            raise ConfigError(f"expected a task file path or a datasets.Dataset, got "
                              f"{type(source).__name__}")
        path = Path(source)
        suffix = path.suffix.lower()
        if suffix not in FORMATS:
            raise ConfigError(f"cannot read tasks from {str(path)!r}: expected one of "
                              f"{', '.join(FORMATS)}")
        if not path.is_file():
            raise ConfigError(f"no task file at {str(path)!r}"
                              + (" (a directory)" if path.is_dir() else ""))
        records = _READERS[suffix](path)
    if not records:
        raise ConfigError(f"{source!s}: no task records; give at least one row")
    return records


def check_fields(record: Record, fields: Sequence[Field]) -> dict[str, Any]:
    """The record's values of ``fields`` (by canonical name), checked.

    A missing optional field maps to None. Integers are accepted where floats are.

    Raises:
        SchemaError: A required field is missing or empty, or a value has the wrong type;
            the message names the row and the field.
    """
    out: dict[str, Any] = {}
    for f in fields:
        key = next((k for k in (f.name, *f.aliases) if _present(record.data.get(k))), None)
        if key is None:
            if f.required:
                names = " or ".join(repr(k) for k in (f.name, *f.aliases))
                raise SchemaError(f"{record.where}: missing the field {names}; the record has "
                                  f"{sorted(record.data)}")
            out[f.name] = None
            continue
        value = record.data[key]
        ok = isinstance(value, f.types) and not (isinstance(value, bool) and bool not in f.types)
        if not ok and float in f.types and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            want = " or ".join(t.__name__ for t in f.types)
            raise SchemaError(f"{record.where}: field {key!r} must be {want}, got "
                              f"{_short(value)} ({type(value).__name__})")
        out[f.name] = value
    return out


def _present(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, float) and math.isnan(value):  # a missing Parquet/pandas cell
        return False
    return not (isinstance(value, str) and not value.strip())


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_dataset(obj: Any) -> bool:
    return hasattr(obj, "column_names") and hasattr(obj, "__iter__") and \
        not isinstance(obj, str | bytes | Mapping)


def _rows(rows: Iterable[Any], name: str, unit: str) -> list[Record]:
    out = []
    for i, row in enumerate(rows):
        where = f"{name} {unit} {i}"
        if not isinstance(row, Mapping):
            raise SchemaError(f"{where}: expected an object of fields, got {type(row).__name__}")
        out.append(Record(where, i, dict(row)))
    return out


def _read_jsonl(path: Path) -> list[Record]:
    out = []
    for line, value in json_lines(path):
        where = f"{path} record {len(out)} (line {line})"
        if not isinstance(value, Mapping):
            raise SchemaError(f"{where}: expected a JSON object, got {type(value).__name__}")
        out.append(Record(where, len(out), value))
    return out


def _read_json(path: Path) -> list[Record]:
    try:
        data = loads_strict(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise SchemaError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except SchemaError as exc:
        raise SchemaError(f"{path}: {exc}; expected a JSON list of task objects") from None
    return _rows(data if isinstance(data, list) else [data], str(path), "record")


def _read_csv(path: Path) -> list[Record]:
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    try:
        with path.open(encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f, delimiter=delimiter)
            if not reader.fieldnames:
                return []
            return [_csv_record(path, reader.line_num, i, row, reader.fieldnames)
                    for i, row in enumerate(reader)]
    except UnicodeDecodeError as exc:
        raise SchemaError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except csv.Error as exc:
        raise SchemaError(f"{path}: not valid CSV ({exc})") from None


def _csv_record(path: Path, line: int, index: int, row: Mapping[str | None, Any],
                header: Sequence[str]) -> Record:
    where = f"{path} row {index} (line {line})"
    if None in row:  # more cells than the header names
        raise SchemaError(f"{where}: {len(header) + len(row[None])} cells, but the header "
                          f"names {len(header)} columns: {list(header)}")
    return Record(where, index, {k: _cell(v) for k, v in row.items() if k is not None})


def _cell(text: str | None) -> Any:
    """A CSV cell: JSON lists and objects are read as such; other text stays text."""
    if text is None or not text.strip():
        return None
    stripped = text.strip()
    if stripped[0] in "[{":
        try:
            return json.loads(stripped)
        except (ValueError, RecursionError):
            return text
    return text


def _read_parquet(path: Path) -> list[Record]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise MissingExtraError("pyarrow", "data", "Parquet task files") from exc
    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises ArrowInvalid/OSError subclasses for bad files
        raise SchemaError(f"{path}: not a readable Parquet file ({exc})") from None
    return _rows(rows, str(path), "row")


_READERS = {".jsonl": _read_jsonl, ".json": _read_json, ".csv": _read_csv, ".tsv": _read_csv,
            ".parquet": _read_parquet}

