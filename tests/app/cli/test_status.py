"""``rcea status --study S``: any study's next step, from import to verify, computed from
the store (``rcea.study.progress.study_steps``), walked through a study built with the shared
report-study support: nothing → imported → judged → audit drawn → final gate failed
(the options named) / passed with a calibration (publish) → published (verify)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rcea.app.cli import app
from rcea.study.progress import study_steps
from rcea.study.store import session_scope
from tests.support import report_study


def steps(engine) -> list[tuple[str, str | None]]:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        return [(x.track, x.command) for x in study_steps(s, study="rep")]


def test_status_walks_a_study_from_import_to_verify(  # type: ignore[no-untyped-def]
    engine, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert steps(engine) == [("import", "rcea import verl DIR --study rep --run RUN --model MODEL")]
    report_study.make_report_study(engine, tmp_path)
    assert steps(engine) == [
        ("validity judge", "rcea judge run --study rep --judge NAME"),
        ("codebook", "rcea codebook run --study rep"),
        ("report", "rcea report build --study rep"),
    ]
    with session_scope(engine) as s:
        codebook = study_steps(s, study="rep")[1]
    assert codebook.waits_for and "validity judge" in codebook.waits_for
    report_study.judge(engine, calibrated_hash=None)
    assert steps(engine)[:2] == [
        ("validity calibration", "rcea judge calibrate sample --study rep --judge toy-judge"),
        ("codebook", "rcea codebook run --study rep"),
    ]
    audit_id = report_study.draw(engine, tmp_path)
    got = steps(engine)
    assert [t for t, _ in got] == ["validity calibration", "pair audit", "report"]
    assert got[1][1] is not None and got[1][1].startswith("rcea audit push --audit ")
    report_study.final_gate(engine, audit_id, passing=False)
    with session_scope(engine) as s:
        now = study_steps(s, study="rep")
    failed = [x for x in now if "FAILED" in x.state]
    assert len(failed) == 1
    assert failed[0].command == "rcea report publish --study rep --entropy-only"
    assert "revise the codebook" in failed[0].state
    assert "report" not in [x.track for x in now]  # nothing else to publish
    # The gate command itself names the options when the final gate fails.
    from rcea.study.settings import get_settings

    monkeypatch.setenv("RCEA_DATABASE_URL", store_url)
    get_settings.cache_clear()
    res = CliRunner().invoke(app, ["audit", "gate", "--final"])
    assert "the final gate FAILED; the options:" in res.output, res.output
    assert "  - publish the audit-independent numbers alone: rcea report publish --study rep" in (
        res.output
    )


def test_status_passed_gate_publish_and_verify(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    report_study.make_report_study(engine, tmp_path)
    report_study.judge(engine, calibrated_hash=report_study.JUDGE)
    audit_id = report_study.draw(engine, tmp_path)
    report_study.final_gate(engine, audit_id, passing=True)
    got = steps(engine)
    assert ("validity calibration", None) in got and ("pair audit", None) in got
    assert got[-1] == ("report", "rcea report publish --study rep --out reports/")
    bundle = report_study.publish(engine, tmp_path / "reports")
    where = bundle.get("bundle") or bundle.get("path") or bundle.get("out")
    assert steps(engine)[-1] == ("verify", f"rcea report verify {where}")


def test_status_cli(store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rcea.study.settings import get_settings
    from rcea.study.store import make_engine, upgrade

    monkeypatch.setenv("RCEA_DATABASE_URL", store_url)
    get_settings.cache_clear()
    eng = make_engine(store_url)
    upgrade(eng)
    report_study.make_report_study(eng, tmp_path)
    eng.dispose()
    runner = CliRunner()
    res = runner.invoke(app, ["status", "--study", "rep"])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[:4] == [
        "status — study rep",
        "  validity judge: no judge run on this study",
        "    needs a frozen judge (`rcea judge freeze --name NAME`, once)",
        "    NEXT: rcea judge run --study rep --judge NAME",
    ]
    assert "    then: rcea report build --study rep" in res.output
    data = json.loads(runner.invoke(app, ["status", "--study", "rep", "--json"]).stdout)
    assert [x["track"] for x in data["steps"]] == ["validity judge", "codebook", "report"]
