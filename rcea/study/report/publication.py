"""The publication rule: what a bundle may call audited.

A report is refused while any quantity that depends on the partition rests on a partition
without a passing final gate bound to it, or any quantity that depends on validity rests on
a judge without a completed calibration bound to its hash (docs/publication.md); the
refusal names every missing gate. An entropy-only bundle keeps only the audit-independent
quantities (:func:`strip_audited`). Both the publisher (:mod:`rcea.study.report.publish`) and
the verifier (:mod:`rcea.study.report.verify`) apply this one rule.
"""

from __future__ import annotations

import copy
from typing import Any

from rcea.study import events
from rcea.study.report.replicates import strip_audited_replicates

# Appended by `rcea demo --simulate-annotators` for every simulated labelling round.
SIMULATED_EVENT = events.DEMO_SIMULATED

PUBLISH_EVENT = events.REPORT_PUBLISH
#: ``inputs.json`` format tag (what ``rcea report verify`` reads).
BUNDLE_FORMAT = "rcea-bundle-inputs/1"
FULL_SCOPE = "full (audited)"
#: how a pass resting on a design changed after a failed attempt is marked
CHANGED_LABEL = "changed after a failed attempt"


class PublishRefused(ValueError):
    """Publishing would release numbers whose audit has not passed; ``reasons`` names
    each missing gate."""

    def __init__(self, reasons: list[str]) -> None:
        self.reasons = reasons
        super().__init__("refusing to publish: " + "; ".join(reasons))


def refusal_reasons(report: dict[str, Any]) -> list[str]:
    """The missing gates behind the report's unpublishable quantities (empty = none)."""
    deps = {d for q in report["quantities"] if not q["publishable"] for d in q["depends_on"]}
    reasons = []
    pair = report["audits"]["pair"]["blocked_by"]
    val = report["audits"]["validity"]["blocked_by"]
    if "partition" in deps and pair:
        reasons.append(pair)
    if "validity" in deps and val:
        reasons.append(val)
    return reasons


def evidence_lines(quantities: list[dict[str, Any]]) -> list[str]:
    """One line per number below the predeclared minimum evidence."""
    return [
        f"{q['name']} {q['run']}/{q['model']}/step {q['step']}: {q['evidence']}"
        for q in quantities
        if q.get("evidence")
    ]


def publication_scope(report: dict[str, Any], entropy_only_label: str) -> str:
    """The scope a bundle states: ``full (audited)`` when audit-dependent numbers are
    published, qualified with how many numbers rest on insufficient evidence (never
    called audited); else ``entropy_only_label``. One rule for publish and verify."""
    if not any(q["depends_on"] for q in report["quantities"]):
        return entropy_only_label  # nothing is called audited; the labels say the rest
    scope = FULL_SCOPE
    n = sum(1 for q in report["quantities"] if q.get("evidence"))
    if n:
        scope += f"; {n} number(s) with insufficient evidence, not audited"
    deps = {d for q in report["quantities"] for d in q["depends_on"]}
    for dep, audit, what in (
        ("partition", report["audits"]["pair"], "pair gate"),
        ("validity", report["audits"]["validity"], "judge calibration"),
    ):
        changes = audit.get("changed_after_failure") or []
        if dep in deps and changes:
            keys = ", ".join(c["key"] for c in changes)
            scope += f"; the {what} passed {CHANGED_LABEL} ({changes[0]['since']}: {keys})"
    return scope


#: the dependency → the audit section that gates it and its name in the mark
_GATED = (
    ("partition", "pair", "pair gate", "audit"),
    ("validity", "validity", "judge calibration", "calibration"),
)


def _fmt_setting(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def changed_marks(report: dict[str, Any]) -> dict[str, str]:
    """Dependency (``partition``, ``validity``) → the mark its numbers carry when the
    passing audit they rest on was changed after a failed attempt: ``changed after a
    failed attempt: the judge calibration C2 (since C1: key before → after; …)``."""
    out = {}
    for dep, section, what, name in _GATED:
        audit = report["audits"][section]
        changes = audit.get("changed_after_failure") or []
        if changes:
            diff = "; ".join(
                f"{c['key']} {_fmt_setting(c['before'])} → {_fmt_setting(c['after'])}"
                for c in changes
            )
            out[dep] = (
                f"{CHANGED_LABEL}: the {what} {audit.get(name)} "
                f"(since {changes[0]['since']}: {diff})"
            )
    return out


def mark_changed_quantities(report: dict[str, Any], audited_label: str) -> None:
    """Every quantity labelled ``audited_label`` whose audit passed only after a design
    changed after a failed attempt gets ``changed_after_failure``: the marks of
    :func:`changed_marks` it depends on, joined by "; " (no key otherwise, so bundles
    written before the mark re-derive unchanged). In place; one rule for build and verify."""
    marks = changed_marks(report)
    if not marks:
        return
    for q in report["quantities"]:
        if q["label"] != audited_label:
            continue
        mine = [marks[d] for d in q["depends_on"] if d in marks]
        if mine:
            q["changed_after_failure"] = "; ".join(mine)


def display_label(q: dict[str, Any]) -> str:
    """A quantity's label as every surface shows it: ``audited — changed after a failed
    attempt: …`` for a marked one."""
    mark = q.get("changed_after_failure")
    return f"{q['label']} — {mark}" if mark else str(q["label"])


def strip_audited(report: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``report`` without any audit-dependent number: per-checkpoint
    ``validity``, ``modes`` and ``retention`` and the ``association`` become ``None``,
    ``realization`` and ``mode_tail`` empty, ``mode_covariance`` ``None``, ``replicates``
    without its mode-dependent aggregates, and ``quantities`` keeps those with
    ``depends_on == []``."""
    out = copy.deepcopy(report)
    for c in out["checkpoints"]:
        c["validity"] = c["modes"] = c["retention"] = None
        c["retention_error"] = None
    out["association"] = None
    out["realization"] = []
    out["mode_tail"] = []
    out["replicates"] = strip_audited_replicates(out.get("replicates"))
    out["mode_covariance"] = None
    out["quantities"] = [q for q in out["quantities"] if not q["depends_on"]]
    if "insufficient_evidence" in out:
        out["insufficient_evidence"] = evidence_lines(out["quantities"])
    return out
