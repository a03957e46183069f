"""Names too long for the store's columns, through the real ``rcea`` entry point, refused on
SQLite as PostgreSQL would refuse them (docs/store.md "Widths and ranges"): exit 1, one
line naming the option or field and the limit, strict JSON under ``--json``, and the store
as it was (``tests/study/store/test_widths.py`` proves every column guarded, on both
engines)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.app.cli.test_fuzz_inputs import RUBRIC, TEMPLATE, check_case, run_rcea
from tests.support.helpers import make_record

LONG = "n" * 201  # every name column of the store is 200 characters wide


def _rubric(tmp_path: Path, **fields: str) -> Path:
    text = RUBRIC
    for key, value in fields.items():
        old = {"name": 'name = "rcea-demo"', "version": 'version = "1"'}[key]
        text = text.replace(old, f'{key} = "{value}"', 1)
    path = tmp_path / "rubric.toml"
    path.write_text(text)
    return path


def _template(tmp_path: Path) -> Path:
    path = tmp_path / "template.toml"
    path.write_text(TEMPLATE)
    return path


@pytest.fixture
def kept(tmp_path: Path) -> None:
    """A store that holds one study already (a refusal must leave it as it is)."""
    records = tmp_path / "kept.jsonl"
    records.write_text("".join(json.dumps(make_record(i)) + "\n" for i in range(4)))
    code, out, err = run_rcea("ingest", str(records), "--study", "kept", "--json")
    assert code == 0, out + err


CASES = {
    "--study": (
        lambda tmp: ["ingest", str(tmp / "kept.jsonl"), "--study", LONG],
        "--study is 201 characters long; the store keeps at most 200",
    ),
    "rubric name": (
        lambda tmp: ["audit", "rubric", "freeze", str(_rubric(tmp, name=LONG))],
        "[rubric] name is 201 characters long; the store keeps at most 200",
    ),
    "rubric version": (
        lambda tmp: ["audit", "rubric", "freeze", str(_rubric(tmp, version="9" * 51))],
        "[rubric] version is 51 characters long; the store keeps at most 50",
    ),
    "judge --name": (
        lambda tmp: ["judge", "freeze", "--name", LONG, "--template", str(_template(tmp)),
                     "--model", "m"],
        "--name is 201 characters long; the store keeps at most 200",
    ),
    "--actor (the event log's column, named by the store)": (
        lambda tmp: ["audit", "rubric", "freeze", str(_rubric(tmp)), "--actor", LONG],
        ".frozen_by is 201 characters long; the store keeps at most 200",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_name_too_long_for_the_store_is_refused_on_sqlite(
    tmp_path: Path, kept: None, case: str
) -> None:
    args, message = CASES[case]
    code, doc = check_case(args(tmp_path))  # strict JSON, no traceback, store unchanged
    assert code == 1, doc
    assert message in doc["error"], doc
    assert "\n" not in doc["error"], doc
    code, out, err = run_rcea(*args(tmp_path))
    assert code == 1 and out == "", (out, err)
    assert err.count("\n") == 1 and message in err, err
