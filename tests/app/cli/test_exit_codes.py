"""Exit statuses (rcea/app/cli/exit_codes.py): a decided, failed gate or check exits FAILED (5),
distinct from an error (1), a refusal (2) and an unreachable service (3); ``--json``
carries the same outcome."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rcea.app.cli import app
from rcea.app.cli import exit_codes as ec
from tests.support.helpers import RUBRIC
from tests.support.pair_audit import FAILING_GATE, drawn_and_labelled, study_with_rubric

runner = CliRunner()


def test_codes_are_distinct() -> None:
    codes = [ec.OK, ec.ERROR, ec.REFUSED, ec.SERVICE_UNREACHABLE, ec.CODEBOOK_UNANSWERED, ec.FAILED]
    assert len(set(codes)) == len(codes) and ec.FAILED == 5
    assert (ec.outcome_code(True), ec.outcome_code(None), ec.outcome_code(False)) == (0, 0, 5)


@pytest.mark.parametrize(
    ("extra", "code", "outcome"), [("", 0, "passed"), (FAILING_GATE, 5, "failed")]
)
def test_audit_gate_final_exit_code(  # type: ignore[no-untyped-def]
    engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: str, code: int, outcome: str
) -> None:
    study_with_rubric(engine, tmp_path, RUBRIC + extra)
    drawn_and_labelled(engine)
    monkeypatch.setenv("RCEA_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    prelim = runner.invoke(app, ["audit", "gate", "--json"])
    assert prelim.exit_code == 0, prelim.output
    assert json.loads(prelim.stdout)["outcome"] == "undecided"
    out = runner.invoke(app, ["audit", "gate", "--final", "--json"])
    assert out.exit_code == code, out.output
    data = json.loads(out.stdout)
    assert (data["status"], data["outcome"], data["exit_code"]) == (outcome, outcome, code)
    text = runner.invoke(app, ["audit", "gate", "--final"])
    assert text.exit_code == code and f"gate (final): {outcome.upper()}" in text.output


def _pairs(tmp_path: Path, *, adjudicated: bool = True) -> Path:
    rows = ["pair_id,annotator_a,annotator_b,adjudicated,automatic"]
    for i in range(40):
        lab = "same" if i % 2 else "different"
        rows.append(f"p{i},{lab},{lab},,{lab}")
    rows.append("p40,same,different," + ("same" if adjudicated else "") + ",same")
    path = tmp_path / "pairs.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize(
    ("args", "code", "outcome"),
    [
        (["--automatic-coverage", "0.99"], 0, "passed"),
        (["--automatic-coverage", "0.5"], 5, "failed"),  # coverage below 0.95: final, failed
        ([], 0, "undecided"),  # provisional: coverage not from the partition
    ],
)
def test_stats_agreement_exit_code(
    tmp_path: Path, args: list[str], code: int, outcome: str
) -> None:
    path = _pairs(tmp_path)
    out = runner.invoke(app, ["stats", "agreement", str(path), *args, "--json"])
    assert out.exit_code == code, out.output
    data = json.loads(out.stdout)
    assert (data["outcome"], data["exit_code"]) == (outcome, code)
    assert runner.invoke(app, ["stats", "agreement", str(path), *args]).exit_code == code


def test_stats_agreement_preliminary_and_error_codes(tmp_path: Path) -> None:
    path = _pairs(tmp_path, adjudicated=False)
    out = runner.invoke(app, ["stats", "agreement", str(path), "--automatic-coverage", "0.5"])
    assert out.exit_code == 0 and "preliminary" in out.output  # not decided: not a failure
    bad = tmp_path / "bad.csv"
    bad.write_text("pair_id,annotator_a,annotator_b,adjudicated,automatic\np1,maybe,same,,\n")
    assert runner.invoke(app, ["stats", "agreement", str(bad)]).exit_code == ec.ERROR
