"""Each number labelled audited whose audit passed only after a design changed following a
failed attempt carries the mark "changed after a failed attempt" with the difference —
in report.json's quantities, the bundle's page, the paper tables, the CLI and the view's
Modes and Overview (validity) pages — and ``rcea report verify`` fails when a quantity
loses it (docs/publication.md)."""

from __future__ import annotations

import hashlib
import json
from html import escape
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select
from streamlit.testing.v1 import AppTest

from rcea.audits.acceptance import JudgeAcceptance
from rcea.study import events
from rcea.study.logins import add_researcher, logins_path
from rcea.study.report import paper
from rcea.study.report.build import build_report
from rcea.study.report.publication import (
    AUDITED_LABEL,
    CHANGED_LABEL,
    changed_marks,
    display_label,
    mark_changed_quantities,
)
from rcea.study.report.schema import report_json
from rcea.study.report.verify import verify_bundle
from rcea.study.settings import Settings, get_settings
from rcea.study.store import append_event, require_study, session_scope
from rcea.study.store.models import ValidityCheck
from rcea.study.validity_audit.reports import calibration_report
from rcea.study.validity_audit.status import JUDGE_RUN_EVENT
from tests.study.report.test_paper_outputs import _compile
from tests.support.helpers import RUBRIC
from tests.support.report_study import (
    accepted_passing,
    draw,
    final_gate,
    make_report_study,
    publish,
)
from tests.support.validity import stored_check

#: the mark the validity numbers carry: c1 failed, c2 passed with macro-F1's threshold
#: lowered and two annotators per item
MARK = (
    f"{CHANGED_LABEL}: the judge calibration c2 (since c1: acceptance.macro_f1_min 0.85 → 0.5; "
    "calibration.annotators_per_item 1 → 2)"
)
MAIN = Path(__file__).resolve().parents[3] / "rcea" / "app" / "view" / "main.py"


def test_marks_follow_each_numbers_dependencies() -> None:
    """The rule alone: only quantities labelled audited that depend on a changed gate are
    marked, with every change they rest on; nothing is marked without a change."""
    change = {"since": "a1", "key": "gate.min_f1", "before": 0.8, "after": 0.7}
    report: dict[str, Any] = {
        "audits": {
            "pair": {"audit": "a2", "changed_after_failure": [change]},
            "validity": {"calibration": "c1", "changed_after_failure": []},
        },
        "quantities": [
            {"label": AUDITED_LABEL, "depends_on": ["partition", "validity"]},
            {"label": AUDITED_LABEL, "depends_on": ["validity"]},
            {"label": "insufficient evidence", "depends_on": ["partition"]},
            {"label": "entropy-only (no audit)", "depends_on": []},
        ],
    }
    mark_changed_quantities(report, AUDITED_LABEL)
    pair_mark = f"{CHANGED_LABEL}: the pair gate a2 (since a1: gate.min_f1 0.8 → 0.7)"
    assert changed_marks(report) == {"partition": pair_mark}
    assert [q.get("changed_after_failure") for q in report["quantities"]] == [
        pair_mark,
        None,
        None,
        None,
    ]
    assert display_label(report["quantities"][0]) == f"audited — {pair_mark}"
    assert display_label(report["quantities"][1]) == "audited"
    # both gates changed: a mode number filtered by the judge carries both marks
    report["audits"]["validity"]["changed_after_failure"] = [{**change, "since": "c0"}]
    mark_changed_quantities(report, AUDITED_LABEL)
    both = report["quantities"][0]["changed_after_failure"]
    assert both.startswith(pair_mark + "; ") and "judge calibration c1 (since c0" in both


def _changed_calibration_study(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Study ``rep`` (tests/support/report_study.py) with a passing pair gate and a judge
    whose first calibration c1 failed and whose second, c2, passed after its threshold
    and labels per item changed; the judge run and its accepted-set check are c2's."""
    make_report_study(engine, tmp_path)
    # a floor the study's 8 questions meet: its validity and mode numbers are audited
    rubric = RUBRIC + "\n[estimators]\nmin_eligible_questions = 3\n"
    final_gate(engine, draw(engine, tmp_path, rubric=rubric), passing=True)
    strict = JudgeAcceptance(basis="balanced").to_dict()
    lenient = {**strict, "macro_f1_min": 0.5}
    judge_hash = ""
    for name, verdicts, thresholds, per_item in (
        ("c1", ["valid"] * 5 + ["invalid"] * 5, strict, 1),
        ("c2", ["valid"] * 10, lenient, 2),
    ):
        made = stored_check(
            engine,
            kind="calibration",
            judge=verdicts,
            name=name,
            study="rep",
            labels={"annotator-1": ["valid"] * 10},
            acceptance=thresholds,
        )
        judge_hash = made["judge_hash"]
        with session_scope(engine) as s:
            design = {
                "acceptance": thresholds,
                "calibration": {"size": 10, "held_out": 10, "annotators_per_item": per_item},
            }
            payload = {"calibration": name, "judge_hash": judge_hash, "held_out": 10,
                       "acceptance": thresholds, "design": design}  # fmt: skip
            sid = require_study(s, name="rep").id
            append_event(
                s, actor="r", kind=events.CALIBRATION_SAMPLE, study_id=sid, payload=payload
            )
            check = s.exec(select(ValidityCheck).where(ValidityCheck.name == name)).one()
            calibration_report(s, check)
    with session_scope(engine) as s:
        sid = require_study(s, name="rep").id
        run = {"judge_hash": judge_hash, "judge_name": "llm", "n_judged": 10}
        append_event(s, actor="r", kind=JUDGE_RUN_EVENT, study_id=sid, payload=run)
        accepted = accepted_passing(judge_hash)
        append_event(s, actor="r", kind=events.ACCEPTED_COMPLETED, study_id=sid, payload=accepted)


def _rewrite(bundle: Path, name: str, data: bytes) -> None:
    """Rewrite ``name`` and make hashes.json match (an unsigned bundle edited by hand)."""
    hashes = json.loads((bundle / "hashes.json").read_text())
    (bundle / name).write_bytes(data)
    hashes["files"][name] = hashlib.sha256(data).hexdigest()
    (bundle / "hashes.json").write_text(json.dumps(hashes, indent=2) + "\n")


def test_every_surface_marks_each_audited_number(engine, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    _changed_calibration_study(engine, tmp_path)
    with session_scope(engine) as s:
        rep = report_json(build_report(s, study="rep", n_boot=50))
    val = rep["audits"]["validity"]
    assert val["status"] == "calibrated" and val["calibration"] == "c2"
    assert rep["audits"]["pair"]["status"] == "passed"
    assert rep["audits"]["pair"]["changed_after_failure"] == []
    audited = [q for q in rep["quantities"] if q["label"] == AUDITED_LABEL]
    on_validity = [q for q in audited if "validity" in q["depends_on"]]
    assert on_validity and {q["section"] for q in on_validity} >= {"validity", "modes"}
    for q in rep["quantities"]:  # marked exactly when audited and resting on the judge
        want = MARK if q in on_validity else None
        assert q.get("changed_after_failure") == want, (q["section"], q["name"])

    # `rcea report build`'s table: the label column
    from rcea.app.cli.report_cmd import _print_report

    _print_report(rep)
    printed = capsys.readouterr().out.splitlines()
    assert sum(line.endswith(f"audited — {MARK}") for line in printed) == len(on_validity)

    # the paper tables: mark c, one footnote with the difference; the CSV column
    tables = {t.name: t for t in paper.report_tables(rep)}
    cells = [c for _, row in tables["validity"].rows for c in row if c.text != "–"]
    changed = [c for c in cells if c.mark == paper.CHANGED_MARK]
    assert changed and {c.mark for c in cells} <= {paper.CHANGED_MARK, "*"}  # no plain "a"
    assert tables["validity"].notes.count(MARK) == 1  # one footnote for the change
    assert {c.note for c in changed} == {tables["validity"].notes.index(MARK) + 1}
    assert "c = audited, changed after a failed attempt" in paper.render_tables(rep, "markdown")
    latex = paper.render_tables(rep, "latex")
    assert "^{\\mathrm{c,1}}" in latex and paper.latex_escape(MARK) in latex
    (tmp_path / "latex").mkdir()
    (tmp_path / "latex" / "tables.tex").write_text(latex)
    _compile(tmp_path / "latex" / "tables.tex", tmp_path / "latex")  # the footnote's → too
    csv_rows = paper.to_csv(rep).splitlines()
    assert csv_rows[0].endswith(",changed_after_failure")
    assert sum(MARK in r for r in csv_rows) == sum(q.get("changed_after_failure") is not None
                                                   for q in rep["quantities"])  # fmt: skip

    # the bundle: report.json's quantities and the page's appendix; verify re-derives both
    res = publish(engine, tmp_path / "out")
    assert res["scope"].startswith("full (audited)")
    bundle = Path(res["bundle"])
    report = json.loads((bundle / "report.json").read_text())
    marked = [i for i, q in enumerate(report["quantities"]) if q.get("changed_after_failure")]
    assert len(marked) == len(on_validity)
    page = (bundle / "report.html").read_text()
    cell = f"<td>{escape(f'audited — {MARK}')}</td>"
    assert page.count(cell) == len(marked)
    assert escape(f"depends on: partition, validity — audited; {MARK}") in page  # captions
    ver = verify_bundle(bundle)
    assert ver.ok, ver.mismatches

    # the mark removed from one quantity of report.json: verify names it
    edited = json.loads(json.dumps(report))
    del edited["quantities"][marked[0]]["changed_after_failure"]
    _rewrite(bundle, "report.json", (json.dumps(edited, indent=2) + "\n").encode())
    ver = verify_bundle(bundle)
    assert not ver.ok
    assert any("changed_after_failure" in m and "missing from the bundle" in m
               for m in ver.mismatches), ver.mismatches  # fmt: skip
    _rewrite(bundle, "report.json", (json.dumps(report, indent=2) + "\n").encode())
    assert verify_bundle(bundle).ok

    # ... and from one cell of the page
    hidden = page.replace(cell, "<td>audited</td>", 1)
    _rewrite(bundle, "report.html", hidden.encode())
    ver = verify_bundle(bundle)
    assert not ver.ok
    assert any(f"1 of {len(marked)} audited number(s)" in m for m in ver.mismatches), ver.mismatches


def test_the_views_modes_and_validity_pages_carry_the_mark(  # type: ignore[no-untyped-def]
    engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _changed_calibration_study(engine, tmp_path)
    data = tmp_path / "view-data"
    add_researcher(logins_path(Settings(data_dir=data)), "tester", "correct horse battery")
    monkeypatch.setenv("RCEA_DATA_DIR", str(data))
    monkeypatch.setenv("RCEA_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    get_settings.cache_clear()

    def page(name: str) -> AppTest:
        at = AppTest.from_file(str(MAIN), default_timeout=180)
        at.session_state["n_boot"] = 50
        at.run()
        at.text_input(key="login_name").set_value("tester")
        at.text_input(key="login_password").set_value("correct horse battery")
        at.button(key="login_submit").click().run()
        if name != "overview.py":
            at.switch_page(name).run()
        assert not at.exception, [e.value for e in at.exception]
        return at

    def labels(at: AppTest, section: str) -> list[str]:
        for df in at.dataframe:
            frame = df.value
            if {"section", "label"} <= set(frame.columns) and section in set(frame["section"]):
                return list(frame.loc[frame["section"] == section, "label"])
        raise AssertionError(f"no labelled frame of section {section}")

    overview = page("overview.py")
    assert any(MARK in w.value for w in overview.warning)
    shown = labels(overview, "validity")
    assert shown and all(lab in (f"audited — {MARK}", "insufficient evidence") for lab in shown)
    assert f"audited — {MARK}" in shown

    modes = page("modes.py")
    assert any(MARK in w.value for w in modes.warning)  # mode numbers rest on the judge too
    shown = labels(modes, "modes")
    assert f"audited — {MARK}" in shown and "audited" not in shown
