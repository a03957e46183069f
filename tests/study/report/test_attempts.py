"""Every attempt on the record: the report lists every pair audit (failed, passed, in
progress) from the study's audit events; the bundle carries those events as a hash chain
and ``verify`` fails when an attempt is removed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from study.pair_audit.gate import decide_gate
from study.report.attempts import chain, chain_problems
from study.report.build import build_report
from study.report.publish import publish_report
from study.report.schema import StudyReport
from study.report.verify import verify_bundle
from study.store import session_scope
from study.store.models import Audit
from tests.support.helpers import RUBRIC
from tests.support.pair_audit import FAILING_GATE, drawn_and_labelled, study_with_rubric

POLICY = '\n[reaudit]\nmax_attempts = 2\ncorrection = "bonferroni"\n'


def _two_attempts(engine, tmp_path: Path) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    study_with_rubric(engine, tmp_path, RUBRIC + FAILING_GATE + POLICY)
    first = drawn_and_labelled(engine)
    with session_scope(engine) as s:
        assert decide_gate(s, s.get(Audit, first), final=True, actor="r")["status"] == "failed"
    second = drawn_and_labelled(engine, seed=1, reason="B misread the guideline")
    with session_scope(engine) as s:
        return s.get(Audit, first).name, s.get(Audit, second).name


def test_report_lists_every_attempt(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    first, second = _two_attempts(engine, tmp_path)
    with session_scope(engine) as s:
        rep = build_report(s, study="s", n_boot=200)
    StudyReport.model_validate(rep)
    got = [(a["kind"], a["name"], a["attempt"], a["outcome"], a["reason"]) for a in rep["attempts"]]
    assert got == [
        ("pair audit", first, 1, "failed", None),
        ("pair audit", second, 2, "in progress", "B misread the guideline"),
    ]
    failed = rep["attempts"][0]
    assert failed["seed"] == 5 and failed["drawn_by"] == "r" and failed["decided_at"]
    cov = next(v for v in failed["values"] if v["name"] == "automatic_coverage")
    assert cov["passed"] is False and cov["threshold"] == 1.0
    assert rep["attempts"][1]["seed"] == 1
    from study.report.html import render_html

    html = render_html(rep, scope="entropy-only (no audit)", figures={}, hashes={})
    assert "Every attempt on the record" in html and "B misread the guideline" in html


def test_chain_detects_a_removed_or_edited_event() -> None:
    records = [
        {"id": i, "time": f"2026-12-04T18:0{i}:00", "actor": "r", "kind": "audit.sample",
         "payload": {"audit_id": i}}
        for i in range(1, 4)
    ]  # fmt: skip
    entries = chain(records)
    assert chain_problems(entries) == []
    assert chain_problems([entries[0], entries[2]]) == [
        "audit_events[1] (event 3): does not follow its predecessor"
    ]
    edited = [dict(e) for e in entries]
    edited[1]["payload"] = {"audit_id": 99}
    assert chain_problems(edited) == ["audit_events[1] (event 2): hash does not match its content"]


def test_a_bundle_with_an_attempt_removed_fails_verify(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    first, _ = _two_attempts(engine, tmp_path)
    with session_scope(engine) as s:  # the gate failed: only the entropy-only bundle
        res = publish_report(
            s, study="s", out_dir=tmp_path / "out", actor="p", n_boot=200, entropy_only=True
        )
    bundle = Path(res["bundle"])
    report = json.loads((bundle / "report.json").read_text())
    assert [a["name"] for a in report["attempts"]][0] == first
    ver = verify_bundle(bundle)
    assert ver.ok, ver.mismatches
    hashes = json.loads((bundle / "hashes.json").read_text())
    assert hashes["audit_events_head"]

    def rewrite(name: str, obj: object) -> None:
        data = (json.dumps(obj, indent=2) + "\n").encode()
        (bundle / name).write_bytes(data)
        hashes["files"][name] = hashlib.sha256(data).hexdigest()
        (bundle / "hashes.json").write_text(json.dumps(hashes, indent=2) + "\n")

    # drop the failed attempt from report.json and its events from inputs.json, and make
    # the file hashes match: the chain is broken
    inputs = json.loads((bundle / "inputs.json").read_text())
    events = inputs["inputs"]["audit_events"]
    kept = [e for e in events if (e["payload"].get("name") or e["payload"].get("audit")) != first]
    assert len(kept) < len(events)
    inputs["inputs"]["audit_events"] = kept
    report["attempts"] = [a for a in report["attempts"] if a["name"] != first]
    rewrite("inputs.json", inputs)
    rewrite("report.json", report)
    ver = verify_bundle(bundle)
    assert not ver.ok and any("does not follow its predecessor" in m for m in ver.mismatches)
    # rebuilt as a whole new chain: its head is not the one hashes.json names
    inputs["inputs"]["audit_events"] = chain(kept)
    rewrite("inputs.json", inputs)
    ver = verify_bundle(bundle)
    assert not ver.ok and any("audit_events_head" in m for m in ver.mismatches)
    # an attempt removed from report.json only: the recomputed list differs
    inputs["inputs"]["audit_events"] = events
    rewrite("inputs.json", inputs)
    ver = verify_bundle(bundle)
    assert not ver.ok and any("attempts" in m for m in ver.mismatches), ver.mismatches


def test_the_views_audit_page_lists_every_attempt(engine, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from app.view import data
    from study.settings import get_settings

    first, second = _two_attempts(engine, tmp_path)
    monkeypatch.setenv("RCEA_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    get_settings.cache_clear()
    frame = data.attempts_frame("s")
    assert list(frame["name"]) == [first, second]
    assert list(frame["outcome"]) == ["failed", "in progress"]
    assert frame["failed requirements"].iloc[0] == "automatic_coverage"
