"""Import warns when a checkpoint's samples per question cannot reach K_min (no question
could be eligible for validity or mode numbers); nothing is refused."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from rcea.app.cli import app
from tests.support.helpers import make_record, write_jsonl

runner = CliRunner()


def test_ingest_warns_below_k_min(tmp_path: Path) -> None:
    few = [make_record(i, question_id=f"q{i % 4}", step=0) for i in range(12)]  # 3 per question
    many = [make_record(100 + i, question_id=f"q{i % 2}", step=5) for i in range(16)]  # 8
    path = write_jsonl(tmp_path / "s.jsonl", few + many)
    out = runner.invoke(app, ["ingest", str(path), "--study", "s", "--json"])
    assert out.exit_code == 0, out.output
    warnings = json.loads(out.stdout)["warnings"]
    assert warnings == [
        "grpo/tiny/step 0: at most 3 sample(s) per question, fewer than K_min = 8: no "
        "question can be eligible for validity or mode numbers"
    ]
    text = runner.invoke(app, ["ingest", str(path), "--study", "t"])
    assert text.exit_code == 0 and "warning: grpo/tiny/step 0: at most 3" in text.output
