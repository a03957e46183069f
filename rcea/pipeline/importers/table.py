"""Any JSONL / Parquet / CSV table → interchange records, by renaming its columns.

``mapping`` says which column fills which record field (``reward=correct``); a field with
no mapping takes the column of its own name when there is one; ``consts`` give a value to
every row (``model=qwen-1.5b``). Other columns are ignored. Values are converted to the
field's type where the file cannot carry it (CSV is all text; a numeric question id becomes
a string), and every error names the file, the line (JSONL, CSV: the line the record starts
on) or row (Parquet, 0-based) and the source column, e.g. ``run.csv:line 7: correct
(reward): must be 0 or 1, got 'yes'``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rcea.audits.inputs import InputError, iter_json_lines, loads_json, read_csv
from rcea.pipeline.importers.common import relabel, source_label
from rcea.pipeline.records import (
    ALL_FIELDS,
    MAX_ERRORS,
    REQUIRED_FIELDS,
    RecordBatch,
    RecordError,
    RecordValidationError,
    checked_input,
    input_refusal,
    read_parquet_table,
    records_from_rows,
)

INT_FIELDS = ("reward", "step", "seed", "train_seed", "n_tokens", "validity")
FLOAT_FIELDS = (
    "mean_token_entropy",
    "seq_logprob",
    "sampling_temperature",
    "sampling_top_p",
    "logprob_temperature",
)
ID_FIELDS = ("trajectory_id", "question_id", "run", "model", "answer", "mode")
SUFFIXES = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}
SUFFIXES |= {".pq": "parquet", ".csv": "csv", ".tsv": "tsv"}


class TableSpecError(ValueError):
    """A ``--map`` / ``--const`` that cannot apply to this file (before any row is read)."""


@dataclass(frozen=True)
class TableSpec:
    mapping: dict[str, str]  # record field -> source column
    consts: dict[str, str]  # record field -> value (text, converted like a CSV cell)

    def digest_options(self) -> dict[str, Any]:
        return {
            "map": dict(sorted(self.mapping.items())),
            "const": dict(sorted(self.consts.items())),
        }


def parse_pairs(items: list[str], option: str) -> dict[str, str]:
    """``["a=b", ...]`` → ``{"a": "b"}``; each field once, and only record fields."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise TableSpecError(f"{option} {item!r}: expected FIELD=VALUE")
        if name not in ALL_FIELDS:
            raise TableSpecError(
                f"{option} {item!r}: {name!r} is not a record field ({', '.join(ALL_FIELDS)})"
            )
        if name in out:
            raise TableSpecError(f"{option}: field {name!r} given twice")
        out[name] = value if option == "--const" else value.strip()
    return out


def _read_rows(path: Path, kind: str) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """(rows, locations, column names); a file that cannot be read as given (not a
    regular file, not UTF-8, a column named twice, invalid JSONL lines) raises, named."""
    source = str(path)
    if kind == "parquet":
        table = read_parquet_table(path)
        try:
            rows = table.to_pylist()
        except Exception as exc:  # noqa: BLE001 - pyarrow raises many types
            raise RecordValidationError(
                [RecordError(source, "file", None, f"cannot read Parquet: {exc}")]
            ) from None
        return rows, [f"row {i}" for i in range(len(rows))], list(table.column_names)
    if kind in ("csv", "tsv"):
        try:
            columns, found = read_csv(path, delimiter="\t" if kind == "tsv" else ",")
        except InputError as exc:
            raise input_refusal(exc, source) from None
        return [row for _, row in found], [f"line {n}" for n, _ in found], columns
    rows, locs = [], []
    errors: list[RecordError] = []
    columns_seen: dict[str, None] = {}
    try:
        for lineno, obj in iter_json_lines(path):
            if isinstance(obj, InputError):
                errors.append(RecordError(source, f"line {lineno}", None, obj.message))
            elif not isinstance(obj, dict):
                errors.append(RecordError(source, f"line {lineno}", None, "expected a JSON object"))
            else:
                columns_seen.update(dict.fromkeys(obj))
                rows.append(obj)
                locs.append(f"line {lineno}")
            if len(errors) >= MAX_ERRORS:
                break
    except InputError as exc:
        raise input_refusal(exc, source) from None
    if errors:
        raise RecordValidationError(errors, truncated=len(errors) >= MAX_ERRORS)
    return rows, locs, list(columns_seen)


def convert(field: str, value: Any) -> Any:
    """A cell (text from CSV or ``--const``, or a typed value) as the field's type where
    that is unambiguous; anything else is returned as it is, for the validator to name."""
    if isinstance(value, str):
        text = value.strip()
        if field in INT_FIELDS:
            if text == "":
                return None
            try:
                return int(text)
            except ValueError:
                try:
                    f = float(text)
                except ValueError:
                    return value
                return int(f) if f.is_integer() else f
        if field in FLOAT_FIELDS:
            if text == "":
                return None
            try:
                return float(text)
            except ValueError:
                return value
        if field == "truncated":
            low = text.lower()
            if low == "":
                return None
            return {"true": True, "false": False, "1": True, "0": False}.get(low, value)
        if field == "token_entropies":
            if text == "":
                return None
            try:
                return loads_json(text)
            except InputError:
                return value
        if field in ("answer", "validity", "mode", "split", "question") and value == "":
            return None
        return value
    if field in ID_FIELDS and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if field in INT_FIELDS and isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and math.isnan(value) and field != "token_entropies":
        return None  # pandas writes missing cells as NaN
    return value


def resolve(spec: TableSpec, columns: list[str], source: str) -> dict[str, str]:
    """Record field → source column for this file, checking the spec against its columns."""
    overlap = sorted(set(spec.mapping) & set(spec.consts))
    if overlap:
        raise TableSpecError(f"{', '.join(overlap)}: given both by --map and --const")
    missing = [c for c in spec.mapping.values() if c not in columns]
    if missing:
        raise TableSpecError(
            f"{source}: no column named {', '.join(repr(c) for c in missing)} "
            f"(its columns: {', '.join(columns) or 'none'})"
        )
    cols = dict(spec.mapping)
    for f in ALL_FIELDS:
        if f not in cols and f not in spec.consts and f in columns:
            cols[f] = f
    absent = [f for f in REQUIRED_FIELDS if f not in cols and f not in spec.consts]
    if absent:
        raise TableSpecError(
            f"{source}: required field(s) {', '.join(absent)} have no column: map each with "
            "--map FIELD=COLUMN or give it with --const FIELD=VALUE"
        )
    return cols


def kind_of(path: Path) -> str:
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise TableSpecError(
            f"{path}: unsupported file type {path.suffix!r}: use .jsonl, .parquet, .csv or .tsv"
        )
    return kind


def read_table(path: Path, spec: TableSpec, *, max_errors: int = MAX_ERRORS) -> RecordBatch:
    """Read ``path`` through ``spec`` into validated records (all rows or an error)."""
    path = checked_input(path)
    kind = kind_of(path)
    rows, locs, columns = _read_rows(path, kind)
    cols = resolve(spec, columns, str(path))
    consts = {f: convert(f, v) for f, v in spec.consts.items()}
    records = []
    for row in rows:
        rec = {f: convert(f, row.get(c)) for f, c in cols.items()}
        rec.update(consts)
        records.append({k: v for k, v in rec.items() if v is not None})
    labels = {f: source_label(c, f) for f, c in cols.items()}
    labels |= {f: f"--const {f}" for f in spec.consts}
    try:
        return records_from_rows(str(path), records, locs, max_errors=max_errors)
    except RecordValidationError as exc:
        raise _once_per_const(relabel(exc, labels), spec) from None


def _once_per_const(exc: RecordValidationError, spec: TableSpec) -> RecordValidationError:
    """A bad ``--const`` is wrong on every row: name it once (at the first row)."""
    seen: set[str] = set()
    errors = []
    for e in exc.errors:
        if e.field is not None and e.field.startswith("--const "):
            if e.field in seen:
                continue
            seen.add(e.field)
        errors.append(e)
    return RecordValidationError(errors, truncated=exc.truncated)
