"""The interchange record (docs/record-schema.md): one sampled trajectory per row, JSONL or Parquet.

Validation is hand-written rather than a per-row Pydantic model so that every error names
the file, the line (JSONL, 1-based) or row (Parquet, 0-based) and the field, and so that
100k-row files validate in well under a second. Token arrays are checked vectorised.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Generator, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rcea.audits.inputs import (
    InputError,
    check_input_file,
    invisible_character,
    iter_lines,
    loads_json,
)
from rcea.pipeline.transcript import parse_turns

REQUIRED_FIELDS: dict[str, str] = {
    "trajectory_id": "str, unique",
    "question_id": "str",
    "text": "str, non-empty",
    "reward": "0/1 verifier outcome",
    "run": "str, provenance",
    "model": "str, provenance",
    "step": "int >= 0, provenance",
    "seed": "int, provenance",
}
OPTIONAL_FIELDS: dict[str, str] = {
    "mean_token_entropy": "float >= 0 (nats)",
    "token_entropies": "list[float >= 0]",
    "n_tokens": "int >= 0",
    "seq_logprob": "float <= 0",
    "answer": "str",
    "validity": "0/1 or null",
    "mode": "str",
    "split": "probe | eval",
    "truncated": "bool (or 0/1): hit the token limit before EOS",
    "sampling_temperature": "float > 0: temperature the sample was drawn at",
    "sampling_top_p": "float in (0, 1]: top-p the sample was drawn with",
    "logprob_temperature": "float > 0: temperature seq_logprob was computed at (default 1)",
    "question": "str: the problem statement the trajectory answers (no chat template)",
    "ground_truth": "str: the question's reference answer (verl's `gts`), kept per question",
    "reward_extras": "str: JSON object of the trainer's per-sample extras (verl's reward "
    "extras, num_turns, …)",
    "turns": 'str: JSON array of {"role", "content"}: a multi-turn transcript\'s turns',
    "train_seed": "int >= 0: the training seed (replicate) of the run; not the decoding seed",
}
PROVENANCE_FIELDS: tuple[str, ...] = ("run", "model", "step", "seed", "train_seed")
ALL_FIELDS: tuple[str, ...] = (*REQUIRED_FIELDS, *OPTIONAL_FIELDS)
SCALAR_FIELDS: tuple[str, ...] = tuple(f for f in ALL_FIELDS if f != "token_entropies")
SPLITS = ("probe", "eval")
MAX_ERRORS = 100
STRING_FIELDS: tuple[str, ...] = (
    "trajectory_id",
    "question_id",
    "text",
    "run",
    "model",
    "answer",
    "mode",
    "split",
    "question",
    "ground_truth",
    "reward_extras",
    "turns",
)
#: The store's column width of each id and provenance field (``rcea.study.store.models``).
ID_WIDTHS: dict[str, int] = {
    "trajectory_id": 300,
    "question_id": 300,
    "mode": 300,
    "run": 200,
    "model": 200,
}
#: The store keeps ``step``, ``n_tokens``, ``reward`` and ``validity`` as 32-bit integers
#: (PostgreSQL's ``integer``), ``seed`` as 64-bit.
INT32_MAX = 2**31 - 1
#: C0 control characters other than \t \n \r (PostgreSQL refuses NUL; the others only
#: hide or garble text), and lone surrogates (not UTF-8).
_FORBIDDEN_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff]")


@dataclass(frozen=True)
class RecordError:
    """One problem in one record: ``source:location: field: message``."""

    source: str
    location: str
    field: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.source}:{self.location}"
        if self.field:
            return f"{where}: {self.field}: {self.message}"
        return f"{where}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.source,
            "location": self.location,
            "field": self.field,
            "message": self.message,
        }


class RecordValidationError(ValueError):
    """Raised when a file holds invalid records; ``errors`` lists every problem found."""

    def __init__(self, errors: list[RecordError], truncated: bool = False) -> None:
        self.errors = errors
        self.truncated = truncated
        head = "\n".join(str(e) for e in errors[:20])
        more = len(errors) - 20
        tail = f"\n... and {more} more" if more > 0 else ""
        cut = f"\n(stopped after {MAX_ERRORS} errors)" if truncated else ""
        super().__init__(f"{len(errors)} invalid record(s):\n{head}{tail}{cut}")


@dataclass
class RecordBatch:
    """Validated records in columnar form (scalars as lists, tokens as flat + offsets)."""

    source: str
    columns: dict[str, list[Any]]
    locations: list[str]
    token_values: np.ndarray[Any, Any] | None = None  # float32/64, all token entropies concatenated
    token_offsets: np.ndarray[Any, Any] | None = (
        None  # int64, len n+1; row i has values[o[i]:o[i+1]]
    )
    token_present: np.ndarray[Any, Any] | None = None  # bool per row
    extra: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.locations)

    @property
    def n_questions(self) -> int:
        return len(set(self.columns["question_id"]))

    def rows(self) -> Iterator[dict[str, Any]]:
        names = list(self.columns)
        for i in range(len(self)):
            yield {n: self.columns[n][i] for n in names}


# --------------------------------------------------------------------------- reading


_UNKNOWN_FIELD = "unknown field (not in the record schema; --allow-extra ignores it)"
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
PARQUET_SUFFIXES = (".parquet", ".pq")


def read_records(
    path: str | Path, *, max_errors: int = MAX_ERRORS, allow_extra: bool = False
) -> RecordBatch:
    """Read and validate a JSONL (``.jsonl``/``.json``) or Parquet (``.parquet``) file.

    Raises ``FileNotFoundError`` for a missing file and ``RecordValidationError`` naming
    every bad line/row and field (up to ``max_errors``).
    """
    path = checked_input(path)
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        return _read_jsonl(path, max_errors=max_errors, allow_extra=allow_extra)
    if suffix in PARQUET_SUFFIXES:
        return _read_parquet(path, max_errors=max_errors, allow_extra=allow_extra)
    raise _unsupported(path)


def iter_record_batches(
    path: str | Path,
    *,
    chunk_records: int,
    max_errors: int = MAX_ERRORS,
    allow_extra: bool = False,
) -> Iterator[RecordBatch]:
    """``read_records`` in chunks of at most ``chunk_records`` records (JSONL or Parquet by
    suffix), each validated as a file is; checks across chunks are the caller's."""
    path = checked_input(path)
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        reader = iter_jsonl_batches
    elif suffix in PARQUET_SUFFIXES:
        reader = iter_parquet_batches
    else:
        raise _unsupported(path)
    return reader(path, chunk_records=chunk_records, max_errors=max_errors, allow_extra=allow_extra)


def input_refusal(exc: InputError, source: str | None = None) -> RecordValidationError:
    """An :class:`~rcea.audits.inputs.InputError` as the one-error validation failure every
    record reader raises (``FILE:line N: message``, or ``FILE:file: message``)."""
    where = "file" if exc.line is None else f"line {exc.line}"
    return RecordValidationError(
        [RecordError(source or exc.path or "<input>", where, exc.field, exc.message)]
    )


def checked_input(path: str | Path) -> Path:
    """``path`` if it is a readable regular file; ``FileNotFoundError`` when missing,
    ``RecordValidationError`` for a directory, FIFO, device or unreadable file."""
    try:
        return check_input_file(path)
    except InputError as exc:
        raise input_refusal(exc) from None


def _unsupported(path: Path) -> RecordValidationError:
    suffix = path.suffix.lower()
    return RecordValidationError(
        [
            RecordError(
                str(path), "file", None, f"unsupported file type {suffix!r}: use .jsonl or .parquet"
            )
        ]
    )


def records_from_rows(
    source: str,
    rows: list[dict[str, Any]],
    locations: list[str],
    *,
    max_errors: int = MAX_ERRORS,
) -> RecordBatch:
    """Validate records built in memory (by an importer) exactly as ``read_records``
    validates a file: ``rows[i]`` is reported at ``source:locations[i]``. Keys outside the
    record schema are refused; raises ``RecordValidationError`` naming every problem."""
    errs = ErrorCollector(source, max_errors)
    columns: dict[str, list[Any]] = {f: [] for f in SCALAR_FIELDS}
    token_lists: list[Any] = []
    for obj, loc in zip(rows, locations, strict=True):
        for key in obj:
            if key not in ALL_FIELDS:
                errs.add(loc, key, _UNKNOWN_FIELD)
        for name in SCALAR_FIELDS:
            columns[name].append(obj.get(name))
        token_lists.append(obj.get("token_entropies"))
    if not rows:
        errs.add("file", None, "no records in file")
    values, offsets, present = _pack_token_lists(token_lists, list(locations), errs)
    batch = RecordBatch(source, columns, list(locations), values, offsets, present)
    _validate(batch, errs)
    errs.raise_if_any()
    return batch


class ErrorCollector:
    def __init__(self, source: str, max_errors: int) -> None:
        self.source = source
        self.max_errors = max_errors
        self.errors: list[RecordError] = []

    def add(self, location: str, field_name: str | None, message: str) -> None:
        if len(self.errors) < self.max_errors:
            self.errors.append(RecordError(self.source, location, field_name, message))

    @property
    def full(self) -> bool:
        return len(self.errors) >= self.max_errors

    def raise_if_any(self) -> None:
        if self.errors:
            self.errors.sort(key=_location_key)
            raise RecordValidationError(self.errors, truncated=self.full)


def _location_key(err: RecordError) -> int:
    kind, _, number = err.location.partition(" ")
    return int(number) if number.isdigit() and kind in ("line", "row") else -1


def _read_jsonl(path: Path, *, max_errors: int, allow_extra: bool) -> RecordBatch:
    # The whole file as one chunk: one reader for both (parse errors do not stop field
    # validation of the lines that did parse: the user gets every problem in one run).
    return next(
        iter_jsonl_batches(
            path, chunk_records=sys.maxsize, max_errors=max_errors, allow_extra=allow_extra
        )
    )


def iter_jsonl_batches(
    path: str | Path,
    *,
    chunk_records: int,
    max_errors: int = MAX_ERRORS,
    allow_extra: bool = False,
) -> Iterator[RecordBatch]:
    """Read and validate a JSONL file ``chunk_records`` records at a time, so memory is
    bounded by the chunk, not the file. Each yielded batch is validated exactly as
    ``read_records`` validates a file (locations are the file's own line numbers); a chunk
    with problems raises ``RecordValidationError`` for that chunk. Checks that span chunks
    (a trajectory id or question text seen in an earlier chunk) are the caller's: the
    streaming ingest makes them against the rows it already wrote in its transaction."""
    if chunk_records < 1:
        raise ValueError("chunk_records must be at least 1")
    path = checked_input(path)
    source = str(path)
    first = True
    with closing(_lines_or_refusal(path)) as lines:  # the file closes with the reader
        while True:
            errs = ErrorCollector(source, max_errors)
            columns: dict[str, list[Any]] = {f: [] for f in SCALAR_FIELDS}
            locations: list[str] = []
            token_lists: list[Any] = []
            exhausted = True
            for lineno, line in lines:
                if not line.strip():
                    continue
                loc = f"line {lineno}"
                try:
                    obj = loads_json(line, source, line=lineno)
                except InputError as exc:
                    errs.add(loc, None, exc.message)
                    obj = None
                if obj is not None and not isinstance(obj, dict):
                    errs.add(loc, None, f"expected a JSON object, got {type(obj).__name__}")
                elif isinstance(obj, dict):
                    if not allow_extra:
                        for key in obj:
                            if key not in ALL_FIELDS:
                                errs.add(loc, key, _UNKNOWN_FIELD)
                    for name in SCALAR_FIELDS:
                        columns[name].append(obj.get(name))
                    token_lists.append(obj.get("token_entropies"))
                    locations.append(loc)
                if len(locations) >= chunk_records or errs.full:
                    exhausted = False
                    break
            if not locations and not errs.errors:
                if first:
                    errs.add("file", None, "no records in file")
                    errs.raise_if_any()
                return
            first = False
            values, offsets, present = _pack_token_lists(token_lists, locations, errs)
            batch = RecordBatch(source, columns, locations, values, offsets, present)
            _validate(batch, errs)
            errs.raise_if_any()
            yield batch
            if exhausted:
                return


def _lines_or_refusal(path: Path) -> Generator[tuple[int, str], None, None]:
    """The file's lines; a byte that is not UTF-8 ends the file as a validation error at
    its line and byte offset (nothing after it can be trusted)."""
    try:
        yield from iter_lines(path)
    except InputError as exc:
        raise input_refusal(exc, str(path)) from None


def _pack_token_lists(
    token_lists: list[Any], locations: list[str], errs: ErrorCollector
) -> tuple[np.ndarray[Any, Any] | None, np.ndarray[Any, Any] | None, np.ndarray[Any, Any] | None]:
    if all(t is None for t in token_lists):
        return None, None, None
    n = len(token_lists)
    lengths = np.zeros(n, dtype=np.int64)
    present = np.zeros(n, dtype=bool)
    chunks: list[np.ndarray[Any, Any]] = []
    for i, tok in enumerate(token_lists):
        if tok is None:
            continue
        if not isinstance(tok, list):
            errs.add(
                locations[i],
                "token_entropies",
                f"expected a list of floats, got {type(tok).__name__}",
            )
            continue
        try:
            arr = np.asarray(tok, dtype=np.float64)
        except (TypeError, ValueError):
            errs.add(locations[i], "token_entropies", "expected a list of numbers")
            continue
        if arr.ndim != 1:
            errs.add(locations[i], "token_entropies", "expected a flat list of numbers")
            continue
        present[i] = True
        lengths[i] = arr.size
        chunks.append(arr)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = np.concatenate(chunks) if chunks else np.zeros(0)
    return values, offsets, present


def _read_parquet(path: Path, *, max_errors: int, allow_extra: bool) -> RecordBatch:
    source = str(path)
    errs = ErrorCollector(source, max_errors)
    table = read_parquet_table(path)
    if table.num_rows == 0:
        errs.add("file", None, "no records in file")
    _parquet_columns(table.column_names, errs, allow_extra)
    return _parquet_batch(table, source, errs, 0)


def iter_parquet_batches(
    path: str | Path,
    *,
    chunk_records: int,
    max_errors: int = MAX_ERRORS,
    allow_extra: bool = False,
) -> Iterator[RecordBatch]:
    """``iter_jsonl_batches`` for Parquet: row groups read ``chunk_records`` rows at a time,
    each chunk validated as ``read_records`` validates a file (``row N`` of the file)."""
    if chunk_records < 1:
        raise ValueError("chunk_records must be at least 1")
    path = checked_input(path)
    source = str(path)
    errs = ErrorCollector(source, max_errors)
    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many types for corrupt files
        errs.add("file", None, f"cannot read Parquet: {exc}")
        errs.raise_if_any()
        raise  # unreachable
    _unique_columns(pf.schema_arrow.names, source)
    if pf.metadata.num_rows == 0:
        errs.add("file", None, "no records in file")
    _parquet_columns(pf.schema_arrow.names, errs, allow_extra)
    row0 = 0
    batches = pf.iter_batches(batch_size=chunk_records, use_threads=False)
    while True:
        try:
            rb = next(batches, None)
        except Exception as exc:  # noqa: BLE001 - a corrupt row group deep in the file
            errs.add(f"row {row0}", None, f"cannot read Parquet: {exc}")
            errs.raise_if_any()
            raise  # unreachable
        if rb is None:
            return
        table = pa.Table.from_batches([rb])
        yield _parquet_batch(table, source, ErrorCollector(source, max_errors), row0)
        row0 += table.num_rows


def read_parquet_table(path: str | Path) -> pa.Table:
    """A Parquet file as one table: checked as every input is (a regular, readable file),
    its columns named once each; anything pyarrow cannot read is a validation error."""
    path = checked_input(path)
    try:
        schema = pq.read_schema(path)
        _unique_columns(schema.names, str(path))
        return pq.read_table(path, use_threads=False)  # 2 cores: one for hashing
    except RecordValidationError:
        raise
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many types for corrupt files
        raise RecordValidationError(
            [RecordError(str(path), "file", None, f"cannot read Parquet: {exc}")]
        ) from None


def _unique_columns(names: list[str], source: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise RecordValidationError(
                [
                    RecordError(
                        source,
                        "file",
                        name,
                        "two columns have this name; rename or drop one",
                    )
                ]
            )
        seen.add(name)


def _parquet_columns(names: list[str], errs: ErrorCollector, allow_extra: bool) -> None:
    if not allow_extra:
        for name in names:
            if name not in ALL_FIELDS:
                errs.add(
                    "file",
                    name,
                    "unknown column (not in the record schema; --allow-extra ignores it)",
                )
    errs.raise_if_any()


def _parquet_batch(table: Any, source: str, errs: ErrorCollector, row0: int) -> RecordBatch:
    """Validate a table of Parquet rows ``row0 …`` of the file as one batch."""
    # pyarrow.compute alone takes about 0.2 s to import: only reading Parquet pays for it,
    # not every `rcea` command (they all import this module)
    import pyarrow.compute as pc

    n = table.num_rows
    locations = [f"row {i}" for i in range(row0, row0 + n)]
    columns: dict[str, list[Any]] = {}
    for name in SCALAR_FIELDS:
        if name in table.column_names:
            columns[name] = table.column(name).to_pylist()
        else:
            columns[name] = [None] * n
    values = offsets = present = None
    if "token_entropies" in table.column_names:
        col = table.column("token_entropies").combine_chunks()
        if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)):
            errs.add("file", "token_entropies", f"expected a list column, got {col.type}")
            errs.raise_if_any()
        element = col.type.value_type
        if not (
            pa.types.is_floating(element)
            or pa.types.is_integer(element)
            or pa.types.is_null(element)
        ):
            errs.add(
                "file",
                "token_entropies",
                f"expected a list of numbers, got a list of {element}",
            )
            errs.raise_if_any()
        present = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        lengths = np.asarray(pc.fill_null(pc.list_value_length(col), 0).to_numpy(), dtype=np.int64)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = pc.list_flatten(col)
        # Keep float32 input as float32 (half the memory); anything else becomes float64.
        target = pa.float32() if pa.types.is_float32(flat.type) else pa.float64()
        if flat.type != target:
            flat = flat.cast(target)
        if flat.null_count:
            flat = pc.fill_null(flat, math.nan)
        values = np.asarray(flat.to_numpy(zero_copy_only=False))
    batch = RecordBatch(source, columns, locations, values, offsets, present)
    _validate(batch, errs)
    errs.raise_if_any()
    return batch


# --------------------------------------------------------------------------- validation
# Column-wise: one cheap comprehension per field finds the bad rows; messages are built
# only for those. Errors are sorted by line/row when raised.


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _is_int(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return True
    return isinstance(v, float) and v.is_integer()


def _required_str(col: list[Any], name: str, locs: list[str], errs: ErrorCollector) -> None:
    bad = [i for i, v in enumerate(col) if type(v) is not str or not v.strip()]
    for i in bad:
        v = col[i]
        msg = "missing required field" if v is None else f"must be a non-empty string, got {v!r}"
        errs.add(locs[i], name, msg)


def _binary(
    col: list[Any], name: str, locs: list[str], errs: ErrorCollector, *, required: bool
) -> None:
    ok = (0, 1)
    bad = [i for i, v in enumerate(col) if not (type(v) is int and v in ok)]
    for i in bad:
        v = col[i]
        if v is None:
            if required:
                errs.add(locs[i], name, "missing required field")
        elif _is_int(v) and v in ok:
            col[i] = int(v)  # 1.0 from a float column is fine
        else:
            expected = "0 or 1" if required else "0, 1 or null"
            errs.add(locs[i], name, f"must be {expected}, got {v!r}")


def _integer(
    col: list[Any],
    name: str,
    locs: list[str],
    errs: ErrorCollector,
    *,
    required: bool,
    minimum: int | None,
    maximum: int = 2**63 - 1,
) -> None:
    lo = minimum if minimum is not None else -(2**63)
    bad = [i for i, v in enumerate(col) if not (type(v) is int and lo <= v <= maximum)]
    for i in bad:
        v = col[i]
        if v is None:
            if required:
                errs.add(locs[i], name, "missing required field")
        elif not _is_int(v):
            errs.add(locs[i], name, f"must be an integer, got {v!r}")
        elif v < lo:
            errs.add(locs[i], name, f"must be >= {lo}, got {v}")
        elif v > maximum:
            errs.add(locs[i], name, f"is out of range: {v} (the store keeps at most {maximum})")
        else:
            col[i] = int(v)


def finite_number(
    col: list[Any],
    name: str,
    locs: list[str],
    errs: ErrorCollector,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    what: str,
) -> None:
    lo = -math.inf if minimum is None else minimum
    hi = math.inf if maximum is None else maximum
    isfinite = math.isfinite
    bad = [
        i
        for i, v in enumerate(col)
        if v is not None and not (type(v) in (float, int) and isfinite(v) and lo <= v <= hi)
    ]
    for i in bad:
        errs.add(locs[i], name, f"{what}, got {col[i]!r}")


def _validate(batch: RecordBatch, errs: ErrorCollector) -> None:
    cols = batch.columns
    locs = batch.locations
    for name in ("trajectory_id", "question_id", "run", "model"):
        _required_str(cols[name], name, locs, errs)
    text = cols["text"]
    for i in [i for i, v in enumerate(text) if type(v) is not str or not v.strip()]:
        errs.add(
            locs[i],
            "text",
            "missing required field" if text[i] is None else "must be a non-empty string",
        )
    _binary(cols["reward"], "reward", locs, errs, required=True)
    _integer(cols["step"], "step", locs, errs, required=True, minimum=0, maximum=INT32_MAX)
    _integer(cols["seed"], "seed", locs, errs, required=True, minimum=None)
    _integer(
        cols["train_seed"], "train_seed", locs, errs, required=False, minimum=0, maximum=INT32_MAX
    )
    finite_number(
        cols["mean_token_entropy"],
        "mean_token_entropy",
        locs,
        errs,
        minimum=0.0,
        what="must be a finite number >= 0",
    )
    lp = cols["seq_logprob"]
    bad_lp = [
        i
        for i, v in enumerate(lp)
        if v is not None and not (type(v) in (float, int) and math.isfinite(v) and v <= 1e-6)
    ]
    for i in bad_lp:
        v = lp[i]
        finite = _is_number(v) and math.isfinite(v)
        msg = (
            f"a log-probability must be <= 0, got {v!r}"
            if finite
            else (f"must be a finite number, got {v!r}")
        )
        errs.add(locs[i], "seq_logprob", msg)
    _integer(cols["n_tokens"], "n_tokens", locs, errs, required=False, minimum=0, maximum=INT32_MAX)
    _binary(cols["validity"], "validity", locs, errs, required=False)
    for name in ("answer", "mode", "question", "ground_truth", "reward_extras"):
        col = cols[name]
        for i in [i for i, v in enumerate(col) if v is not None and type(v) is not str]:
            errs.add(locs[i], name, f"must be a string, got {col[i]!r}")
    for i, v in enumerate(cols["turns"]):
        if type(v) is str:
            try:
                parse_turns(v)
            except ValueError as exc:
                errs.add(locs[i], "turns", str(exc))
        elif v is not None:
            errs.add(locs[i], "turns", f"must be a string (a JSON array), got {v!r}")
    question = cols["question"]
    for i in [i for i, v in enumerate(question) if type(v) is str and not v.strip()]:
        errs.add(locs[i], "question", "must be a non-empty string (omit the field instead)")
    flags = cols["truncated"]
    for i, v in enumerate(flags):
        if v is None or type(v) is bool:
            continue
        if _is_int(v) and v in (0, 1):
            flags[i] = bool(v)
        else:
            errs.add(locs[i], "truncated", f"must be true, false, 0, 1 or null, got {v!r}")
    for name in ("sampling_temperature", "logprob_temperature"):
        finite_number(
            cols[name], name, locs, errs, minimum=1e-300, what="must be a finite number > 0"
        )
    finite_number(
        cols["sampling_top_p"],
        "sampling_top_p",
        locs,
        errs,
        minimum=1e-300,
        maximum=1.0,
        what="must be a number in (0, 1]",
    )
    split = cols["split"]
    for i in [i for i, v in enumerate(split) if v is not None and v not in SPLITS]:
        errs.add(locs[i], "split", f"must be one of {', '.join(SPLITS)}, got {split[i]!r}")
    for name in STRING_FIELDS:
        _control_chars(cols[name], name, locs, errs)
    for name, width in ID_WIDTHS.items():
        _id_text(cols[name], name, width, locs, errs)
    _duplicates(cols["trajectory_id"], locs, errs)
    _question_conflicts(cols["question_id"], question, locs, errs)
    _validate_tokens(batch, errs)


def forbidden_character(value: str) -> str | None:
    """Why ``value`` cannot be stored (its first C0 control character other than tab,
    line feed and carriage return, or lone surrogate, by code point and position), or
    None. Never quotes the value: a text must not be printed next to its provenance."""
    m = _FORBIDDEN_CHARS.search(value)
    if m is None:
        return None
    cp = ord(m.group())
    what = "a lone surrogate" if 0xD800 <= cp <= 0xDFFF else "a control character"
    return (
        f"contains {what} (U+{cp:04X}) at character {m.start()}; "
        "only tab, line feed and carriage return are allowed"
    )


def _id_text(col: list[Any], name: str, width: int, locs: list[str], errs: ErrorCollector) -> None:
    """An id or provenance name fits its store column on every engine (SQLite would keep
    what PostgreSQL refuses) and holds no invisible or bidirectional character."""
    for i, v in enumerate(col):
        if type(v) is not str:
            continue
        if len(v) > width:
            errs.add(locs[i], name, f"is {len(v)} characters long; the store keeps at most {width}")
            continue
        why = invisible_character(v) if not v.isascii() else None
        if why:
            errs.add(locs[i], name, why)


def _control_chars(col: list[Any], name: str, locs: list[str], errs: ErrorCollector) -> None:
    search = _FORBIDDEN_CHARS.search
    for i, v in enumerate(col):
        if type(v) is str and search(v) is not None:
            errs.add(locs[i], name, forbidden_character(v) or "")


def _duplicates(tids: list[Any], locs: list[str], errs: ErrorCollector) -> None:
    if len(set(tids)) == len(tids):
        return
    first_seen: dict[Any, str] = {}
    for i, tid in enumerate(tids):
        if not isinstance(tid, str):
            continue
        if tid in first_seen:
            errs.add(
                locs[i],
                "trajectory_id",
                f"duplicate trajectory_id {tid!r} (first at {first_seen[tid]})",
            )
        else:
            first_seen[tid] = locs[i]


def question_texts(batch: RecordBatch) -> dict[str, tuple[str, str]]:
    """question_id -> (question text, location of its first record) for the records that
    carry one (a validated batch gives every question id at most one text)."""
    out: dict[str, tuple[str, str]] = {}
    for qid, text, loc in zip(
        batch.columns["question_id"], batch.columns["question"], batch.locations, strict=True
    ):
        if type(text) is str and text.strip() and qid not in out:
            out[qid] = (text, loc)
    return out


def _question_conflicts(
    qids: list[Any], texts: list[Any], locs: list[str], errs: ErrorCollector
) -> None:
    """One question id, one problem statement: a second, different text is refused (it
    would show annotators and prompts another problem than the one solved)."""
    first: dict[Any, tuple[str, str]] = {}
    for i, (qid, text) in enumerate(zip(qids, texts, strict=True)):
        if type(text) is not str or not text.strip() or not isinstance(qid, str):
            continue
        seen = first.get(qid)
        if seen is None:
            first[qid] = (text, locs[i])
        elif seen[0] != text:
            errs.add(
                locs[i],
                "question",
                f"question_id {qid!r} already has a different question text "
                f"(first at {seen[1]}); one question id, one problem statement",
            )


def _validate_tokens(batch: RecordBatch, errs: ErrorCollector) -> None:
    values, offsets, present = batch.token_values, batch.token_offsets, batch.token_present
    if values is None or offsets is None or present is None:
        return
    cols = batch.columns
    locs = batch.locations
    bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        rows = np.unique(np.searchsorted(offsets, np.flatnonzero(bad), side="right") - 1)
        for r in rows[: errs.max_errors]:
            j = int(np.flatnonzero(bad[offsets[r] : offsets[r + 1]])[0])
            val = values[offsets[r] + j]
            errs.add(
                locs[r],
                "token_entropies",
                f"entry {j} is {val!r}: entropies must be finite and >= 0",
            )
        return
    lengths = np.diff(offsets)
    for r in np.flatnonzero(present & (lengths == 0)):
        errs.add(locs[r], "token_entropies", "empty list (omit the field instead)")
    with np.errstate(invalid="ignore", divide="ignore"):
        # A trailing 0 keeps every start index in range: rows without tokens at the end
        # of the file start at ``values.size`` (their sums are masked below).
        sums = np.add.reduceat(np.append(values, values.dtype.type(0)), offsets[:-1])
        means = np.where(lengths > 0, sums / np.maximum(lengths, 1), np.nan)
    n_col, m_col = cols["n_tokens"], cols["mean_token_entropy"]
    has = present & (lengths > 0)
    # Fill derived values where absent; compare where given.
    n_given = np.array([v is not None for v in n_col], dtype=bool)
    for r in np.flatnonzero(has & ~n_given):
        n_col[r] = int(lengths[r])
    for r in np.flatnonzero(has & n_given):
        if _is_int(n_col[r]) and int(n_col[r]) != lengths[r]:
            errs.add(
                locs[r], "n_tokens", f"is {n_col[r]} but token_entropies has {lengths[r]} entries"
            )
    m_given = np.array([v is not None for v in m_col], dtype=bool)
    for r in np.flatnonzero(has & ~m_given):
        m_col[r] = float(means[r])
    for r in np.flatnonzero(has & m_given):
        stored = m_col[r]
        if (
            _is_number(stored)
            and math.isfinite(stored)
            and not math.isclose(stored, float(means[r]), rel_tol=1e-4, abs_tol=1e-6)
        ):
            errs.add(
                locs[r],
                "mean_token_entropy",
                f"is {stored} but the mean of token_entropies is {means[r]:.6g}",
            )
