"""Every attempt on the record (docs/publication.md "Every attempt"): the study's audit
events as a hash chain the bundle carries (each entry hashes its predecessor), and the
list of every pair audit, calibration and accepted-set check derived from them.

Pure functions of the serialized events and of each attempt's own labels
(:mod:`rcea.study.report.attempt_labels`), so ``rcea report verify`` re-derives the chain, the
attempts, their label counts and every decided outcome with its gate or acceptance values
from the bundle alone (:func:`rederive`); an attempt dropped from the bundle breaks the
chain (and, signed, cannot be re-chained), and labels edited so that a recorded outcome no
longer follows fail verify."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from rcea.audits.acceptance import (
    ACCEPTED_CONFIDENCE,
    JudgeAcceptance,
    accepted_acceptance,
    calibration_acceptance,
)
from rcea.audits.calibration import accepted_set_precision, calibration_figures
from rcea.audits.gates import needs_adjudication
from rcea.audits.rubric import Rubric, parse_rubric
from rcea.audits.sequential import planned_gate
from rcea.study import events

#: the event kinds that make up the audit record of a study
AUDIT_EVENT_KINDS = (
    events.PARTITION_FREEZE,
    events.AUDIT_SAMPLE,
    events.GATE_INTERIM,
    events.GATE_FINAL,
    events.AUDIT_ABANDON,
    events.JUDGE_RUN,
    events.CALIBRATION_SAMPLE,
    events.CALIBRATION_COMPLETED,
    events.ACCEPTED_SAMPLE,
    events.ACCEPTED_COMPLETED,
    events.CALIBRATION_ABANDON,
    events.ACCEPTED_ABANDON,
)
GENESIS = "0" * 64
PAIR_KIND = "pair audit"
CALIBRATION_KIND = "calibration"
ACCEPTED_KIND = "accepted-set check"
ABANDONED = "abandoned"


def label_key(kind: str, name: str | None) -> str:
    """The key of one attempt's labels in ``attempt_labels`` (``KIND:NAME``)."""
    return f"{kind}:{name}"


def count_labels(kind: str, labels: dict[str, Any] | None) -> int | None:
    """The human labels an attempt counts: A, B and adjudicated labels of a pair audit;
    the held-out human reference labels of a calibration; A's and B's labels of an
    accepted-set check (``None``: the labels are not carried)."""
    if labels is None:
        return None
    if kind == PAIR_KIND:
        return sum(p.get(r) is not None for p in labels["pairs"] for r in ("A", "B", "adjudicated"))
    if kind == CALIBRATION_KIND:
        return sum(i.get("human") is not None for i in labels["items"])
    return sum(i.get(r) is not None for i in labels["items"] for r in ("A", "B"))


def _digest(entry: dict[str, Any]) -> str:
    body = {k: entry[k] for k in ("id", "time", "actor", "kind", "payload", "prev")}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def chain(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` (``id``, ``time``, ``actor``, ``kind``, ``payload``, in log order) with
    ``prev`` (the predecessor's hash; the first: 64 zeros) and ``hash``."""
    out: list[dict[str, Any]] = []
    prev = GENESIS
    for r in records:
        entry = {k: r[k] for k in ("id", "time", "actor", "kind", "payload")}
        entry["prev"] = prev
        entry["hash"] = prev = _digest(entry)
        out.append(entry)
    return out


def chain_problems(entries: list[dict[str, Any]]) -> list[str]:
    """What breaks the chain (empty: whole): a hash that does not match its entry, a
    ``prev`` that is not its predecessor's hash, ids out of order."""
    bad: list[str] = []
    prev, last_id = GENESIS, None
    for i, e in enumerate(entries):
        if e.get("prev") != prev:
            bad.append(f"audit_events[{i}] (event {e.get('id')}): does not follow its predecessor")
        try:
            digest = _digest(e)
        except (KeyError, TypeError) as exc:
            bad.append(f"audit_events[{i}]: malformed ({exc})")
            digest = None
        if digest != e.get("hash"):
            bad.append(f"audit_events[{i}] (event {e.get('id')}): hash does not match its content")
        if last_id is not None and not (isinstance(e.get("id"), int) and e["id"] > last_id):
            bad.append(f"audit_events[{i}]: event ids out of order")
        prev, last_id = e.get("hash"), e.get("id")  # type: ignore[assignment]  # the bundle's events carry hash and id (checked by the chain above)
    return bad


def _multiplicity(policy: dict[str, Any] | None) -> dict[str, Any]:
    """The stated correction of an attempt's policy and the per-attempt α it implies
    (Bonferroni: 0.05 / max_attempts; none: 0.05; no policy recorded: none)."""
    correction = (policy or {}).get("correction") or "none"
    m = int((policy or {}).get("max_attempts") or 1)
    return {"correction": correction, "alpha": 0.05 / m if correction == "bonferroni" else 0.05}


def _requirements(report: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [
        {k: r.get(k) for k in ("name", "value", "threshold", "passed")}
        for r in (report or {}).get("requirements") or []
    ]


def _flat(design: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in design.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def design_changes(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """Every setting that differs between two attempts' designs (``key`` dotted as
    ``section.setting``, ``before``, ``after``), sorted by key."""
    a, b = _flat(before), _flat(after)
    return [
        {"key": k, "before": a.get(k), "after": b.get(k)}
        for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k)
    ]


def _mark_changes(out: list[dict[str, Any]], designs: dict[int, Any]) -> None:
    """``changed_after_failure`` of each attempt: the design differences from the latest
    earlier FAILED attempt of the same kind in the study (``since``: its name), ``[]``
    when nothing changed or none failed before, ``None`` when a design is not recorded."""
    for i, a in enumerate(out):
        failed = [
            j for j in range(i) if out[j]["kind"] == a["kind"] and out[j]["outcome"] == "failed"
        ]
        if not failed:
            a["changed_after_failure"] = []
            continue
        j = failed[-1]
        if designs.get(i) is None or designs.get(j) is None:
            a["changed_after_failure"] = None
            continue
        a["changed_after_failure"] = [
            {"since": out[j]["name"], **d} for d in design_changes(designs[j], designs[i])
        ]


def attempts(
    entries: list[dict[str, Any]], labels: dict[str, dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Every pair audit, calibration and accepted-set check drawn for the study, in the
    order drawn: what bound it (rubric, partition or judge hash), seed, who drew it and
    when, the reason and attempt number (pair audits), the labels counted (from
    ``labels``, :func:`label_key` → that attempt's labels; ``None`` when not carried), the
    outcome (passed | failed | abandoned: explicitly, with a recorded reason, before any
    final gate | in progress: no decided record yet) and the recorded gate or acceptance
    values."""
    out = _attempts(entries)
    for a in out:
        a["n_labels"] = count_labels(a["kind"], (labels or {}).get(label_key(a["kind"], a["name"])))
    return out


def _attempts(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    by_key: dict[tuple[str, Any], dict[str, Any]] = {}
    designs: dict[int, Any] = {}
    a: dict[str, Any] | None  # the attempt an event starts, or the one it decides (if drawn)
    for e in entries:
        p, kind = e["payload"], e["kind"]
        if kind in (events.AUDIT_SAMPLE, events.CALIBRATION_SAMPLE, events.ACCEPTED_SAMPLE):
            designs[len(out)] = p.get("design")
        if kind == events.AUDIT_SAMPLE:
            a = {
                "kind": PAIR_KIND,
                "name": p.get("name"),
                "rubric_hash": p.get("rubric_hash"),
                "partition_hash": p.get("partition_hash"),
                "judge_hash": None,
                "seed": p.get("seed"),
                "drawn_by": e["actor"],
                "drawn_at": e["time"],
                "attempt": p.get("attempt"),
                "reason": p.get("reason"),
                **_multiplicity(p.get("reaudit")),
                "thresholds": None,
                "n_items": p.get("n_pairs"),
                "outcome": "in progress",
                "decided_at": None,
                "abandon_reason": None,
                "values": [],
                "basis": None,
            }
            by_key[("pair", p.get("audit_id"))] = a
            out.append(a)
        elif kind in (events.CALIBRATION_SAMPLE, events.ACCEPTED_SAMPLE):
            cal = kind == events.CALIBRATION_SAMPLE
            name = p.get("calibration") if cal else p.get("check")
            a = {
                "kind": CALIBRATION_KIND if cal else ACCEPTED_KIND,
                "name": name,
                "rubric_hash": None,
                "partition_hash": None,
                "judge_hash": p.get("judge_hash"),
                "seed": p.get("seed"),
                "drawn_by": e["actor"],
                "drawn_at": e["time"],
                "attempt": p.get("attempt"),
                "reason": p.get("reason"),
                **_multiplicity(p.get("recalibration")),
                "thresholds": p.get("acceptance"),
                "n_items": p.get("held_out") if cal else p.get("size"),
                "outcome": "in progress",
                "decided_at": None,
                "abandon_reason": None,
                "values": [],
                "basis": None,
            }
            by_key[("calibration" if cal else "accepted", name)] = a
            out.append(a)
        elif kind in (events.CALIBRATION_ABANDON, events.ACCEPTED_ABANDON):
            cal = kind == events.CALIBRATION_ABANDON
            name = p.get("calibration") if cal else p.get("check")
            a = by_key.get(("calibration" if cal else "accepted", name))
            if a is not None and a["outcome"] == "in progress":
                a["outcome"] = ABANDONED
                a["decided_at"] = e["time"]
                a["abandon_reason"] = p.get("reason")
        elif kind == events.AUDIT_ABANDON:
            a = by_key.get(("pair", p.get("audit_id")))
            if a is not None and a["outcome"] == "in progress":
                a["outcome"] = ABANDONED
                a["decided_at"] = e["time"]
                a["abandon_reason"] = p.get("reason")
        elif kind == events.GATE_FINAL:
            a = by_key.get(("pair", p.get("audit_id")))
            if a is not None and a["outcome"] != ABANDONED:
                a["outcome"] = p.get("status")
                a["decided_at"] = e["time"]
                a["values"] = _requirements(p.get("report"))
        elif kind in (events.CALIBRATION_COMPLETED, events.ACCEPTED_COMPLETED):
            cal = kind == events.CALIBRATION_COMPLETED
            name = p.get("calibration") if cal else p.get("check")
            a = by_key.get(("calibration" if cal else "accepted", name))
            if a is not None and a["outcome"] != ABANDONED:
                acc = p.get("acceptance")
                a["outcome"] = (
                    "recorded" if acc is None else ("passed" if acc.get("passed") else "failed")
                )
                a["decided_at"] = e["time"]
                a["values"] = _requirements(acc)
                if cal:  # recorded before the basis existed: the balanced sample
                    a["basis"] = (acc or {}).get("basis") or "balanced"
    _mark_changes(out, designs)
    return out


def pair_gate(
    audit: dict[str, Any],
    spec: Rubric,
    *,
    rubric_hash: str | None,
    partition_hash: str | None,
) -> dict[str, Any]:
    """The final pair gate of one audit from its carried labels (``pairs`` with A, B,
    adjudicated and automatic labels, ``automatic_coverage``, ``audited_coverage``) under
    the frozen rubric ``spec``: the plan's boundary decides when there is one
    (docs/sequential-gate.md). Raises ``ValueError`` when it cannot be evaluated."""
    pairs = audit["pairs"]
    scope = spec.adjudication.scope
    both = [i for i, p in enumerate(pairs) if p["A"] is not None and p["B"] is not None]
    need = [
        i
        for i in both
        if needs_adjudication(pairs[i]["A"], pairs[i]["B"], pairs[i]["automatic"], scope)
    ]
    return planned_gate(
        [pairs[i]["pair_key"] for i in both],
        [pairs[i]["question_id"] for i in both],
        [pairs[i]["A"] for i in both],
        [pairs[i]["B"] for i in both],
        {pairs[i]["pair_key"]: pairs[i]["adjudicated"] for i in need},
        [pairs[i]["automatic"] for i in both],
        audit["automatic_coverage"],
        spec.gate,
        scope=scope,
        stage="final",
        plan=spec.sequential,
        n_planned=len(pairs),
        audited_coverage=audit["audited_coverage"],
        rubric_hash=rubric_hash,
        partition_hash=partition_hash,
    )


def rederive(attempt: dict[str, Any], labels: dict[str, Any] | None) -> dict[str, Any] | None:
    """The outcome and gate or acceptance values of a decided ``attempt`` (passed or
    failed), re-derived from its own ``labels`` alone (``None``: not decided, or its
    labels are not carried). A pair audit is re-evaluated under the rubric its labels
    carry (whose hash must be the attempt's); a calibration from its held-out human and
    judge labels, an accepted-set check from A's and B's labels, each against the
    thresholds frozen into its plan. Raises ``ValueError`` naming what cannot be
    re-derived."""
    if labels is None or attempt["outcome"] not in ("passed", "failed"):
        return None
    kind = attempt["kind"]
    if kind == PAIR_KIND:
        if not labels.get("rubric_toml"):
            raise ValueError("its labels carry no rubric")
        spec = parse_rubric(labels["rubric_toml"])
        if spec.content_hash() != attempt["rubric_hash"]:
            raise ValueError(
                f"its labels carry rubric {spec.content_hash()}, the attempt binds "
                f"{attempt['rubric_hash']}"
            )
        data = pair_gate(
            labels,
            spec,
            rubric_hash=attempt["rubric_hash"],
            partition_hash=attempt["partition_hash"],
        )
        passed = bool(data["passed"])
    elif kind == CALIBRATION_KIND:
        done = [i for i in labels["items"] if i.get("human") is not None]
        if not done or len(done) < labels.get("n_items", len(labels["items"])):
            return {"outcome": "in progress", "values": []}
        report = calibration_figures(
            [i["human"] for i in done],
            [i["judge"] for i in done],
            labels.get("population"),  # absent in bundles written before population figures
            **(labels.get("bootstrap") or {}),
        )
        data = calibration_acceptance(report, JudgeAcceptance.from_dict(labels.get("thresholds")))
        passed = data["passed"]
    else:
        both = [i for i in labels["items"] if i.get("A") is not None and i.get("B") is not None]
        if not both or len(both) < labels.get("n_items", len(labels["items"])):
            return {"outcome": "in progress", "values": []}
        precision = accepted_set_precision(
            [i["A"] for i in both], [i["B"] for i in both], ACCEPTED_CONFIDENCE
        )
        data = accepted_acceptance(
            precision.to_dict(), JudgeAcceptance.from_dict(labels.get("thresholds"))
        )
        passed = data["passed"]
    return {"outcome": "passed" if passed else "failed", "values": _requirements(data)}
