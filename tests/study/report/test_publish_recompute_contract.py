"""The publish refusal's recompute (``recompute_gate``, ``recompute_calibration``) pinned
branch by branch on a real store (docs/mutation.md): the recorded ``gate.final`` and
``judge.calibration.completed`` payloads are altered one field at a time and each
difference must be named, with both values, in its exact wording — and nothing else.

The gate comes from the real functions (draw, record annotations, ``gate_status``,
``record_final_gate``) as in ``test_report_publish.py``; the calibration's labels are
written as counted rows, as the sync writes them."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from rcea.study.report.inputs import pair_audit_state
from rcea.study.report.publish import recompute_audits, recompute_calibration, recompute_gate
from rcea.study.report.verify import compare
from rcea.study.store import get_or_create_study, require_study, session_scope
from tests.support.report_study import JUDGE, draw, final_gate, judge, make_report_study, unfreeze


@pytest.fixture
def gated(engine, tmp_path: Path) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """A study whose final gate passed: the study id and the report's pair state."""
    make_report_study(engine, tmp_path)
    judge(engine, calibrated_hash=JUDGE)
    final_gate(engine, draw(engine, tmp_path), passing=True)
    with session_scope(engine) as s:
        sid = require_study(s, name="rep").id
        pair = json.loads(json.dumps(pair_audit_state(s, study_id=sid)))
    assert pair["status"] == "passed" and pair["gate"]["requirements"]
    return {"study_id": sid, "pair": pair}


def _gate(engine, study_id: int, pair: dict[str, Any]) -> list[str]:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        return recompute_gate(s, study_id, pair, compare)


def test_an_unchanged_gate_recomputes_to_nothing(engine, gated) -> None:  # type: ignore[no-untyped-def]
    assert _gate(engine, gated["study_id"], gated["pair"]) == []


def test_the_audit_is_looked_up_in_its_own_study(engine, gated) -> None:  # type: ignore[no-untyped-def]
    """The same audit name under another study is not this audit: it is 'no longer in
    the store' there, whatever the recorded gate says."""
    with session_scope(engine) as s:
        other = get_or_create_study(s, name="other").id
    name = gated["pair"]["audit"]
    assert _gate(engine, other, gated["pair"]) == [
        f"gate.final of audit {name}: the audit is no longer in the store"
    ]
    renamed = {**gated["pair"], "audit": name + "-gone"}
    assert _gate(engine, gated["study_id"], renamed) == [
        f"gate.final of audit {name}-gone: the audit is no longer in the store"
    ]


@pytest.mark.parametrize("field", ["rubric_hash", "partition_hash"])
def test_a_recorded_hash_the_audit_does_not_bind(engine, gated, field: str) -> None:  # type: ignore[no-untyped-def]
    """A recorded hash that differs from the audit's bound one is named twice: against
    what the audit binds, and against what its frozen rubric / locked partition
    recomputes to (the audit's own hash). No gate is recomputed after that."""
    pair = gated["pair"]
    name, true = pair["audit"], pair[field]
    fake = "f" * 64
    what = {
        "rubric_hash": "recomputed from the frozen rubric's text",
        "partition_hash": "recomputed from the locked partition's assignments",
    }[field]
    assert _gate(engine, gated["study_id"], {**pair, field: fake, "status": "failed"}) == [
        f"gate.final of audit {name}: {field} recorded {fake}, the audit now binds {true}",
        f"gate.final of audit {name}: {field} recorded {fake}, {what} {true}",
    ]


def test_a_rubric_that_no_longer_parses(engine, gated) -> None:  # type: ignore[no-untyped-def]
    from rcea.study.store.models import Rubric

    unfreeze(engine, "rubric")
    with engine.begin() as conn:
        conn.execute(sa.update(Rubric).values(source_text="[gate\nthis is not toml"))
    pair = gated["pair"]
    out = _gate(engine, gated["study_id"], pair)
    assert len(out) == 1, out
    head = (
        f"gate.final of audit {pair['audit']}: rubric_hash recorded {pair['rubric_hash']}, "
        "recomputed from the frozen rubric's text unparseable ("
    )
    assert out[0].startswith(head) and out[0].endswith(")"), out


def test_a_partition_without_assignments(engine, gated) -> None:  # type: ignore[no-untyped-def]
    """Assignments deleted behind the lock: the partition hash recomputes to None."""
    from rcea.study.store.models import PartitionAssignment

    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql("DROP TRIGGER IF EXISTS partition_assignment_no_delete")
        else:
            conn.exec_driver_sql(
                "DROP TRIGGER IF EXISTS partition_assignment_frozen ON partition_assignment"
            )
        conn.execute(sa.delete(PartitionAssignment))
    pair = gated["pair"]
    assert _gate(engine, gated["study_id"], pair) == [
        f"gate.final of audit {pair['audit']}: partition_hash recorded {pair['partition_hash']}, "
        "recomputed from the locked partition's assignments None"
    ]


def test_a_recorded_status_the_labels_do_not_give(engine, gated) -> None:  # type: ignore[no-untyped-def]
    pair = {**gated["pair"], "status": "failed"}
    assert _gate(engine, gated["study_id"], pair) == [
        f"gate.final of audit {pair['audit']}: status recorded failed, recomputed passed"
    ]


def test_labels_gone_behind_the_gate(engine, gated) -> None:  # type: ignore[no-untyped-def]
    """Every label deleted after gate.final: the recomputed gate is pending with no report
    at all, which is named once (no requirement lines, no summary)."""
    from rcea.study.store.models import AuditLabel

    with engine.begin() as conn:
        conn.execute(sa.delete(AuditLabel))
    pair = gated["pair"]
    assert _gate(engine, gated["study_id"], pair) == [
        f"gate.final of audit {pair['audit']}: status recorded passed, recomputed pending"
    ]


def test_each_requirement_is_compared_by_value_and_outcome(engine, gated) -> None:  # type: ignore[no-untyped-def]
    pair = gated["pair"]
    name = pair["audit"]
    reqs = pair["gate"]["requirements"]
    assert len(reqs) >= 3
    first, second, third = reqs[0], reqs[1], reqs[2]
    altered = copy.deepcopy(pair)
    altered["gate"]["requirements"][0]["value"] = 0.125  # value only
    altered["gate"]["requirements"][1]["passed"] = not second["passed"]  # outcome only
    del altered["gate"]["requirements"][2]  # absent from the record

    def now(r: dict[str, Any]) -> str:
        return f"recomputed {r['value']!r} (passed {r['passed']})"

    assert _gate(engine, gated["study_id"], altered) == [
        f"gate.final of audit {name}: requirement {first['name']} recorded 0.125 "
        f"(passed {first['passed']}), {now(first)}",
        f"gate.final of audit {name}: requirement {second['name']} recorded "
        f"{second['value']!r} (passed {not second['passed']}), {now(second)}",
        f"gate.final of audit {name}: requirement {third['name']} recorded absent, {now(third)}",
    ]


def test_a_gate_recorded_as_none_names_every_requirement_absent(engine, gated) -> None:  # type: ignore[no-untyped-def]
    pair = gated["pair"]
    out = _gate(engine, gated["study_id"], {**pair, "gate": None})
    assert out == [
        f"gate.final of audit {pair['audit']}: requirement {r['name']} recorded absent, "
        f"recomputed {r['value']!r} (passed {r['passed']})"
        for r in pair["gate"]["requirements"]
    ]


def test_other_report_differences_are_summarised_in_five_lines(engine, gated) -> None:  # type: ignore[no-untyped-def]
    """Requirements intact but the rest of the recorded report differs: one line, the
    first five differences (in ``compare``'s order), joined by '; '."""
    pair = copy.deepcopy(gated["pair"])
    extra = {f"k{i}": i for i in range(7)}
    pair["gate"].update(extra)
    out = _gate(engine, gated["study_id"], pair)
    lines = [f"gate.k{i}: in the bundle ({i}) but not recomputed" for i in range(5)]
    assert out == [
        f"gate.final of audit {pair['audit']}: recomputed report differs: " + "; ".join(lines)
    ]
    one = copy.deepcopy(gated["pair"])
    one["gate"]["k0"] = 0
    assert _gate(engine, gated["study_id"], one) == [
        f"gate.final of audit {pair['audit']}: recomputed report differs: "
        "gate.k0: in the bundle (0) but not recomputed"
    ]


def test_a_requirement_difference_suppresses_the_summary(engine, gated) -> None:  # type: ignore[no-untyped-def]
    pair = copy.deepcopy(gated["pair"])
    pair["gate"]["k0"] = 0
    pair["gate"]["requirements"][0]["value"] = 0.125
    out = _gate(engine, gated["study_id"], pair)
    assert len(out) == 1 and "requirement" in out[0] and "differs" not in out[0], out


def test_recompute_audits_passes_the_report_study_and_pair(engine, gated) -> None:  # type: ignore[no-untyped-def]
    report = {
        "study_id": gated["study_id"],
        "quantities": [{"publishable": True, "depends_on": ["partition"]}],
        "audits": {
            "pair": {**gated["pair"], "status": "passed"},
            "validity": {"blocked_by": None, "status": "none"},
        },
    }
    assert recompute_audits_in(engine, report) == []
    true = gated["pair"]["rubric_hash"]
    report["audits"]["pair"] = {**gated["pair"], "rubric_hash": "e" * 64}
    out = recompute_audits_in(engine, report)
    assert out[0].endswith(f"rubric_hash recorded {'e' * 64}, the audit now binds {true}")


def recompute_audits_in(engine, report: dict[str, Any]) -> list[str]:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        return recompute_audits(s, report)


# --------------------------------------------------------------------------- calibration


def _calibration(engine, *, labelled: int, n_items: int = 4) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """A calibration check of ``n_items`` held-out items (and one development item) with
    ``labelled`` of the held-out ones labelled by its single annotator: the judge says
    valid for all; the human says invalid for the first."""
    from rcea.pipeline.judge.backends import JudgeSpec
    from rcea.study.store.models import ValidityCheck, ValidityItem, ValidityLabel
    from rcea.study.validity_audit.versions import freeze_judge

    with session_scope(engine) as s:
        st = get_or_create_study(s, name="cal")
        jv, _ = freeze_judge(s, name="llm", spec=JudgeSpec("openai", "m", seed=3), actor="r")
        check = ValidityCheck(
            study_id=st.id,
            kind="calibration",
            name="cal-1",
            judge_id=jv.id,
            judge_hash=jv.content_hash,
            seed=1,
            plan={"annotators_per_item": 1},
            created_by="x",
        )
        s.add(check)
        s.flush()
        items = [
            ValidityItem(
                check_id=check.id,
                item_key=f"k{i}",
                trajectory_id=f"t{i}",
                question_id="q",
                split="held_out" if i < n_items else "development",
                judge_verdict="valid",
            )
            for i in range(n_items + 1)
        ]
        s.add_all(items)
        s.flush()
        for i, item in enumerate(items[:labelled]):
            s.add(
                ValidityLabel(
                    check_id=check.id,
                    annotation_id=100 + i,
                    task_id=200 + i,
                    project_id=1,
                    item_id=item.id,
                    role="annotator-1",
                    user_id=7,
                    label="invalid" if i == 0 else "valid",
                    status="counted",
                )
            )
        return {"study_id": st.id, "calibration": "cal-1", "judge_hash": jv.content_hash}


def _cal(engine, study_id: int, val: dict[str, Any]) -> list[str]:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        return recompute_calibration(s, study_id, val, compare)


def _true_report(engine, study_id: int) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    from rcea.study.store.models import ValidityCheck
    from rcea.study.validity_audit.reports import calibration_report

    with session_scope(engine) as s:
        check = s.exec(sa.select(ValidityCheck).where(ValidityCheck.study_id == study_id)).one()[0]
        res = calibration_report(s, check)
    assert res["status"] == "complete"
    return json.loads(json.dumps(res["report"]))


def test_a_completed_calibration_recomputes_to_nothing(engine) -> None:  # type: ignore[no-untyped-def]
    cal = _calibration(engine, labelled=4)
    report = _true_report(engine, cal["study_id"])
    # the human said invalid once, the judge never: 3 of 4 agree
    assert report["accuracy"] == pytest.approx(0.75)
    val = {**cal, "status": "calibrated", "report": report}
    assert _cal(engine, cal["study_id"], val) == []


def test_a_calibration_no_longer_complete(engine) -> None:  # type: ignore[no-untyped-def]
    cal = _calibration(engine, labelled=3)
    val = {**cal, "status": "calibrated", "report": {"accuracy": 1.0}}
    assert _cal(engine, cal["study_id"], val) == [
        "judge.calibration.completed (cal-1): status recorded complete, recomputed pending"
    ]


def test_a_recorded_calibration_report_that_differs(engine) -> None:  # type: ignore[no-untyped-def]
    cal = _calibration(engine, labelled=4)
    report = _true_report(engine, cal["study_id"])
    altered = {**report, "accuracy": 1.0}
    val = {**cal, "status": "calibrated", "report": altered}
    assert _cal(engine, cal["study_id"], val) == [
        f"judge.calibration.completed (cal-1): report.accuracy: published 1.0, "
        f"recomputed {report['accuracy']!r}"
    ]
    del altered["accuracy"]
    altered["extra"] = 1
    assert _cal(engine, cal["study_id"], {**val, "report": altered}) == [
        "judge.calibration.completed (cal-1): report.accuracy: missing from the bundle "
        f"(recomputed {report['accuracy']!r})",
        "judge.calibration.completed (cal-1): report.extra: in the bundle (1) but not recomputed",
    ]


def test_recompute_audits_recomputes_a_calibration(engine) -> None:  # type: ignore[no-untyped-def]
    cal = _calibration(engine, labelled=3)
    report = {
        "study_id": cal["study_id"],
        "quantities": [{"publishable": True, "depends_on": ["validity"]}],
        "audits": {
            "pair": {"blocked_by": None, "status": "none", "audit": None},
            "validity": {**cal, "status": "calibrated", "report": {}},
        },
    }
    assert recompute_audits_in(engine, report) == [
        "judge.calibration.completed (cal-1): status recorded complete, recomputed pending"
    ]


# --------------------------------------------------------------------------- accepted set


def test_the_accepted_set_check_is_re_decided_from_its_labels(engine) -> None:  # type: ignore[no-untyped-def]
    """ "Calibrated" rests on the accepted-set check too: publish re-decides its
    acceptance from the stored labels (``recompute_accepted``)."""
    from rcea.study.report.publish import recompute_accepted
    from rcea.study.store.models import ValidityCheck
    from rcea.study.validity_audit.reports import accepted_report
    from tests.support.validity import stored_check

    both = {"A": ["valid"] * 40, "B": ["valid"] * 40}
    acc = stored_check(engine, kind="accepted", judge=["valid"] * 40, name="acc-1", labels=both)
    pick = sa.select(ValidityCheck).where(ValidityCheck.name == "acc-1")
    with session_scope(engine) as s:
        res = accepted_report(s, s.exec(pick).scalar_one())
    recorded = json.loads(json.dumps(res["acceptance"]))
    val = {"accepted_check": "acc-1", "accepted_acceptance": recorded}
    assert recorded["passed"] is True
    with session_scope(engine) as s:
        assert recompute_accepted(s, acc["study_id"], val, compare) == []
    # B's labels changed behind the recorded acceptance: each difference named
    ten = "SELECT id FROM validity_label WHERE role = 'B' ORDER BY id LIMIT 10"
    with session_scope(engine) as s:
        s.exec(sa.text(f"UPDATE validity_label SET label = 'invalid' WHERE id IN ({ten})"))
    with session_scope(engine) as s:
        lines = recompute_accepted(s, acc["study_id"], val, compare)
    where = "judge.accepted.completed (acc-1): acceptance"
    assert lines and all(x.startswith(where) for x in lines)
    assert any("passed" in x for x in lines), lines
