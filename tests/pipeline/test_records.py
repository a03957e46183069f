"""Record validation: every error names the file, the line/row and the field."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rcea.pipeline.records import RecordValidationError, read_records
from tests.support.helpers import make_record, write_jsonl


def _errors(path: Path) -> list[str]:
    with pytest.raises(RecordValidationError) as info:
        read_records(path)
    return [str(e) for e in info.value.errors]


def test_valid_file_reads_and_derives_token_summaries(tmp_path: Path) -> None:
    recs = [make_record(i, token_entropies=[0.5, 1.5]) for i in range(4)]
    batch = read_records(write_jsonl(tmp_path / "ok.jsonl", recs))
    assert len(batch) == 4 and batch.n_questions == 3
    assert batch.columns["mean_token_entropy"] == [1.0] * 4
    assert batch.columns["n_tokens"] == [2] * 4


def test_bad_json_line_3_and_missing_reward_line_5(tmp_path: Path) -> None:
    lines = [
        json.dumps(make_record(0)),
        json.dumps(make_record(1)),
        '{"trajectory_id": "t2",',
        json.dumps(make_record(3)),
    ]
    rec5 = make_record(4)
    del rec5["reward"]
    lines.append(json.dumps(rec5))
    path = write_jsonl(tmp_path / "bad.jsonl", lines)
    errs = _errors(path)
    assert any(e.startswith(f"{path}:line 3: invalid JSON") for e in errs), errs
    assert f"{path}:line 5: reward: missing required field" in errs


@pytest.mark.parametrize(
    ("override", "field", "fragment"),
    [
        ({"reward": 2}, "reward", "must be 0 or 1"),
        ({"reward": 0.5}, "reward", "must be 0 or 1"),
        ({"reward": True}, "reward", "must be 0 or 1"),
        ({"text": ""}, "text", "non-empty"),
        ({"text": "   "}, "text", "non-empty"),
        ({"run": None}, "run", "missing required field"),
        ({"model": ""}, "model", "non-empty string"),
        ({"step": -1}, "step", ">= 0"),
        ({"seed": "7"}, "seed", "integer"),
        ({"mean_token_entropy": math.nan}, "mean_token_entropy", "finite"),
        ({"mean_token_entropy": math.inf}, "mean_token_entropy", "finite"),
        ({"token_entropies": [0.1, math.nan]}, "token_entropies", "entry 1"),
        ({"token_entropies": [0.1, -math.inf]}, "token_entropies", "entry 1"),
        ({"token_entropies": []}, "token_entropies", "empty"),
        ({"token_entropies": [0.1], "n_tokens": 3}, "n_tokens", "1 entries"),
        ({"seq_logprob": 0.5}, "seq_logprob", "<= 0"),
        ({"validity": 3}, "validity", "0, 1 or null"),
        ({"split": "train"}, "split", "probe, eval"),
        ({"colour": "red"}, "colour", "unknown field"),
    ],
)
def test_field_errors_name_line_and_field(
    tmp_path: Path, override: dict, field: str, fragment: str
) -> None:
    rec = make_record(1)
    for k, v in override.items():
        if v is None:
            rec.pop(k, None)
        else:
            rec[k] = v
    path = tmp_path / "f.jsonl"
    # json.dumps writes NaN/Infinity literals, which is what broken producers emit.
    write_jsonl(path, [make_record(0), rec])
    errs = _errors(path)
    assert any(e.startswith(f"{path}:line 2: {field}:") and fragment in e for e in errs), errs


def test_missing_provenance_each_named(tmp_path: Path) -> None:
    rec = make_record(0)
    for key in ("run", "model", "step", "seed"):
        del rec[key]
    errs = _errors(write_jsonl(tmp_path / "p.jsonl", [rec]))
    for key in ("run", "model", "step", "seed"):
        assert any(f"line 1: {key}: missing required field" in e for e in errs)


def test_duplicate_ids_in_file(tmp_path: Path) -> None:
    errs = _errors(write_jsonl(tmp_path / "d.jsonl", [make_record(0), make_record(0)]))
    assert any("line 2: trajectory_id: duplicate" in e and "line 1" in e for e in errs)


def test_empty_file_and_wrong_suffix(tmp_path: Path) -> None:
    (tmp_path / "e.jsonl").write_text("\n")
    assert "no records" in _errors(tmp_path / "e.jsonl")[0]
    (tmp_path / "x.csv").write_text("a,b\n")
    assert "unsupported file type" in _errors(tmp_path / "x.csv")[0]
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_records(tmp_path / "missing.jsonl")


def test_parquet_rows_are_named(tmp_path: Path) -> None:
    recs = [make_record(i, token_entropies=[0.2, 0.4]) for i in range(3)]
    recs[2]["reward"] = 5
    recs[1]["token_entropies"] = [0.2, float("nan")]
    path = tmp_path / "r.parquet"
    pq.write_table(pa.Table.from_pylist(recs), path)
    errs = _errors(path)
    assert f"{path}:row 2: reward: must be 0 or 1, got 5" in errs
    assert any(e.startswith(f"{path}:row 1: token_entropies: entry 1") for e in errs)


def test_parquet_valid_roundtrip(tmp_path: Path) -> None:
    recs = [make_record(i, token_entropies=[0.1 * (i + 1)] * 3) for i in range(5)]
    recs[0]["token_entropies"] = None
    path = tmp_path / "ok.parquet"
    pq.write_table(pa.Table.from_pylist(recs), path)
    batch = read_records(path)
    assert len(batch) == 5
    assert batch.token_present is not None and batch.token_present.tolist() == [
        False,
        True,
        True,
        True,
        True,
    ]
    assert batch.columns["mean_token_entropy"][0] is None
    assert batch.columns["mean_token_entropy"][2] == pytest.approx(0.3)


def test_error_count_is_capped(tmp_path: Path) -> None:
    recs = [make_record(i, reward=7) for i in range(300)]
    with pytest.raises(RecordValidationError) as info:
        read_records(write_jsonl(tmp_path / "many.jsonl", recs))
    assert len(info.value.errors) == 100 and info.value.truncated


def test_sampling_fields_are_validated(tmp_path: Path) -> None:
    good = [
        make_record(0, truncated=True, sampling_temperature=0.7, sampling_top_p=0.9),
        make_record(1, truncated=0, logprob_temperature=0.7),
        make_record(2),
    ]
    cols = read_records(write_jsonl(tmp_path / "ok.jsonl", good)).columns
    assert cols["truncated"] == [True, False, None]
    assert cols["sampling_top_p"] == [0.9, None, None]
    bad = [
        make_record(0, truncated="yes"),
        make_record(1, sampling_top_p=1.5),
        make_record(2, sampling_temperature=0),
        make_record(3, logprob_temperature=-1.0),
    ]
    with pytest.raises(RecordValidationError) as exc:
        read_records(write_jsonl(tmp_path / "bad.jsonl", bad))
    msg = str(exc.value)
    assert "line 1: truncated: must be true, false, 0, 1 or null" in msg
    assert "line 2: sampling_top_p: must be a number in (0, 1]" in msg
    assert "line 3: sampling_temperature: must be a finite number > 0" in msg
    assert "line 4: logprob_temperature: must be a finite number > 0" in msg
