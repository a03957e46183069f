"""Every attempt on the record: the report lists every pair audit (failed, passed, in
progress) from the study's audit events; the bundle carries those events as a hash chain
and ``verify`` fails when an attempt is removed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from sqlmodel import select

from rcea.study.pair_audit.gate import decide_gate
from rcea.study.report.attempts import chain, chain_problems
from rcea.study.report.build import build_report
from rcea.study.report.publish import publish_report
from rcea.study.report.schema import StudyReport, report_json
from rcea.study.report.verify import verify_bundle
from rcea.study.store import session_scope
from rcea.study.store.models import Audit
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
        rep = report_json(build_report(s, study="s", n_boot=200))
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
    # a re-audit draws with a seed derived from the attempt (and fresh pairs)
    from rcea.audits.sampling import attempt_seed

    assert rep["attempts"][1]["seed"] == attempt_seed(1, 2)
    assert [(a["correction"], a["alpha"]) for a in rep["attempts"]] == [
        ("bonferroni", 0.025), ("bonferroni", 0.025)]  # fmt: skip
    from rcea.study.report.html import render_html

    html = render_html(rep, scope="entropy-only (no audit)", figures={}, hashes={})
    assert "Every attempt on the record" in html and "B misread the guideline" in html
    assert "0.025 (bonferroni)" in html  # the attempt's α is shown, not only in inputs.json


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
    from rcea.app.view.data import audit as audit_data
    from rcea.study.settings import get_settings

    first, second = _two_attempts(engine, tmp_path)
    monkeypatch.setenv("RCEA_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    get_settings.cache_clear()
    frame = audit_data.attempts_frame("s")
    assert list(frame["name"]) == [first, second]
    assert list(frame["outcome"]) == ["failed", "in progress"]
    assert frame["failed requirements"].iloc[0] == "automatic_coverage"


def _rewrite(bundle: Path, name: str, obj: object) -> None:
    """Rewrite ``name`` in ``bundle`` and make hashes.json match it (what someone editing
    an unsigned bundle could do)."""
    hashes = json.loads((bundle / "hashes.json").read_text())
    data = (json.dumps(obj, indent=2) + "\n").encode()
    (bundle / name).write_bytes(data)
    hashes["files"][name] = hashlib.sha256(data).hexdigest()
    (bundle / "hashes.json").write_text(json.dumps(hashes, indent=2) + "\n")


def test_verify_rederives_each_attempt_from_its_own_labels(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    first, second = _two_attempts(engine, tmp_path)
    with session_scope(engine) as s:
        res = publish_report(
            s, study="s", out_dir=tmp_path / "out", actor="p", n_boot=200, entropy_only=True
        )
    bundle = Path(res["bundle"])
    report = json.loads((bundle / "report.json").read_text())
    inputs = json.loads((bundle / "inputs.json").read_text())
    labels = inputs["inputs"]["attempt_labels"]
    assert sorted(labels) == [f"pair audit:{first}", f"pair audit:{second}"]
    n_pairs = len(labels[f"pair audit:{first}"]["pairs"])
    # every pair labelled by A and B, none adjudicated: labels counted = 2 per pair
    assert [a["n_labels"] for a in report["attempts"]] == [2 * n_pairs, 2 * len(
        labels[f"pair audit:{second}"]["pairs"])]  # fmt: skip
    ver = verify_bundle(bundle)
    assert ver.ok, ver.mismatches
    # the failed attempt's own labels edited so that its gate would pass: the recorded
    # outcome no longer follows from them
    edited = json.loads(json.dumps(inputs))
    edited["inputs"]["attempt_labels"][f"pair audit:{first}"]["automatic_coverage"] = 1.0
    _rewrite(bundle, "inputs.json", edited)
    ver = verify_bundle(bundle)
    assert not ver.ok
    assert any(
        m.startswith(f"attempt pair audit:{first} (recorded vs re-derived") and "outcome" in m
        for m in ver.mismatches
    ), ver.mismatches
    # a label dropped from the attempt in progress: its label count no longer matches
    edited = json.loads(json.dumps(inputs))
    edited["inputs"]["attempt_labels"][f"pair audit:{second}"]["pairs"][0]["B"] = None
    _rewrite(bundle, "inputs.json", edited)
    ver = verify_bundle(bundle)
    assert not ver.ok and any("attempts[1].n_labels" in m for m in ver.mismatches), ver.mismatches
    # the labels of a decided attempt removed altogether
    edited = json.loads(json.dumps(inputs))
    del edited["inputs"]["attempt_labels"][f"pair audit:{first}"]
    _rewrite(bundle, "inputs.json", edited)
    ver = verify_bundle(bundle)
    assert any("its labels are missing" in m for m in ver.mismatches), ver.mismatches


def test_an_abandoned_attempt_stays_on_the_record(  # type: ignore[no-untyped-def]
    engine, tmp_path: Path, monkeypatch
) -> None:
    from typer.testing import CliRunner

    from rcea.app.cli import app
    from rcea.study.pair_audit.abandon import abandon_audit
    from rcea.study.pair_audit.freeze import FreezeError

    study_with_rubric(engine, tmp_path, RUBRIC)
    first = drawn_and_labelled(engine)
    monkeypatch.setenv("RCEA_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    runner = CliRunner()
    with session_scope(engine) as s:
        name = s.get(Audit, first).name
        with pytest.raises(FreezeError, match="needs a reason"):
            abandon_audit(s, s.get(Audit, first), reason="  ", actor="r")
    out = runner.invoke(app, ["audit", "abandon", "--audit", name, "--reason",
                              "the guideline changed mid-labelling", "--json"])  # fmt: skip
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["outcome"] == "abandoned"
    # abandoned: no final gate afterwards, and not twice
    gate = runner.invoke(app, ["audit", "gate", "--audit", name, "--final"])
    assert gate.exit_code == 1 and "was abandoned" in gate.output
    again = runner.invoke(app, ["audit", "abandon", "--audit", name, "--reason", "x"])
    assert again.exit_code == 1 and "already abandoned" in again.output
    second = drawn_and_labelled(engine, seed=1)
    with session_scope(engine) as s:
        assert decide_gate(s, s.get(Audit, second), final=True, actor="r")["status"] == "passed"
        with pytest.raises(FreezeError, match="final gate on record"):
            abandon_audit(s, s.get(Audit, second), reason="too late", actor="r")
        rep = report_json(build_report(s, study="s", n_boot=200))
    StudyReport.model_validate(rep)
    a, b = rep["attempts"]
    assert (a["name"], a["outcome"], a["abandon_reason"]) == (
        name, "abandoned", "the guideline changed mid-labelling")  # fmt: skip
    assert a["decided_at"] and a["values"] == [] and a["n_labels"] > 0
    assert (b["outcome"], b["attempt"]) == ("passed", 2)
    from rcea.study.report.html import render_html

    html = render_html(rep, scope="entropy-only (no audit)", figures={}, hashes={})
    assert "abandoned (the guideline changed mid-labelling)" in html
    with session_scope(engine) as s:
        res = publish_report(s, study="s", out_dir=tmp_path / "out", actor="p", n_boot=200,
                             entropy_only=True)  # fmt: skip
    bundle = Path(res["bundle"])
    published = json.loads((bundle / "report.json").read_text())
    assert published["attempts"][0]["outcome"] == "abandoned"
    ver = verify_bundle(bundle)
    assert ver.ok, ver.mismatches
    from rcea.app.view.data import audit as audit_data
    from rcea.study.settings import get_settings

    get_settings.cache_clear()
    frame = audit_data.attempts_frame("s")
    assert list(frame["outcome"]) == ["abandoned", "passed"]
    assert list(frame["labels counted"]) == [a["n_labels"], b["n_labels"]]
    assert frame["abandon reason"].iloc[0] == "the guideline changed mid-labelling"


def _validity_attempt(kind: str, outcome: str, values: list[dict]) -> dict:  # type: ignore[type-arg]
    return {"kind": kind, "name": "c", "outcome": outcome, "values": values}


def test_rederive_validity_checks_from_their_own_labels() -> None:
    """A calibration's outcome and values follow from its held-out (human, judge) labels
    and an accepted-set check's from A's and B's labels, against the frozen thresholds;
    edited labels give a different outcome."""
    from rcea.audits.acceptance import JudgeAcceptance, calibration_acceptance
    from rcea.audits.calibration import judge_calibration
    from rcea.study.report.attempts import ACCEPTED_KIND, CALIBRATION_KIND, rederive

    human = ["valid"] * 45 + ["invalid"] * 5
    judge = ["valid"] * 45 + ["invalid"] * 5
    cal = {"thresholds": JudgeAcceptance(basis="balanced").to_dict(), "n_items": 50,
           "items": [{"item_key": str(i), "human": h, "judge": j}
                     for i, (h, j) in enumerate(zip(human, judge, strict=True))]}  # fmt: skip
    acc = calibration_acceptance(
        judge_calibration(human, judge).to_dict(), JudgeAcceptance(basis="balanced")
    )
    values = [{k: r[k] for k in ("name", "value", "threshold", "passed")}
              for r in acc["requirements"]]  # fmt: skip
    got = rederive(_validity_attempt(CALIBRATION_KIND, "passed", values), cal)
    assert got == {"outcome": "passed", "values": values}
    # ten human labels flipped: the judge misses its accuracy threshold
    for item in cal["items"][:10]:
        item["human"] = "invalid"
    assert rederive(_validity_attempt(CALIBRATION_KIND, "passed", values), cal)["outcome"] == (
        "failed")  # fmt: skip
    # an item without its human label: not complete, so not the recorded decision
    cal["items"][0]["human"] = None
    assert rederive(_validity_attempt(CALIBRATION_KIND, "passed", values), cal)["outcome"] == (
        "in progress")  # fmt: skip
    items = [{"item_key": str(i), "A": "valid", "B": "valid"} for i in range(60)]
    checked = {"thresholds": JudgeAcceptance().to_dict(), "n_items": 60, "items": items}
    ok = rederive(_validity_attempt(ACCEPTED_KIND, "passed", []), checked)
    assert ok["outcome"] == "passed" and [v["passed"] for v in ok["values"]] == [True, True]
    for item in checked["items"][:12]:  # B: 48 of 60 valid, lower bound under 0.80
        item["B"] = "invalid"
    bad = rederive(_validity_attempt(ACCEPTED_KIND, "passed", []), checked)
    assert bad["outcome"] == "failed" and [v["passed"] for v in bad["values"]] == [True, False]
    # undecided attempts are not re-derived
    assert rederive(_validity_attempt(ACCEPTED_KIND, "in progress", []), checked) is None


def test_rederive_a_population_basis_calibration() -> None:
    """A calibration judged on the population basis re-derives from its labels, the
    population's verdict counts and the bootstrap settings its labels carry."""
    from rcea.audits.acceptance import JudgeAcceptance, calibration_acceptance
    from rcea.audits.calibration import calibration_figures
    from rcea.study.report.attempts import CALIBRATION_KIND, rederive

    human = ["valid"] * 5 + ["invalid"] * 5
    judge = ["valid"] * 3 + ["invalid"] * 2 + ["invalid"] * 5  # balanced recall 3/5
    pop = {"accepted": 9000, "not_accepted": 1000}
    t = JudgeAcceptance(macro_f1_min=0.5, coverage_min=0.0, accepted_valid_precision_min=0.5)
    items = [
        {"item_key": str(i), "human": h, "judge": j}
        for i, (h, j) in enumerate(zip(human, judge, strict=True))
    ]
    cal = {
        "thresholds": t.to_dict(),
        "population": pop,
        "bootstrap": {"n_boot": 100, "seed": 4},
        "n_items": 10,
        "items": items,
    }
    rep = calibration_figures(human, judge, pop, n_boot=100, seed=4)
    acc = calibration_acceptance(rep, t)
    values = [{k: r[k] for k in ("name", "value", "threshold", "passed")}
              for r in acc["requirements"]]  # fmt: skip
    got = rederive(_validity_attempt(CALIBRATION_KIND, "passed", values), cal)
    assert got == {"outcome": "passed" if acc["passed"] else "failed", "values": values}
    assert acc["basis"] == "population"
    # without the population counts the population basis cannot pass
    no_pop = rederive(
        _validity_attempt(CALIBRATION_KIND, "passed", values), {**cal, "population": None}
    )
    assert no_pop["outcome"] == "failed"


def test_a_change_after_a_failed_attempt_is_shown_and_verified(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A calibration failed, then a later one with a lowered threshold and two annotators
    per item passed: the later attempt is listed as "changed after a failed attempt" with
    each difference, on the bundle's page too; verify fails when the page hides it."""
    from rcea.audits.acceptance import JudgeAcceptance
    from rcea.study import events
    from rcea.study.report.html import CHANGED_LABEL
    from rcea.study.store import append_event, require_study
    from rcea.study.store.models import ValidityCheck
    from rcea.study.validity_audit.reports import calibration_report
    from tests.support.validity import stored_check

    _two_attempts(engine, tmp_path)
    strict = JudgeAcceptance(basis="balanced").to_dict()
    lenient = {**strict, "macro_f1_min": 0.5}
    for name, judge, thresholds, per_item in (
        ("c1", ["valid"] * 5 + ["invalid"] * 5, strict, 1),
        ("c2", ["valid"] * 10, lenient, 2),
    ):
        human = {"annotator-1": ["valid"] * 10}
        made = stored_check(engine, kind="calibration", judge=judge, name=name, study="s",
                            labels=human, acceptance=thresholds)  # fmt: skip
        with session_scope(engine) as s:
            design = {
                "acceptance": thresholds,
                "calibration": {"size": 10, "held_out": 10, "annotators_per_item": per_item},
            }
            payload = {"calibration": name, "judge_hash": made["judge_hash"], "held_out": 10,
                       "acceptance": thresholds, "design": design}  # fmt: skip
            sid = require_study(s, name="s").id
            append_event(
                s, actor="r", kind=events.CALIBRATION_SAMPLE, study_id=sid, payload=payload
            )
            check = s.exec(select(ValidityCheck).where(ValidityCheck.name == name)).one()
            assert calibration_report(s, check)["outcome"] == (
                "failed" if name == "c1" else "passed"
            )
    with session_scope(engine) as s:
        rep = report_json(build_report(s, study="s", n_boot=200))
        res = publish_report(
            s, study="s", out_dir=tmp_path / "out", actor="p", n_boot=200, entropy_only=True
        )
    cal = [a for a in rep["attempts"] if a["kind"] == "calibration"]
    assert [a["outcome"] for a in cal] == ["failed", "passed"]
    assert cal[0]["changed_after_failure"] == []
    assert cal[1]["changed_after_failure"] == [
        {"since": "c1", "key": "acceptance.macro_f1_min", "before": 0.85, "after": 0.5},
        {"since": "c1", "key": "calibration.annotators_per_item", "before": 1, "after": 2},
    ]
    bundle = Path(res["bundle"])
    page = (bundle / "report.html").read_text()
    assert f"{CHANGED_LABEL} (c1): acceptance.macro_f1_min 0.85 → 0.5" in page
    ver = verify_bundle(bundle)
    assert ver.ok, ver.mismatches
    hidden = page.replace(CHANGED_LABEL, "adjusted")
    (bundle / "report.html").write_text(hidden)
    hashes = json.loads((bundle / "hashes.json").read_text())
    hashes["files"]["report.html"] = hashlib.sha256(hidden.encode()).hexdigest()
    (bundle / "hashes.json").write_text(json.dumps(hashes, indent=2) + "\n")
    ver = verify_bundle(bundle)
    assert not ver.ok
    assert any("c2 was changed after a failed attempt" in m for m in ver.mismatches), ver.mismatches


def test_a_pass_resting_on_a_post_hoc_change_is_marked_in_the_scope() -> None:
    """The bundle's scope (its "audited" label) says when the pass the numbers rest on
    came after a design change following a failed attempt."""
    from rcea.study.report.publication import CHANGED_LABEL, FULL_SCOPE, publication_scope

    change = {"since": "c1", "key": "acceptance.macro_f1_min", "before": 0.85, "after": 0.75}
    report = {
        "quantities": [{"depends_on": ["validity"], "evidence": None}],
        "audits": {
            "pair": {"changed_after_failure": []},
            "validity": {"changed_after_failure": [change]},
        },
    }
    scope = publication_scope(report, "entropy only")
    assert scope.startswith(FULL_SCOPE)
    assert f"judge calibration passed {CHANGED_LABEL} (c1: acceptance.macro_f1_min)" in scope
    report["audits"]["validity"]["changed_after_failure"] = []
    assert publication_scope(report, "entropy only") == FULL_SCOPE
    # an entropy-only report calls nothing audited, so carries no mark
    report["quantities"] = [{"depends_on": [], "evidence": None}]
    assert publication_scope(report, "entropy only") == "entropy only"
