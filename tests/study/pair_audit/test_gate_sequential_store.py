"""The frozen rubric's ``[sequential]`` plan at store level: interim decisions
in ``gate_status`` and ``rcea audit gate``, one ``gate.interim`` event per look, an early
stop that records ``gate.final``, and a final gate that follows the plan's boundary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rcea.annotation.payloads import ParsedAnnotation
from rcea.app.cli import app
from rcea.study.pair_audit.freeze import FreezeError, freeze_partition_from_modes, freeze_rubric
from rcea.study.pair_audit.gate import gate_status
from rcea.study.pair_audit.labels import record_annotation
from rcea.study.pair_audit.sampling import audit_pairs, draw_audit
from rcea.study.store import list_events, session_scope
from rcea.study.store.models import Audit
from tests.support.helpers import RUBRIC, audit_study, fake_tasks, rubric_file

SEQUENTIAL = '\n[sequential]\nlooks = [0.25, 0.5, 1.0]\nspending = "pocock"\n'


def _audit(engine, tmp_path: Path, extra: str) -> int:  # type: ignore[no-untyped-def]
    audit_study(engine, tmp_path)
    with session_scope(engine) as s:
        freeze_rubric(s, path=rubric_file(tmp_path, RUBRIC + extra), actor="r")
        freeze_partition_from_modes(s, study="s", actor="r")
        return draw_audit(s, study="s", rubric="test-rubric", actor="r").id


def _label(engine, audit_id: int, upto: int) -> None:  # type: ignore[no-untyped-def]
    """A and B both give the first ``upto`` pairs their automatic label (``same`` when
    uncertain): perfect agreement."""
    tasks = fake_tasks(engine, audit_id)
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        pairs = audit_pairs(s, audit_id=audit_id)[:upto]
        ann = 1
        for role, user in (("A", 11), ("B", 12)):
            for p in pairs:
                label = p.automatic or "same"
                parsed = ParsedAnnotation(ann, tasks[role][p.id], None, user, label, None, False)
                record_annotation(s, audit, parsed, source="test")
                ann += 1


def test_without_a_plan_nothing_changes(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    audit_id = _audit(engine, tmp_path, "")
    _label(engine, audit_id, 18)
    with session_scope(engine) as s:
        res = gate_status(s, s.get(Audit, audit_id), final=True)
    assert "sequential" not in res and "decision" not in res
    assert "decision" not in res["report"]["requirements"][0]
    assert res["status"] == "passed"


def test_interim_look_and_one_event_per_look(engine, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    audit_id = _audit(engine, tmp_path, SEQUENTIAL)
    _label(engine, audit_id, 9)  # 9 of 18 pairs: look 2 (sizes 5, 9, 18)
    with session_scope(engine) as s:
        res = gate_status(s, s.get(Audit, audit_id), final=False)
    seq = res["sequential"]
    assert (seq["look"], seq["n_looks"], seq["look_sizes"]) == (2, 3, [5, 9, 18])
    assert res["decision"] == seq["decision"]
    # 9 pairs cannot settle F1 (binomial floor), coverage 29/30 >= 0.95 is settled
    by = {r["name"]: r["decision"] for r in res["report"]["requirements"]}
    assert by["automatic_coverage"] == "settled_pass"
    assert by["human_human_macro_f1"] == "undecided"
    monkeypatch.setenv("RCEA_DATABASE_URL", str(engine.url))
    from rcea.study.settings import get_settings

    get_settings.cache_clear()
    runner = CliRunner()
    for _ in range(2):
        out = runner.invoke(app, ["audit", "gate", "--json"])
        assert out.exit_code == 0, out.output
        assert json.loads(out.stdout)["sequential"]["look"] == 2
    text = runner.invoke(app, ["audit", "gate"])
    assert "look 2/3 at 9/18 pairs" in text.output and "settled_pass" in text.output
    with session_scope(engine) as s:
        events = list_events(s, kind="gate.interim")
        assert [e.payload["look"] for e in events] == [2]
        assert events[0].payload["decision"] == "undecided"
    # the final gate may not stop while undecided
    out = runner.invoke(app, ["audit", "gate", "--final"])
    assert out.exit_code == 1 and "undecided at look 2/3" in out.output


def test_settled_fail_stops_early(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Coverage 29/30 under a 0.97 minimum is settled_fail at the first look: the final
    gate may stop there and is recorded as stopped early."""
    audit_id = _audit(engine, tmp_path, "\n[gate]\nautomatic_coverage_min = 0.97\n" + SEQUENTIAL)
    _label(engine, audit_id, 5)
    with session_scope(engine) as s:
        res = gate_status(s, s.get(Audit, audit_id), final=True)
    assert res["sequential"]["look"] == 1 and res["decision"] == "settled_fail"
    assert (res["stage"], res["status"], res["stopped_early"]) == ("final", "failed", True)
    assert res["report"]["passed"] is False and res["report"]["n_pairs"] == 5


def test_final_gate_follows_the_plan_boundary(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """18 perfectly agreeing pairs pass the fixed-sample rule but do not settle under the
    plan (the binomial floor): the final gate fails, and says why."""
    audit_id = _audit(engine, tmp_path, SEQUENTIAL)
    _label(engine, audit_id, 18)
    with session_scope(engine) as s:
        res = gate_status(s, s.get(Audit, audit_id), final=True)
    rep = res["report"]
    assert rep["fixed_sample_passed"] is True
    assert res["sequential"]["final_look"] and res["decision"] == "undecided"
    assert (res["status"], rep["passed"], res["stopped_early"]) == ("failed", False, False)


def test_missing_adjudication_blocks_a_stop(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    audit_id = _audit(engine, tmp_path, "\n[gate]\nautomatic_coverage_min = 0.97\n" + SEQUENTIAL)
    tasks = fake_tasks(engine, audit_id)
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        pairs = audit_pairs(s, audit_id=audit_id)[:5]
        for k, (role, user) in enumerate((("A", 11), ("B", 12))):
            for i, p in enumerate(pairs):
                label = "same" if (role == "A" or i) else "different"
                parsed = ParsedAnnotation(100 * k + i + 1, tasks[role][p.id], None, user, label,
                                          None, False)  # fmt: skip
                record_annotation(s, audit, parsed, source="test")
    with session_scope(engine) as s:
        assert gate_status(s, s.get(Audit, audit_id), final=False)["decision"] == "settled_fail"
        with pytest.raises(FreezeError, match="need adjudication"):
            gate_status(s, s.get(Audit, audit_id), final=True)


def test_api_shows_the_interim_decisions(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from fastapi.testclient import TestClient

    from rcea.app.api import create_app
    from rcea.study.settings import Settings

    audit_id = _audit(engine, tmp_path, SEQUENTIAL)
    _label(engine, audit_id, 9)
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        study_id, name = audit.study_id, audit.name
    client = TestClient(create_app(Settings(data_dir=tmp_path / "d", api_token="t"), engine=engine))
    url = f"/api/studies/{study_id}/audits/{name}/gate"
    assert client.get(url).status_code == 401
    got = client.get(url, headers={"Authorization": "Bearer t"}).json()
    assert got["sequential"]["look"] == 2 and got["decision"] == "undecided"
    assert all("decision" in r for r in got["report"]["requirements"])
    missing = client.get(
        f"/api/studies/{study_id}/audits/nope/gate", headers={"Authorization": "Bearer t"}
    )
    assert missing.status_code == 404


def test_view_audit_page_shows_the_interim_decisions(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The Audit page (Streamlit ``AppTest``) on a store whose frozen rubric has a plan:
    the interim decisions as the store computes them, and the recorded looks."""
    from streamlit.testing.v1 import AppTest

    from rcea.study.logins import add_researcher, logins_path
    from rcea.study.pair_audit.sequential import record_interim
    from rcea.study.settings import Settings, get_settings
    from rcea.study.store import open_store

    data = tmp_path / "data"
    settings = Settings(data_dir=data)
    engine = open_store(settings)
    audit_id = _audit(engine, tmp_path, SEQUENTIAL)
    _label(engine, audit_id, 9)
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        live = gate_status(s, audit, final=False)
        record_interim(s, audit, live["sequential"], "r")
    add_researcher(logins_path(settings), "tester", "correct horse battery")
    monkeypatch.setenv("RCEA_DATA_DIR", str(data))
    get_settings.cache_clear()
    main = Path(__file__).resolve().parents[3] / "rcea" / "app" / "view" / "main.py"
    at = AppTest.from_file(str(main), default_timeout=120)
    at.run()
    at.text_input(key="login_name").set_value("tester")
    at.text_input(key="login_password").set_value("correct horse battery")
    at.button(key="login_submit").click().run()
    at.switch_page("audit.py").run()
    assert not at.exception
    assert "Sequential plan (interim decisions)" in [h.value for h in at.subheader]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["look"] == "2/3" and metrics["gate decision"] == "undecided"
    frames = [df.value for df in at.dataframe]
    seq = next(f for f in frames if "settles_by_look" in f.columns).set_index("name")
    expected = {r["name"]: r["decision"] for r in live["sequential"]["requirements"]}
    assert seq["decision"].to_dict() == expected
    looks = next(f for f in frames if "boundary" in f.columns and "look" in f.columns)
    assert looks["look"].tolist() == [2]
    # the annotator section: one row per person and round, 9 labels each
    assert "Annotators" in [h.value for h in at.subheader]
    people = next(f for f in frames if "lead_time_median_s" in f.columns)
    assert people.set_index("round")["labels"].to_dict() == {"A": 9, "B": 9}
    assert next(f for f in frames if "disagreement_share" in f.columns)["pairs_both"].sum() == 9


def test_publish_and_verify_follow_the_plan(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A sequential gate that passes under its (deliberately lax, test-only) plan is
    published and `rcea report verify` re-derives the same plan-based gate from the
    bundle; the recorded report carries the interim decisions."""
    from rcea.study.report.verify import verify_bundle
    from tests.support.report_study import (
        JUDGE,
        draw,
        final_gate,
        judge,
        make_report_study,
        publish,
    )

    lax = "\n[sequential]\nlooks = [1.0]\nalpha = 0.45\n"
    make_report_study(engine, tmp_path)
    judge(engine, calibrated_hash=JUDGE)
    final_gate(engine, draw(engine, tmp_path, rubric=RUBRIC + lax), passing=True)
    with session_scope(engine) as s:
        final = list_events(s, kind="gate.final")[-1].payload
    assert final["status"] == "passed" and final["report"]["decision"] == "settled_pass"
    bundle = Path(publish(engine, tmp_path / "out")["bundle"])
    gate = json.loads((bundle / "gate.json").read_text())
    assert gate["gate"]["sequential"]["plan"]["alpha"] == 0.45
    res = verify_bundle(bundle)
    assert res.ok, res.mismatches
    # editing a published interim decision is named
    edited = tmp_path / "edited"
    import shutil

    shutil.copytree(bundle, edited)
    g = json.loads((edited / "gate.json").read_text())
    g["gate"]["requirements"][0]["decision"] = "undecided"
    (edited / "gate.json").write_text(json.dumps(g))
    bad = verify_bundle(edited)
    assert not bad.ok and any("decision" in m for m in bad.mismatches)
