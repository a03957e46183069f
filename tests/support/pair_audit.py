"""Pair audits on the store without Label Studio: a study, a frozen rubric, a drawn audit
and A and B labels, so a final gate can be decided (passed or failed by the rubric)."""

from __future__ import annotations

from itertools import count
from pathlib import Path

from rcea.annotation.payloads import ParsedAnnotation
from rcea.study.pair_audit.freeze import freeze_partition_from_modes, freeze_rubric
from rcea.study.pair_audit.labels import record_annotation
from rcea.study.pair_audit.sampling import audit_pairs, draw_audit
from rcea.study.store import session_scope
from rcea.study.store.models import Audit
from tests.support.helpers import audit_study, fake_tasks, rubric_file

#: a rubric whose final gate fails on the helper study (automatic coverage 29/30 < 1)
FAILING_GATE = """
[gate]
automatic_coverage_min = 1.0
"""

_ids = count(1)


def rubric_text(base: str, *extra: str) -> str:
    return base + "".join(extra)


def study_with_rubric(engine, tmp_path: Path, text: str) -> None:  # type: ignore[no-untyped-def]
    """The helper study (5 questions × 6 trajectories), ``text`` frozen, the partition
    frozen from the ingested modes."""
    audit_study(engine, tmp_path)
    with session_scope(engine) as s:
        freeze_rubric(s, path=rubric_file(tmp_path, text), actor="r")
        freeze_partition_from_modes(s, study="s", actor="r")


def label_all(engine, audit_id: int) -> None:  # type: ignore[no-untyped-def]
    """A and B both label every pair with its automatic label ("same" when uncertain):
    no disagreement, nothing to adjudicate, so the final gate can be decided."""
    tasks = fake_tasks(engine, audit_id)
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        for p in audit_pairs(s, audit_id=audit_id):
            for role, user in (("A", 11), ("B", 12)):
                ann = ParsedAnnotation(
                    next(_ids),
                    tasks[role][p.id],
                    {"A": 1, "B": 2}[role],
                    user,
                    p.automatic or "same",
                    None,
                    False,
                )
                record_annotation(s, audit, ann, source="test")


def drawn_and_labelled(engine, *, seed: int | None = None, reason: str | None = None) -> int:  # type: ignore[no-untyped-def]
    """Draw an audit of study ``s`` with the rubric ``test-rubric`` and label it whole."""
    with session_scope(engine) as s:
        kw = {"reason": reason} if reason is not None else {}
        audit_id = draw_audit(s, study="s", rubric="test-rubric", actor="r", seed=seed, **kw).id
    label_all(engine, audit_id)
    return audit_id
