"""Multi-turn transcripts as turns (``rcea.pipeline.transcript``): cut at ChatML turn headers
with the special tokens kept or dropped, tool responses given the role ``tool``, end-of-turn
tokens stripped; the record field ``turns`` refused, naming file, line and field, when it
is not a JSON array of ``{"role", "content"}`` objects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rcea.pipeline.records import RecordValidationError, read_records
from rcea.pipeline.transcript import Turn, parse_turns, solution_text, split_transcript, turns_json
from tests.support.helpers import make_record, write_jsonl

WANT = [
    Turn("assistant", "<tool_call>calc(48/2)</tool_call>"),
    Turn("tool", "<tool_response>\n24\n</tool_response>"),
    Turn("assistant", "The answer is 72."),
]


def test_split_with_special_tokens_kept_and_dropped() -> None:
    kept = (
        "<tool_call>calc(48/2)</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n24\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\nThe answer is 72.<|im_end|>"
        "<|endoftext|>"
    )
    dropped = (
        "<tool_call>calc(48/2)</tool_call>\nuser\n<tool_response>\n24\n</tool_response>\n"
        "assistant\nThe answer is 72."
    )
    assert split_transcript(kept) == WANT
    assert split_transcript(dropped) == WANT
    assert split_transcript("one turn only") == [Turn("assistant", "one turn only")]
    # a user reply that is not only tool output keeps its role
    assert split_transcript("a\nuser\nplease go on\nassistant\nb")[1] == Turn(
        "user", "please go on"
    )


def test_turns_round_trip_and_judge_blocks() -> None:
    assert parse_turns(turns_json(WANT)) == WANT
    assert solution_text("flat", None) == "flat"
    assert solution_text("flat", turns_json(WANT)).startswith(
        '<turn role="assistant">\n<tool_call>'
    )
    assert solution_text("flat", turns_json(WANT)).count("</turn>") == 3


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("not json", "turns: not JSON"),
        ("[]", "turns: must be a non-empty JSON array"),
        ('[{"role": "assistant"}]', 'turns: turn 0: must be an object with exactly "role"'),
        ('[{"role": "robot", "content": "x"}]', "turns: turn 0: role must be one of"),
        ('[{"role": "tool", "content": 3}]', "turns: turn 0: content must be a string"),
        (["a list"], "turns: must be a string (a JSON array)"),
    ],
)
def test_bad_turns_field_names_file_line_and_field(
    tmp_path: Path, value: object, message: str
) -> None:
    path = write_jsonl(tmp_path / "r.jsonl", [make_record(0), make_record(1, turns=value)])
    with pytest.raises(RecordValidationError) as exc:
        read_records(path)
    assert f"{path}:line 2: {message}" in str(exc.value)


def test_good_turns_field_is_read(tmp_path: Path) -> None:
    rec = {**make_record(), "turns": json.dumps([{"role": "assistant", "content": "x"}])}
    batch = read_records(write_jsonl(tmp_path / "r.jsonl", [rec]))
    assert batch.columns["turns"] == [rec["turns"]]
