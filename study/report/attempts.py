"""Every attempt on the record (docs/publication.md "Every attempt"): the study's audit
events as a hash chain the bundle carries (each entry hashes its predecessor), and the
list of every pair audit, calibration and accepted-set check derived from them.

Pure functions of the serialized events, so ``rcea report verify`` re-derives the chain
and the attempts from the bundle alone; an attempt dropped from the bundle breaks the
chain (and, signed, cannot be re-chained)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from study import events

#: the event kinds that make up the audit record of a study
AUDIT_EVENT_KINDS = (
    events.PARTITION_FREEZE,
    events.AUDIT_SAMPLE,
    events.GATE_INTERIM,
    events.GATE_FINAL,
    events.JUDGE_RUN,
    events.CALIBRATION_SAMPLE,
    events.CALIBRATION_COMPLETED,
    events.ACCEPTED_SAMPLE,
    events.ACCEPTED_COMPLETED,
)
GENESIS = "0" * 64


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
        prev, last_id = e.get("hash"), e.get("id")
    return bad


def _requirements(report: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [
        {k: r.get(k) for k in ("name", "value", "threshold", "passed")}
        for r in (report or {}).get("requirements") or []
    ]


def attempts(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every pair audit, calibration and accepted-set check drawn for the study, in the
    order drawn: what bound it (rubric, partition or judge hash), seed, who drew it and
    when, the reason and attempt number (pair audits), the outcome (passed | failed | in
    progress: no decided record yet) and the recorded gate or acceptance values."""
    out: list[dict[str, Any]] = []
    by_key: dict[tuple[str, Any], dict[str, Any]] = {}
    for e in entries:
        p, kind = e["payload"], e["kind"]
        if kind == events.AUDIT_SAMPLE:
            a = {
                "kind": "pair audit",
                "name": p.get("name"),
                "rubric_hash": p.get("rubric_hash"),
                "partition_hash": p.get("partition_hash"),
                "judge_hash": None,
                "seed": p.get("seed"),
                "drawn_by": e["actor"],
                "drawn_at": e["time"],
                "attempt": p.get("attempt"),
                "reason": p.get("reason"),
                "n_items": p.get("n_pairs"),
                "outcome": "in progress",
                "decided_at": None,
                "values": [],
            }
            by_key[("pair", p.get("audit_id"))] = a
            out.append(a)
        elif kind in (events.CALIBRATION_SAMPLE, events.ACCEPTED_SAMPLE):
            cal = kind == events.CALIBRATION_SAMPLE
            name = p.get("calibration") if cal else p.get("check")
            a = {
                "kind": "calibration" if cal else "accepted-set check",
                "name": name,
                "rubric_hash": None,
                "partition_hash": None,
                "judge_hash": p.get("judge_hash"),
                "seed": p.get("seed"),
                "drawn_by": e["actor"],
                "drawn_at": e["time"],
                "attempt": None,
                "reason": None,
                "n_items": p.get("held_out") if cal else p.get("size"),
                "outcome": "in progress",
                "decided_at": None,
                "values": [],
            }
            by_key[("calibration" if cal else "accepted", name)] = a
            out.append(a)
        elif kind == events.GATE_FINAL:
            a = by_key.get(("pair", p.get("audit_id")))
            if a is not None:
                a["outcome"] = p.get("status")
                a["decided_at"] = e["time"]
                a["values"] = _requirements(p.get("report"))
        elif kind in (events.CALIBRATION_COMPLETED, events.ACCEPTED_COMPLETED):
            cal = kind == events.CALIBRATION_COMPLETED
            name = p.get("calibration") if cal else p.get("check")
            a = by_key.get(("calibration" if cal else "accepted", name))
            if a is not None:
                acc = p.get("acceptance")
                a["outcome"] = (
                    "recorded" if acc is None else ("passed" if acc.get("passed") else "failed")
                )
                a["decided_at"] = e["time"]
                a["values"] = _requirements(acc)
    return out
