"""Annotator quality of a pair audit (item 4; docs/sequential-gate.md
"Annotator quality"): per person and round (``A`` / ``B`` labelling, ``adjudicator``),
from the counted labels and Label Studio's own timing.

* ``labels`` — counted labels; ``lead_time_median_s`` / ``lead_time_p90_s`` — median
  and 90th percentile (numpy's linear interpolation) of Label Studio's ``lead_time`` over
  the labels that carry one. ``lead_time`` is the annotator's browser's **claim** (any
  number can be posted); the server's ``created_at`` bounds it: ``active_hours`` = Σ over
  labels of min(lead_time, seconds since the person's previous label by ``created_at``;
  the first label: :data:`IDLE_CAP_S`) / 3600, and ``labels_per_active_hour``;
  ``server_gap_median_s`` — median seconds between consecutive ``created_at``;
  ``lead_time_contradictions`` — labels whose claimed lead time exceeds the server time
  since the previous label by more than :data:`TOLERANCE_S`; ``labels_per_hour`` =
  (labels − 1) / hours between the first and last ``created_at`` (``None`` with fewer
  than two timestamps or no span);
* ``vs_reference`` — the person's labels against the final reference (the agreed A/B
  label or the adjudicated one; pairs without a reference yet are left out):
  ``pair_agreement`` (accuracy, macro-F1, per-class precision/recall/F1, confusion);
* ``rolling`` — agreement with the reference over a window of ``window`` consecutive
  labels in ``created_at`` order (agreement over time);
* ``hotspots`` — per question, pairs labelled by both A and B and the share where they
  disagree, highest first;
* ``self_consistency`` (A and B) — with hidden repeats (rubric ``[annotators]
  repeat_share``, :mod:`rcea.study.pair_audit.repeats`): ``n`` repeated pairs the person labelled
  both times, ``same`` of them labelled alike, ``share`` = same / n (``None`` while n is
  0), ``planned`` repeat tasks and ``changed`` (the pair keys labelled differently).

Everything else is computed over the first showing only: a repeat's label never counts
twice.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
from sqlmodel import Session, select

from rcea.audits.agreement import pair_agreement
from rcea.study.labelling import PAIR, bindings
from rcea.study.labelling.record import COUNTED
from rcea.study.pair_audit.labels import ADJUDICATOR, ROLES
from rcea.study.pair_audit.repeats import self_consistency
from rcea.study.pair_audit.sampling import audit_pairs
from rcea.study.store.models import Audit, AuditLabel, AuditTask

__all__ = ["annotator_quality"]

IDLE_CAP_S = 900.0
"""The most a label's claimed lead time adds to ``active_hours`` when the server has no
earlier label of the person to bound it (the first label)."""
TOLERANCE_S = 5.0
"""Claimed lead time beyond the server time since the previous label by more than this is
a contradiction (clock granularity, a label saved while the next task loads)."""


def _bounded_leads(ordered: list[AuditLabel]) -> tuple[list[float], list[float], int]:
    """(each claimed lead time bounded by the server's ``created_at`` gap before it, the
    gaps, how many claims exceed their gap by more than TOLERANCE_S); ``ordered`` by
    ``created_at``."""
    bounded: list[float] = []
    gaps: list[float] = []
    contradictions = 0
    prev = None
    for r in ordered:
        gap = None
        if r.annotated_at is not None and prev is not None:
            gap = max(0.0, (r.annotated_at - prev).total_seconds())
            gaps.append(gap)
        if r.lead_time is not None:
            if gap is not None and r.lead_time > gap + TOLERANCE_S:
                contradictions += 1
            bounded.append(min(r.lead_time, gap if gap is not None else IDLE_CAP_S))
        if r.annotated_at is not None:
            prev = r.annotated_at
    return bounded, gaps, contradictions


def _reference(a: dict[int, str], b: dict[int, str], adj: dict[int, str]) -> dict[int, str]:
    """pair id → final reference label where one exists (adjudicated, else agreed)."""
    out = {p: lab for p, lab in adj.items()}
    for p, la in a.items():
        if p not in out and b.get(p) == la:
            out[p] = la
    return out


def _latest(rows: list[AuditLabel]) -> dict[int, AuditLabel]:
    """pair id → the latest counted label row (as ``current_labels`` picks it)."""
    out: dict[int, AuditLabel] = {}
    for r in sorted(rows, key=lambda r: (r.updated_at, r.annotation_id)):
        if r.pair_id is not None and r.label:
            out[r.pair_id] = r
    return out


def annotator_quality(session: Session, audit: Audit, *, window: int = 20) -> dict[str, Any]:
    """The annotator-quality report of one pair audit (see the module docstring)."""
    rows = session.exec(
        select(AuditLabel).where(AuditLabel.audit_id == audit.id, AuditLabel.status == COUNTED)
    ).all()
    by_role: dict[str, list[AuditLabel]] = defaultdict(list)
    again: dict[str, list[AuditLabel]] = defaultdict(list)  # labels of hidden repeats
    for r in rows:
        if r.role:
            (again if r.repeat else by_role)[r.role].append(r)
    planned: dict[str, int] = defaultdict(int)
    for role in session.exec(
        select(AuditTask.role).where(AuditTask.audit_id == audit.id, AuditTask.repeat == True)  # noqa: E712
    ).all():
        planned[role] += 1
    latest = {role: _latest(rs) for role, rs in by_role.items()}
    labels = {role: {p: r.label for p, r in rs.items()} for role, rs in latest.items()}
    a, b = labels.get("A", {}), labels.get("B", {})
    adj = labels.get(ADJUDICATOR, {})
    reference = _reference(a, b, adj)  # type: ignore[arg-type]  # not checked by hand yet: the label maps may hold None for an unanswered task
    people = {bd.role: bd.person for bd in bindings(session, PAIR, audit.id)}  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    pairs = {p.id: p for p in audit_pairs(session, audit_id=audit.id)}  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional

    persons = []
    for role in (*ROLES, ADJUDICATOR):
        rs = latest.get(role, {})
        if not rs:
            continue
        ordered = sorted(
            rs.values(), key=lambda r: (r.annotated_at or r.updated_at, r.annotation_id)
        )
        leads = np.array([r.lead_time for r in ordered if r.lead_time is not None], dtype=float)
        times = [r.annotated_at for r in ordered if r.annotated_at is not None]
        span_h = (max(times) - min(times)).total_seconds() / 3600 if len(times) >= 2 else 0.0
        with_ref = [r for r in ordered if r.pair_id in reference]
        vs = (
            pair_agreement([r.label for r in with_ref], [reference[r.pair_id] for r in with_ref])  # type: ignore[index]  # a stored row's id is set: SQLModel types every primary key Optional
            if with_ref
            else None
        )
        hits = [r.label == reference[r.pair_id] for r in with_ref]  # type: ignore[index]  # a stored row's id is set: SQLModel types every primary key Optional
        rolling = [
            {"upto": i + 1, "agreement": float(np.mean(hits[i + 1 - window : i + 1]))}
            for i in range(window - 1, len(hits))
        ]
        bounded, gaps, contradictions = _bounded_leads(ordered)
        active = sum(bounded) / 3600 if bounded else None
        persons.append(
            {
                "round": role,
                "person": people.get(role),
                "user_ids": sorted({r.user_id for r in ordered if r.user_id is not None}),
                "labels": len(ordered),
                "of": len(pairs) if role in ROLES else None,
                "n_lead_times": int(leads.size),
                "lead_time_median_s": float(np.median(leads)) if leads.size else None,
                "lead_time_p90_s": float(np.percentile(leads, 90)) if leads.size else None,
                "lead_time_contradictions": contradictions,
                "server_gap_median_s": float(np.median(gaps)) if gaps else None,
                "active_hours": active,
                "labels_per_active_hour": len(leads) / active if active else None,
                "labels_per_hour": (len(times) - 1) / span_h if span_h > 0 else None,
                "first_at": min(times).isoformat() if times else None,
                "last_at": max(times).isoformat() if times else None,
                "n_with_reference": len(with_ref),
                "vs_reference": None if vs is None else vs.to_dict(),
                "rolling_window": window,
                "rolling": rolling,
            }
        )
        if role in ROLES:
            second = {p: r.label for p, r in _latest(again.get(role, [])).items()}
            sc = self_consistency(labels.get(role, {}), second)  # type: ignore[arg-type]  # not checked by hand yet: the label maps may hold None for an unanswered task
            changed = [
                pairs[p].pair_key
                for p in sorted(set(labels.get(role, {})) & set(second))
                if p in pairs and labels[role][p] != second[p]
            ]
            persons[-1]["self_consistency"] = {
                **sc,
                "planned": planned.get(role, 0),
                "changed": sorted(changed),
            }

    per_q: dict[str, dict[str, int]] = defaultdict(lambda: {"both": 0, "disagree": 0})
    for pid, la in a.items():
        if pid in b and pid in pairs:
            q = per_q[pairs[pid].question_id]
            q["both"] += 1
            q["disagree"] += la != b[pid]
    hotspots = sorted(
        (
            {
                "question_id": qid,
                "pairs_both": c["both"],
                "disagreements": c["disagree"],
                "disagreement_share": c["disagree"] / c["both"],
            }
            for qid, c in per_q.items()
        ),
        key=lambda h: (-h["disagreement_share"], -h["disagreements"], h["question_id"]),  # type: ignore[operator]  # a value of a JSON/dict of mixed types; its shape is checked where it is written
    )
    return {
        "audit": audit.name,
        "n_pairs": len(pairs),
        "n_reference": len(reference),
        "annotators": persons,
        "hotspots": hotspots,
    }
