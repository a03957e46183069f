"""``rcea stats modes RECORDS`` (docs/estimators.md item 15) on the sample study: every
checkpoint's numbers equal rcea.audits.realization on the same trajectories selected here
independently, the base gets no retention, retention is W_t/W_0 of the same model's base,
and a file without ℓ is refused in one line (JSON under --json)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rcea.app.cli import app
from rcea.audits.realization import realization_retention, within_mode_entropy
from rcea.pipeline.sample_study import write_sample_study

runner = CliRunner()


def test_every_checkpoint_matches_the_estimator(tmp_path: Path) -> None:
    path = write_sample_study(tmp_path / "s.jsonl", seed=3)
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    out = runner.invoke(app, ["stats", "modes", str(path), "--k-min", "4", "--json"])
    assert out.exit_code == 0, out.output
    rows = {(r["run"], r["model"], r["step"]): r for r in json.loads(out.stdout)["checkpoints"]}
    assert rows and {r["model"] for r in rows.values()} == {recs[0]["model"]}
    reports = {}
    for key in rows:
        mine = [r for r in recs if (r["run"], r["model"], r["step"]) == key]
        rep = within_mode_entropy(
            [r["question_id"] for r in mine],
            [int(r["reward"] == 1 and r["validity"] == 1) for r in mine],
            [r["mode"] or "uncertain" for r in mine],
            [r["seq_logprob"] for r in mine],
            [float(np.mean(r["token_entropies"])) for r in mine],
            k_min=4,
        )
        reports[key] = rep
        for name in ("mode_entropy", "within_mode_entropy", "within_mode_token_entropy"):
            assert rows[key][name] == pytest.approx(getattr(rep, name), rel=1e-12), name
        assert rows[key]["coverage"] == rep.coverage
        assert abs(rows[key]["decomposition_residual"]) < 1e-9
    for key, row in rows.items():
        if key[2] == 0:
            assert row["realization_retention"] is None and row["base"] is None
        else:
            base = tuple(row["base"])
            assert base[1] == key[1] and base[2] == 0
            expect = realization_retention(reports[key], reports[base]).retention
            assert row["realization_retention"] == pytest.approx(expect)


def test_records_without_logprobs_are_refused_in_one_line(tmp_path: Path) -> None:
    path = write_sample_study(tmp_path / "s.jsonl", seed=3)
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    recs[5]["seq_logprob"] = None
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = runner.invoke(app, ["stats", "modes", str(path), "--json"])
    assert out.exit_code == 1
    err = json.loads(out.stdout)
    assert err["ok"] is False
    assert err["error"].startswith(f"{path}: trajectory {recs[5]['trajectory_id']!r} has no")
    assert "rcea probe score" in err["error"]
