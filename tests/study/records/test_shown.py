"""What the annotators' tasks are built from (``rcea.study.records.shown``): a stored
multi-turn transcript comes back as its turns, rendered one block per turn in a task; a
single-turn trajectory as its text."""

from __future__ import annotations

import json
from pathlib import Path

from rcea.annotation.validity_tasks import build_validity_task
from rcea.study.records.ingest import ingest_file
from rcea.study.records.shown import shown_solutions
from rcea.study.store import make_engine, require_study, session_scope
from tests.support.helpers import make_record, write_jsonl

TURNS = [
    {"role": "assistant", "content": "<tool_call>calc(2+3)</tool_call>"},
    {"role": "tool", "content": "<tool_response>5</tool_response>"},
    {"role": "assistant", "content": "The answer is 5."},
]


def test_transcripts_come_back_as_turns(store_url: str, tmp_path: Path) -> None:
    recs = [make_record(0, turns=json.dumps(TURNS)), make_record(1)]
    path = write_jsonl(tmp_path / "r.jsonl", recs)
    eng = make_engine(store_url)
    try:
        ingest_file(eng, path, study="s", artifacts_dir=tmp_path / "a", data_dir=tmp_path)
        with session_scope(eng) as s:
            sid = require_study(s, name="s").id
            shown = shown_solutions(s, study_id=sid, trajectory_ids=["t00000", "t00001"])
    finally:
        eng.dispose()
    assert shown["t00001"] == recs[1]["text"]
    assert [tuple(t) for t in shown["t00000"]] == [(t["role"], t["content"]) for t in TURNS]
    html = build_validity_task("v", "What is 2+3?", shown["t00000"])["solution_html"]
    assert html.count('<div class="turn">') == 3
