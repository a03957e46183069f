"""The frozen rubric's own ``[gate]`` table decides the gate at store level: the same
labels pass under one rubric and fail under another, and the report carries the
rubric's thresholds. Values are pinned and checked against sklearn."""

from __future__ import annotations

from pathlib import Path

import pytest
from sklearn.metrics import f1_score, precision_score, recall_score

from rcea.annotation.payloads import ParsedAnnotation
from rcea.audits.thresholds import GateThresholds
from rcea.study.labelling import PAIR, bind_existing
from rcea.study.pair_audit.freeze import freeze_partition_from_modes, freeze_rubric
from rcea.study.pair_audit.gate import gate_status
from rcea.study.pair_audit.labels import record_annotation
from rcea.study.pair_audit.sampling import audit_pairs, draw_audit
from rcea.study.store import session_scope
from rcea.study.store.models import Audit, AuditTask
from tests.support.helpers import RUBRIC, audit_study, fake_person, fake_tasks, rubric_file

DEFAULTS = GateThresholds().to_dict()


def _flip(label: str) -> str:
    return "different" if label == "same" else "same"


def final_gate(engine, tmp_path: Path, gate_table: str, *, n_flip: int, adjudicate_to: str):  # type: ignore[no-untyped-def]
    """Freeze a rubric with ``gate_table``, draw the audit, label it and return the final
    gate. A gives every pair its automatic label (``same`` when uncertain); B flips the
    first ``n_flip`` pairs; the adjudicator sides with ``adjudicate_to`` ("A" or "B")."""
    audit_study(engine, tmp_path)
    with session_scope(engine) as s:
        freeze_rubric(s, path=rubric_file(tmp_path, RUBRIC + gate_table), actor="r")
        freeze_partition_from_modes(s, study="s", actor="r")
        audit_id = draw_audit(s, study="s", rubric="test-rubric", actor="r").id
    tasks = fake_tasks(engine, audit_id)
    with session_scope(engine) as s:
        pairs = audit_pairs(s, audit_id=audit_id)
    a = {p.id: p.automatic or "same" for p in pairs}
    b = {p.id: _flip(a[p.id]) if k < n_flip else a[p.id] for k, p in enumerate(pairs)}
    ann_id = iter(range(1, 10_000))
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        for role, labels, user in (("A", a, 11), ("B", b, 12)):
            for pid, label in labels.items():
                parsed = ParsedAnnotation(
                    next(ann_id), tasks[role][pid], None, user, label, None, False
                )
                record_annotation(s, audit, parsed, source="test")
        bind_existing(
            s, PAIR, audit, "adjudicator", person=fake_person("adjudicator"), user_id=13,
            project_id=3,
        )  # fmt: skip
        for p in pairs[:n_flip]:
            s.add(
                AuditTask(
                    audit_id=audit_id,
                    role="adjudicator",
                    pair_id=p.id,
                    project_id=3,
                    task_id=3000 + p.id,
                    left_is_a=True,
                )
            )
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        for p in pairs[:n_flip]:
            label = (a if adjudicate_to == "A" else b)[p.id]
            parsed = ParsedAnnotation(next(ann_id), 3000 + p.id, 3, 13, label, None, False)
            record_annotation(s, audit, parsed, source="test")
    with session_scope(engine) as s:
        res = gate_status(s, s.get(Audit, audit_id), final=True)
    return res, pairs, a, b


# (gate table, B flips, adjudicator sides with, status, failed requirements)
CASES = {
    "defaults pass": ("", 1, "A", "passed", []),
    "stricter F1_HH fails": ("human_human_macro_f1_min = 0.95", 1, "A", "failed",
                             ["human_human_macro_f1"]),
    "stricter coverage fails": ("automatic_coverage_min = 0.97", 1, "A", "failed",
                                ["automatic_coverage"]),
    "defaults fail F1_HH": ("", 4, "A", "failed", ["human_human_macro_f1"]),
    "looser F1_HH passes": ("human_human_macro_f1_min = 0.7", 4, "A", "passed", []),
    "defaults pass, automatic side": ("", 2, "B", "passed", []),
    "stricter automatic side fails": (
        "automatic_macro_f1_min = 0.9\ndifferent_precision_min = 0.95\n"
        "different_recall_min = 0.95\ngap_max = 0.01", 2, "B", "failed",
        ["automatic_macro_f1", "different_precision", "different_recall"]),
    "defaults fail both F1": ("", 3, "B", "failed",
                              ["human_human_macro_f1", "automatic_macro_f1"]),
    "looser both F1 pass": ("human_human_macro_f1_min = 0.8\nautomatic_macro_f1_min = 0.8",
                            3, "B", "passed", []),
}  # fmt: skip
# (B flips, adjudicator) -> (F1_HH, F1_auto, different precision, different recall), pinned
VALUES = {
    (1, "A"): (0.939799331103679, 1.0, 1.0, 1.0),
    (4, "A"): (0.7662337662337663, 1.0, 1.0, 1.0),
    (2, "B"): (0.875, 0.875, 11 / 12, 11 / 12),
    (3, "B"): (0.8193979933110368, 0.8193979933110368, 10 / 12, 10 / 11),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_frozen_rubric_gate_table_decides_the_status(engine, tmp_path: Path, case: str) -> None:  # type: ignore[no-untyped-def]
    table, n_flip, side, status, failed = CASES[case]
    gate_table = f"\n[gate]\n{table}\n" if table else ""
    res, pairs, a, b = final_gate(engine, tmp_path, gate_table, n_flip=n_flip, adjudicate_to=side)
    rep = res["report"]
    assert (res["stage"], res["status"], rep["passed"]) == ("final", status, status == "passed")
    assert [r["name"] for r in rep["requirements"] if not r["passed"]] == failed
    # the report carries the rubric's thresholds, defaults where the table is silent
    expected = dict(DEFAULTS)
    for line in table.splitlines():
        key, value = (x.strip() for x in line.split("="))
        expected[key] = float(value)
    assert rep["thresholds"] == expected
    by_name = {r["name"]: r for r in rep["requirements"]}
    assert by_name["human_human_macro_f1"]["threshold"] == expected["human_human_macro_f1_min"]
    assert by_name["gap"]["threshold"] == expected["gap_max"]
    # the values, independently: sklearn over the pairs with an automatic label
    ev = [p for p in pairs if p.automatic is not None]
    ref = {p.id: (a if side == "A" else b)[p.id] for p in pairs}
    hh = f1_score([a[p.id] for p in ev], [b[p.id] for p in ev], average="macro")
    auto, refs = [p.automatic for p in ev], [ref[p.id] for p in ev]
    f1_auto = f1_score(refs, auto, average="macro")
    assert rep["human_human_macro_f1"] == pytest.approx(hh, abs=1e-12)
    assert rep["automatic_macro_f1"] == pytest.approx(f1_auto, abs=1e-12)
    assert rep["gap"] == pytest.approx(hh - f1_auto, abs=1e-12)
    assert rep["different_precision"] == pytest.approx(
        precision_score(refs, auto, pos_label="different", zero_division=0), abs=1e-12
    )
    assert rep["different_recall"] == pytest.approx(
        recall_score(refs, auto, pos_label="different", zero_division=0), abs=1e-12
    )
    assert rep["automatic_coverage"] == pytest.approx(29 / 30)
    hh_pin, auto_pin, prec_pin, rec_pin = VALUES[(n_flip, side)]
    assert rep["human_human_macro_f1"] == pytest.approx(hh_pin, abs=1e-12)
    assert rep["automatic_macro_f1"] == pytest.approx(auto_pin, abs=1e-12)
    assert rep["different_precision"] == pytest.approx(prec_pin, abs=1e-12)
    assert rep["different_recall"] == pytest.approx(rec_pin, abs=1e-12)
