# ruff: noqa: E501 - a table of exact messages, one per line
"""``rcea.pipeline.records`` validation pinned exactly, written from the mutants `make
mutation` left alive (docs/mutation.md): every message word for word with its line and
field, both edges of every range, the values a valid file is normalised to, the error
order and cap, and the Parquet paths."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rcea.pipeline.records import (
    RecordBatch,
    RecordError,
    RecordValidationError,
    question_texts,
    read_records,
    records_from_rows,
)
from tests.support.helpers import make_record, write_jsonl

CTRL = "only tab, line feed and carriage return are allowed"


def _errors(path: Path, **kw: Any) -> list[str]:
    with pytest.raises(RecordValidationError) as info:
        read_records(path, **kw)
    return [str(e) for e in info.value.errors]


def _line2(tmp_path: Path, **override: Any) -> list[str]:
    """Errors of a file whose line 2 is ``make_record(1)`` with ``override`` (``None``
    removes the field), relative to ``<path>:``."""
    rec = make_record(1)
    for k, v in override.items():
        if v is None:
            rec.pop(k, None)
        else:
            rec[k] = v
    path = write_jsonl(tmp_path / "f.jsonl", [make_record(0), rec])
    return [e.removeprefix(f"{path}:") for e in _errors(path)]


BAD: list[tuple[dict[str, Any], str]] = [
    ({"trajectory_id": None}, "trajectory_id: missing required field"),
    ({"trajectory_id": 5}, "trajectory_id: must be a non-empty string, got 5"),
    ({"question_id": "  "}, "question_id: must be a non-empty string, got '  '"),
    ({"run": None}, "run: missing required field"),
    ({"model": ""}, "model: must be a non-empty string, got ''"),
    ({"text": None}, "text: missing required field"),
    ({"text": " \n"}, "text: must be a non-empty string"),
    ({"text": 5}, "text: must be a non-empty string"),
    ({"reward": None}, "reward: missing required field"),
    ({"reward": 2}, "reward: must be 0 or 1, got 2"),
    ({"reward": 0.5}, "reward: must be 0 or 1, got 0.5"),
    ({"reward": True}, "reward: must be 0 or 1, got True"),
    ({"reward": "1"}, "reward: must be 0 or 1, got '1'"),
    ({"validity": 3}, "validity: must be 0, 1 or null, got 3"),
    ({"validity": -1.0}, "validity: must be 0, 1 or null, got -1.0"),
    ({"step": None}, "step: missing required field"),
    ({"step": -1}, "step: must be >= 0, got -1"),
    ({"step": 1.5}, "step: must be an integer, got 1.5"),
    ({"step": "3"}, "step: must be an integer, got '3'"),
    ({"step": True}, "step: must be an integer, got True"),
    ({"step": 2**63}, "step: is out of range: 9223372036854775808 (the store keeps at most 2147483647)"),
    ({"step": 2**31}, "step: is out of range: 2147483648 (the store keeps at most 2147483647)"),
    ({"seed": 2**63}, "seed: is out of range: 9223372036854775808 (the store keeps at most 9223372036854775807)"),
    ({"run": "r" * 201}, "run: is 201 characters long; the store keeps at most 200"),
    ({"trajectory_id": "t" * 301}, "trajectory_id: is 301 characters long; the store keeps at most 300"),
    ({"trajectory_id": "t1\u200b"}, "trajectory_id: contains an invisible or bidirectional character (U+200B) at character 2; remove it (ids and names must read as they compare)"),
    ({"run": "\u202egrpo"}, "run: contains an invisible or bidirectional character (U+202E) at character 0; remove it (ids and names must read as they compare)"),
    ({"seed": None}, "seed: missing required field"),
    ({"seed": -(2**63) - 1}, "seed: must be >= -9223372036854775808, got -9223372036854775809"),
    ({"n_tokens": -1}, "n_tokens: must be >= 0, got -1"),
    ({"n_tokens": 2.5}, "n_tokens: must be an integer, got 2.5"),
    ({"mean_token_entropy": math.nan}, "mean_token_entropy: must be a finite number >= 0, got nan"),
    ({"mean_token_entropy": -0.1}, "mean_token_entropy: must be a finite number >= 0, got -0.1"),
    ({"mean_token_entropy": "1"}, "mean_token_entropy: must be a finite number >= 0, got '1'"),
    ({"mean_token_entropy": True}, "mean_token_entropy: must be a finite number >= 0, got True"),
    ({"seq_logprob": 0.5}, "seq_logprob: a log-probability must be <= 0, got 0.5"),
    ({"seq_logprob": 2e-6}, "seq_logprob: a log-probability must be <= 0, got 2e-06"),
    ({"seq_logprob": math.nan}, "seq_logprob: must be a finite number, got nan"),
    ({"seq_logprob": -math.inf}, "seq_logprob: must be a finite number, got -inf"),
    ({"seq_logprob": "x"}, "seq_logprob: must be a finite number, got 'x'"),
    ({"seq_logprob": True}, "seq_logprob: must be a finite number, got True"),
    ({"answer": 5}, "answer: must be a string, got 5"),
    ({"mode": 1}, "mode: must be a string, got 1"),
    ({"question": 5}, "question: must be a string, got 5"),
    ({"question": " \n"}, "question: must be a non-empty string (omit the field instead)"),
    ({"truncated": "yes"}, "truncated: must be true, false, 0, 1 or null, got 'yes'"),
    ({"truncated": 2}, "truncated: must be true, false, 0, 1 or null, got 2"),
    ({"sampling_temperature": 0}, "sampling_temperature: must be a finite number > 0, got 0"),
    ({"sampling_temperature": math.inf}, "sampling_temperature: must be a finite number > 0, got inf"),
    ({"logprob_temperature": -1.0}, "logprob_temperature: must be a finite number > 0, got -1.0"),
    ({"sampling_top_p": 1.5}, "sampling_top_p: must be a number in (0, 1], got 1.5"),
    ({"sampling_top_p": 0}, "sampling_top_p: must be a number in (0, 1], got 0"),
    ({"split": "train"}, "split: must be one of probe, eval, got 'train'"),
    ({"colour": "red"}, "colour: unknown field (not in the record schema; --allow-extra ignores it)"),
    ({"text": "a\x00b"}, f"text: contains a control character (U+0000) at character 1; {CTRL}"),
    ({"question": "ab\x1f"}, f"question: contains a control character (U+001F) at character 2; {CTRL}"),
    ({"answer": "\x0b"}, f"answer: contains a control character (U+000B) at character 0; {CTRL}"),
    ({"mode": "x\ud800"}, f"mode: contains a lone surrogate (U+D800) at character 1; {CTRL}"),
    ({"run": "r\udfff"}, f"run: contains a lone surrogate (U+DFFF) at character 1; {CTRL}"),
    ({"token_entropies": "x"}, "token_entropies: expected a list of floats, got str"),
    ({"token_entropies": ["a"]}, "token_entropies: expected a list of numbers"),
    ({"token_entropies": [[1.0, 2.0]]}, "token_entropies: expected a flat list of numbers"),
    ({"token_entropies": []}, "token_entropies: empty list (omit the field instead)"),
    ({"token_entropies": [0.1, -0.5]}, "token_entropies: entry 1 is np.float64(-0.5): entropies must be finite and >= 0"),
    ({"token_entropies": [0.1, 0.2, math.nan]}, "token_entropies: entry 2 is np.float64(nan): entropies must be finite and >= 0"),
    ({"token_entropies": [0.1], "n_tokens": 3}, "n_tokens: is 3 but token_entropies has 1 entries"),
    ({"token_entropies": [1.0, 2.0], "mean_token_entropy": 1.6}, "mean_token_entropy: is 1.6 but the mean of token_entropies is 1.5"),
]  # fmt: skip


@pytest.mark.parametrize(("override", "message"), BAD, ids=[m for _, m in BAD])
def test_each_field_error_exactly(tmp_path: Path, override: dict[str, Any], message: str) -> None:
    assert _line2(tmp_path, **override) == [f"line 2: {message}"]


def test_edges_and_normalised_values(tmp_path: Path) -> None:
    recs = [
        make_record(0, reward=1.0, validity=0.0, step=2.0, n_tokens=0, truncated=1),
        make_record(1, seed=-(2**63), step=0, seq_logprob=1e-6, truncated=0.0, validity=None),
        make_record(2, seed=2**63 - 1, step=2**31 - 1, mean_token_entropy=0, sampling_top_p=1.0),
        make_record(3, sampling_temperature=1e-300, logprob_temperature=1e-300, split="eval"),
        make_record(4, text="\t\n\r ok", mode="", split="probe", truncated=False),
        make_record(5, token_entropies=[1.0, 2.0], mean_token_entropy=1.50001, n_tokens=2.0),
        make_record(6, step=0.0, seed=200.0),  # whole floats at the edge and past 2 * 63
    ]
    cols = read_records(write_jsonl(tmp_path / "ok.jsonl", recs)).columns
    assert cols["reward"] == [1, 1, 0, 1, 0, 1, 0]
    assert [type(v) for v in cols["reward"]] == [int] * 7
    assert cols["validity"] == [0, None, None, None, None, None, None]
    assert type(cols["validity"][0]) is int
    assert cols["step"] == [2, 0, 2**31 - 1, 0, 0, 0, 0]
    assert type(cols["step"][0]) is int
    assert cols["seed"] == [0, -(2**63), 2**63 - 1, 3, 4, 5, 200]
    assert type(cols["step"][6]) is int and type(cols["seed"][6]) is int
    assert cols["truncated"] == [True, False, None, None, False, None, None]
    assert [type(v) for v in cols["truncated"][:2]] == [bool, bool]
    assert cols["n_tokens"] == [0, None, None, None, None, 2.0, None]
    assert cols["mean_token_entropy"] == [None, None, 0, None, None, 1.50001, None]


def test_derived_token_summaries(tmp_path: Path) -> None:
    recs = [make_record(0, token_entropies=[0.5, 1.0, 3.0]), make_record(1)]
    batch = read_records(write_jsonl(tmp_path / "t.jsonl", recs))
    assert batch.columns["n_tokens"] == [3, None]
    assert type(batch.columns["n_tokens"][0]) is int
    assert batch.columns["mean_token_entropy"] == [1.5, None]
    assert batch.token_present.tolist() == [True, False]
    assert batch.token_offsets.tolist() == [0, 3, 3]
    assert batch.token_values.tolist() == [0.5, 1.0, 3.0]


def test_file_level_errors_exactly(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "p.jsonl", [make_record(0), "[1]", "{bad", "", "7"])
    try:
        json.loads("{bad")
    except json.JSONDecodeError as exc:
        bad = f"invalid JSON ({exc.msg} at column {exc.colno})"
    assert _errors(path) == [
        f"{path}:line 2: expected a JSON object, got list",
        f"{path}:line 3: {bad}",
        f"{path}:line 5: expected a JSON object, got int",
    ]
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n  \n")
    assert _errors(blank) == [f"{blank}:file: no records in file"]
    csv = tmp_path / "x.csv"
    csv.write_text("a\n")
    assert _errors(csv) == [f"{csv}:file: unsupported file type '.csv': use .jsonl or .parquet"]
    with pytest.raises(FileNotFoundError, match=f"^{tmp_path / 'none.jsonl'}: no such file$"):
        read_records(tmp_path / "none.jsonl")


def test_suffixes_and_extra_fields(tmp_path: Path) -> None:
    for name in ("a.JSONL", "a.json", "a.ndjson"):
        assert len(read_records(write_jsonl(tmp_path / name, [make_record(0)]))) == 1
    path = write_jsonl(tmp_path / "x.jsonl", [make_record(0, colour="red")])
    assert len(read_records(path, allow_extra=True)) == 1
    crlf = tmp_path / "crlf.jsonl"
    crlf.write_bytes((json.dumps(make_record(0)) + "\r\n").encode())
    assert read_records(crlf).columns["trajectory_id"] == ["t00000"]


def test_duplicates_name_the_first_line(tmp_path: Path) -> None:
    recs = [make_record(0), make_record(1), make_record(0), make_record(0)]
    path = write_jsonl(tmp_path / "d.jsonl", recs)
    assert _errors(path) == [
        f"{path}:line 3: trajectory_id: duplicate trajectory_id 't00000' (first at line 1)",
        f"{path}:line 4: trajectory_id: duplicate trajectory_id 't00000' (first at line 1)",
    ]


def test_errors_sorted_by_number_file_first(tmp_path: Path) -> None:
    recs: list[Any] = [make_record(i) for i in range(12)]
    recs[9]["reward"] = 5
    recs[1]["step"] = -1
    recs[10]["zz"] = 1
    path = write_jsonl(tmp_path / "o.jsonl", recs)
    assert _errors(path) == [
        f"{path}:line 2: step: must be >= 0, got -1",
        f"{path}:line 10: reward: must be 0 or 1, got 5",
        f"{path}:line 11: zz: unknown field (not in the record schema; --allow-extra ignores it)",
    ]


def test_error_cap_and_summary(tmp_path: Path) -> None:
    recs = [make_record(i, reward=7) for i in range(25)]
    path = write_jsonl(tmp_path / "m.jsonl", recs)
    with pytest.raises(RecordValidationError) as info:
        read_records(path)
    err = info.value
    assert len(err.errors) == 25 and not err.truncated
    lines = str(err).split("\n")
    assert lines[0] == "25 invalid record(s):"
    assert lines[1] == f"{path}:line 1: reward: must be 0 or 1, got 7"
    assert lines[20] == f"{path}:line 20: reward: must be 0 or 1, got 7"
    assert lines[21:] == ["... and 5 more"]
    with pytest.raises(RecordValidationError) as info:
        read_records(path, max_errors=3)
    assert [e.location for e in info.value.errors] == ["line 1", "line 2", "line 3"]
    assert info.value.truncated
    assert str(info.value).split("\n")[-1] == "(stopped after 100 errors)"
    with pytest.raises(RecordValidationError) as info:
        read_records(write_jsonl(tmp_path / "two.jsonl", recs[:2]), max_errors=3)
    assert len(info.value.errors) == 2 and not info.value.truncated
    assert str(info.value).split("\n")[-1].endswith("got 7")
    exactly20 = RecordValidationError([RecordError("f", f"line {i}", None, "m") for i in range(20)])
    assert str(exactly20).split("\n")[-1] == "f:line 19: m"


def test_record_error_forms() -> None:
    e = RecordError("f.jsonl", "line 3", "step", "bad")
    assert str(e) == "f.jsonl:line 3: step: bad"
    assert str(RecordError("f.jsonl", "file", None, "empty")) == "f.jsonl:file: empty"
    assert e.to_dict() == {
        "file": "f.jsonl",
        "location": "line 3",
        "field": "step",
        "message": "bad",
    }


def test_rows_and_question_count(tmp_path: Path) -> None:
    batch = read_records(write_jsonl(tmp_path / "r.jsonl", [make_record(i) for i in range(4)]))
    assert batch.n_questions == 3
    rows = list(batch.rows())
    assert len(rows) == 4 and rows[3]["trajectory_id"] == "t00003"
    assert rows[3]["question_id"] == "q0" and rows[3]["seq_logprob"] is None


# --------------------------------------------------------------------------- Parquet


def _parquet(tmp_path: Path, table: pa.Table, name: str = "r.parquet") -> Path:
    path = tmp_path / name
    pq.write_table(table, path)
    return path


def test_parquet_file_level_errors(tmp_path: Path) -> None:
    extra = _parquet(tmp_path, pa.Table.from_pylist([make_record(0, colour="red")]))
    assert _errors(extra) == [
        f"{extra}:file: colour: unknown column (not in the record schema; --allow-extra ignores it)"
    ]
    assert len(read_records(extra, allow_extra=True)) == 1
    empty = _parquet(tmp_path, pa.Table.from_pylist([make_record(0)]).slice(0, 0), "e.parquet")
    assert _errors(empty) == [f"{empty}:file: no records in file"]
    broken = tmp_path / "b.parquet"
    broken.write_bytes(b"not parquet")
    (msg,) = _errors(broken)
    assert msg.startswith(f"{broken}:file: cannot read Parquet: ")
    scalar = _parquet(tmp_path, pa.Table.from_pylist([make_record(0, token_entropies=0.5)]), "s.pq")
    assert _errors(scalar) == [
        f"{scalar}:file: token_entropies: expected a list column, got double"
    ]


def test_parquet_rows_and_tokens(tmp_path: Path) -> None:
    recs = [make_record(i, token_entropies=[0.5, 1.5]) for i in range(3)]
    recs[1]["token_entropies"] = None
    recs[2]["token_entropies"] = [0.5, None]
    recs[0]["step"] = -4
    path = _parquet(tmp_path, pa.Table.from_pylist(recs))
    assert _errors(path) == [
        f"{path}:row 0: step: must be >= 0, got -4",
        f"{path}:row 2: token_entropies: entry 1 is np.float64(nan): entropies must be finite and >= 0",
    ]
    recs[2]["token_entropies"] = [0.5, 2.5]
    path = _parquet(tmp_path, pa.Table.from_pylist(recs), "r2.parquet")
    assert _errors(path) == [f"{path}:row 0: step: must be >= 0, got -4"]
    recs[0]["step"] = 4
    batch = read_records(_parquet(tmp_path, pa.Table.from_pylist(recs), "ok.parquet"))
    assert batch.locations == ["row 0", "row 1", "row 2"]
    assert batch.token_present.tolist() == [True, False, True]
    assert batch.token_offsets.tolist() == [0, 2, 2, 4]
    assert batch.columns["mean_token_entropy"] == [1.0, None, 1.5]
    assert batch.columns["n_tokens"] == [2, None, 2]
    assert batch.token_values.dtype == np.float64


def test_parquet_float32_tokens_stay_float32(tmp_path: Path) -> None:
    recs = [make_record(i) for i in range(2)]
    table = pa.Table.from_pylist(recs).append_column(
        "token_entropies", pa.array([[0.25, 0.75], [1.0]], type=pa.list_(pa.float32()))
    )
    batch = read_records(_parquet(tmp_path, table))
    assert batch.token_values.dtype == np.float32
    assert batch.token_values.tolist() == [0.25, 0.75, 1.0]
    assert batch.columns["mean_token_entropy"] == [0.5, 1.0]


def test_parquet_errors_sorted_by_row(tmp_path: Path) -> None:
    """Fields are checked column by column (reward before step), the errors come out by
    row."""
    recs = [make_record(i) for i in range(3)]
    recs[2]["reward"] = 5
    recs[0]["step"] = -4
    path = _parquet(tmp_path, pa.Table.from_pylist(recs))
    assert _errors(path) == [
        f"{path}:row 0: step: must be >= 0, got -4",
        f"{path}:row 2: reward: must be 0 or 1, got 5",
    ]


def test_one_error_past_twenty_is_counted(tmp_path: Path) -> None:
    recs = [make_record(i, reward=7) for i in range(21)]
    with pytest.raises(RecordValidationError) as info:
        read_records(write_jsonl(tmp_path / "m.jsonl", recs))
    assert str(info.value).split("\n")[-1] == "... and 1 more"


# --------------------------------------------------------------------------- readers


def test_reading_stops_at_the_cap_and_still_raises(tmp_path: Path) -> None:
    """Parse errors fill the cap while reading: reading stops there, and the file is
    still refused (not returned half-read)."""
    path = write_jsonl(tmp_path / "c.jsonl", ["[1]", "[2]", "[3]", make_record(0)])
    with pytest.raises(RecordValidationError) as info:
        read_records(path, max_errors=2)
    assert [str(e) for e in info.value.errors] == [
        f"{path}:line 1: expected a JSON object, got list",
        f"{path}:line 2: expected a JSON object, got list",
    ]
    assert info.value.truncated


def test_only_the_line_end_is_stripped(tmp_path: Path) -> None:
    """A JSON line ends at ``\\n``: trailing characters other than JSON whitespace (here a
    unit separator and an ``X``) are invalid JSON, not stripped."""
    good = json.dumps(make_record(0))
    path = write_jsonl(tmp_path / "s.jsonl", [good + "\x1f", good + "X", good + " \t"])
    n = len(good) + 1
    assert _errors(path) == [
        f"{path}:line 1: invalid JSON (Extra data at column {n})",
        f"{path}:line 2: invalid JSON (Extra data at column {n})",
    ]


def test_token_lists_after_a_record_without_tokens(tmp_path: Path) -> None:
    recs = [
        make_record(0),
        make_record(1, token_entropies=[0.5, 1.5]),
        make_record(2),
        make_record(3, token_entropies=[2.0]),
    ]
    batch = read_records(write_jsonl(tmp_path / "t.jsonl", recs))
    assert batch.token_present.tolist() == [False, True, False, True]
    assert batch.token_offsets.tolist() == [0, 0, 2, 2, 3]
    assert batch.token_offsets.dtype == np.int64
    assert batch.token_values.tolist() == [0.5, 1.5, 2.0]
    assert batch.columns["n_tokens"] == [None, 2, None, 1]
    assert batch.columns["mean_token_entropy"] == [None, 1.0, None, 2.0]
    bad = write_jsonl(tmp_path / "b.jsonl", [make_record(0), make_record(1, token_entropies="x")])
    assert _errors(bad) == [f"{bad}:line 2: token_entropies: expected a list of floats, got str"]


def test_parquet_integer_tokens_become_float64(tmp_path: Path) -> None:
    recs = [make_record(0, token_entropies=[1, 2]), make_record(1, token_entropies=[3])]
    path = _parquet(tmp_path, pa.Table.from_pylist(recs))
    batch = read_records(path)
    assert batch.source == str(path)
    assert batch.token_values.dtype == np.float64
    assert batch.token_values.tolist() == [1.0, 2.0, 3.0]
    assert batch.columns["mean_token_entropy"] == [1.5, 3.0]
    recs[1]["token_entropies"] = [3, -1]
    neg = _parquet(tmp_path, pa.Table.from_pylist(recs), "n.parquet")
    assert _errors(neg) == [
        f"{neg}:row 1: token_entropies: entry 1 is np.float64(-1.0): entropies must be finite and >= 0"
    ]


def test_finite_without_bounds_takes_every_finite_number() -> None:
    """``finite_number``'s defaults: no minimum and no maximum means any finite number."""
    from rcea.pipeline.records import ErrorCollector, finite_number

    errs = ErrorCollector("f", 10)
    col = [-1e308, 0, 1e308, None, math.inf, -math.inf]
    finite_number(col, "x", [f"line {i}" for i in range(6)], errs, what="must be finite")
    assert [str(e) for e in errs.errors] == [
        "f:line 4: x: must be finite, got inf",
        "f:line 5: x: must be finite, got -inf",
    ]


def test_one_question_id_one_question_text(tmp_path: Path) -> None:
    """Records without a question text, or without a question id, are skipped (not
    compared, and they do not end the scan)."""
    recs = [
        make_record(9),  # q0 without a text
        make_record(0, question="What is 2+3?"),
        make_record(3, question="What is 2+3?"),  # q0 again, the same text
        make_record(6, question="What is 2+4?"),  # q0, another text
        make_record(1, question="What is 1+1?"),
        make_record(10, question="A"),
        make_record(11, question="B"),
    ]
    del recs[5]["question_id"], recs[6]["question_id"]
    path = write_jsonl(tmp_path / "q.jsonl", recs)
    assert _errors(path) == [
        f"{path}:line 4: question: question_id 'q0' already has a different question text "
        "(first at line 2); one question id, one problem statement",
        f"{path}:line 6: question_id: missing required field",
        f"{path}:line 7: question_id: missing required field",
    ]


def test_duplicates_past_a_missing_trajectory_id(tmp_path: Path) -> None:
    recs = [make_record(0), make_record(1), make_record(1)]
    del recs[0]["trajectory_id"]
    path = write_jsonl(tmp_path / "d.jsonl", recs)
    assert _errors(path) == [
        f"{path}:line 1: trajectory_id: missing required field",
        f"{path}:line 3: trajectory_id: duplicate trajectory_id 't00001' (first at line 2)",
    ]


def test_token_entropy_edges(tmp_path: Path) -> None:
    """0 is a valid entropy; a bad first entry is reported on its own line, also after
    a record without tokens (the row is found from the offsets)."""
    ok = read_records(write_jsonl(tmp_path / "z.jsonl", [make_record(0, token_entropies=[0.0, 0])]))
    assert ok.columns["mean_token_entropy"] == [0.0]
    recs = [
        make_record(0, token_entropies=[0.5]),
        make_record(1),
        make_record(2, token_entropies=[-1.0, 0.5]),
        make_record(3, token_entropies=[math.inf]),
    ]
    path = write_jsonl(tmp_path / "b.jsonl", recs)
    assert _errors(path) == [
        f"{path}:line 3: token_entropies: entry 0 is np.float64(-1.0): entropies must be finite and >= 0",
        f"{path}:line 4: token_entropies: entry 0 is np.float64(inf): entropies must be finite and >= 0",
    ]


def test_every_bad_token_list_is_reported(tmp_path: Path) -> None:
    """A refused token list does not stop the packing of the next ones."""
    recs = [
        make_record(0, token_entropies="x"),
        make_record(1, token_entropies=["a"]),
        make_record(2, token_entropies=[[1.0]]),
        make_record(3, token_entropies=[-1.0]),
        make_record(4, token_entropies=5),
    ]
    path = write_jsonl(tmp_path / "b.jsonl", recs)
    assert _errors(path) == [
        f"{path}:line 1: token_entropies: expected a list of floats, got str",
        f"{path}:line 2: token_entropies: expected a list of numbers",
        f"{path}:line 3: token_entropies: expected a flat list of numbers",
        f"{path}:line 4: token_entropies: entry 0 is np.float64(-1.0): entropies must be finite and >= 0",
        f"{path}:line 5: token_entropies: expected a list of floats, got int",
    ]


def test_token_summaries_only_where_tokens_are(tmp_path: Path) -> None:
    """``n_tokens``/``mean_token_entropy`` are compared with the tokens only on rows that
    have tokens: a token-less row keeps its own, an empty list reports only itself."""
    recs = [
        make_record(0, token_entropies=[0.5]),
        make_record(1, n_tokens=5, mean_token_entropy=2.5),
        make_record(2, token_entropies=[0.0, 1e-6], mean_token_entropy=0.0, n_tokens=2),
    ]
    batch = read_records(write_jsonl(tmp_path / "ok.jsonl", recs))
    assert batch.columns["n_tokens"] == [1, 5, 2]
    assert batch.columns["mean_token_entropy"] == [0.5, 2.5, 0.0]
    recs[1] = make_record(1, token_entropies=[], n_tokens=3, mean_token_entropy=1.0)
    path = write_jsonl(tmp_path / "e.jsonl", recs)
    assert _errors(path) == [f"{path}:line 2: token_entropies: empty list (omit the field instead)"]


# --------------------------------------------------------------------------- in memory


def _rows_errors(rows: list[dict[str, Any]], locs: list[str], **kw: Any) -> list[str]:
    with pytest.raises(RecordValidationError) as info:
        records_from_rows("mem.csv", rows, locs, **kw)
    return [str(e) for e in info.value.errors]


def test_records_from_rows_messages_exactly() -> None:
    """An importer's rows are refused like a file's lines: an unknown key at its row and
    field, no rows at ``file``, a bad token list at its row (the importers map only
    known fields, so only a direct caller reaches the first)."""
    rows = [make_record(0), make_record(1, extra=1), make_record(2, token_entropies="x")]
    assert _rows_errors(rows, ["row 2", "row 3", "row 4"]) == [
        "mem.csv:row 3: extra: unknown field (not in the record schema; --allow-extra ignores it)",
        "mem.csv:row 4: token_entropies: expected a list of floats, got str",
    ]
    assert _rows_errors([], []) == ["mem.csv:file: no records in file"]
    with pytest.raises(RecordValidationError) as info:
        records_from_rows("mem.csv", [], [])
    assert info.value.errors[0].location == "file" and info.value.errors[0].field is None


def test_records_from_rows_lengths_must_match() -> None:
    """One location per row: a missing one is an error, not a silently dropped row."""
    with pytest.raises(ValueError, match="zip"):
        records_from_rows("mem.csv", [make_record(0), make_record(1)], ["row 2"])
    with pytest.raises(ValueError, match="zip"):
        records_from_rows("mem.csv", [make_record(0)], ["row 2", "row 3"])


def test_records_from_rows_batch() -> None:
    locs = ["row 2", "row 3"]
    batch = records_from_rows(
        "mem.csv", [make_record(0, token_entropies=[0.5, 1.5]), make_record(1)], locs
    )
    assert batch.source == "mem.csv" and batch.locations == locs
    assert batch.token_offsets is not None and batch.token_offsets.tolist() == [0, 2, 2]
    assert batch.token_present is not None and batch.token_present.tolist() == [True, False]
    assert batch.columns["n_tokens"] == [2, None]


def test_question_texts_first_text_per_question() -> None:
    """question id -> (its first non-blank text, that record's location); records
    without a string text are skipped (a batch built by hand, as validation refuses
    blank texts)."""
    qids = ["q0", "q0", "q0", "q0", "q1", "q2"]
    texts = [None, "  ", 5, "What is 2+3?", "What is 1+1?", "\n"]
    batch = RecordBatch(
        "mem.csv",
        {"question_id": qids, "question": texts},
        [f"line {i}" for i in range(1, 7)],
    )
    batch.columns["question_id"].insert(4, "q0")
    batch.columns["question"].insert(4, "Another")
    batch.locations.append("line 7")
    assert question_texts(batch) == {
        "q0": ("What is 2+3?", "line 4"),
        "q1": ("What is 1+1?", "line 6"),
    }
    batch.locations.pop()
    with pytest.raises(ValueError, match="zip"):
        question_texts(batch)
