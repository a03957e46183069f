"""Publishing: the refusal rule and the bundle writer.

Refusal rule (DESIGN.md "Freeze semantics"): a report is refused while any quantity that
depends on the partition rests on a partition without a passing final gate bound to it,
or any quantity that depends on validity rests on a judge without a completed calibration
bound to its hash. The refusal names every missing gate. With ``entropy_only`` only the
audit-independent quantities are published (every audit-dependent section is emptied)
and the bundle is labelled ``entropy-only (no audit)`` — as is any bundle none of whose
numbers rests on an audit (a study without validity verdicts or modes publishes so without
the flag); otherwise its scope is ``full (audited)``.

A bundle is the directory ``<out>/<study>-<UTC %Y%m%dT%H%M%SZ>/`` holding ``report.html``
(self-contained), ``report.json`` (the published report plus ``scope``), ``figures/*.png``,
``rubric.toml`` (frozen source text of the gate's rubric), ``gate.json`` (the pair-audit
state with the final gate report), ``calibration.json`` (the validity status with the
calibration report), the last three only when the published numbers rest on them,
``rarefaction.json`` (with published retention: per checkpoint its base, the estimator
settings, the mode labels of both checkpoints per question and the stored rarefaction
draws, so that every retention number is recomputable from the bundle with
``audits.rarefied_retention(..., stored_draws=...)``; the same entries are stored as
``rarefaction_draws`` measurements), and
``hashes.json`` (rubric, partition, judge and record-set hashes, and the SHA-256 of every
other bundle file). It is written into a temporary sibling directory and renamed into
place after the ``report.publish`` event is appended, so a failure leaves no bundle.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlmodel import Session, select

from app.report.build import ENTROPY_ONLY_LABEL, build_report
from app.store import append_event, list_events, require_study
from app.store.models import Rubric
from pipeline.safety import path_under, write_private

# Appended by `rcea demo --simulate-annotators` for every simulated labelling round.
SIMULATED_EVENT = "demo.simulated"

PUBLISH_EVENT = "report.publish"
FULL_SCOPE = "full (audited)"


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


def strip_audited(report: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``report`` without any audit-dependent number: per-checkpoint
    ``validity``, ``modes`` and ``retention`` and the ``association`` become ``None`` and
    ``quantities`` keeps those with ``depends_on == []``."""
    out = copy.deepcopy(report)
    for c in out["checkpoints"]:
        c["validity"] = c["modes"] = c["retention"] = None
        c["retention_error"] = None
    out["association"] = None
    out["quantities"] = [q for q in out["quantities"] if not q["depends_on"]]
    return out


def publish_report(
    session: Session,
    *,
    study: str,
    out_dir: Path,
    actor: str,
    entropy_only: bool = False,
    **params: Any,
) -> dict[str, Any]:
    """Build, check and write the bundle; returns ``{"bundle", "scope", "hashes",
    "files", "n_quantities"}``. Raises :class:`PublishRefused` (nothing written, no
    event) unless every quantity is publishable or ``entropy_only`` is set. ``params``
    go to :func:`build_report`."""
    require_study(session, name=study)
    report = build_report(session, study=study, include_draws=True, **params)
    rarefaction = _rarefaction(session, report)
    reasons = refusal_reasons(report)
    if reasons and not entropy_only:
        raise PublishRefused(reasons)
    if entropy_only:
        report = strip_audited(report)
    uses = {d for q in report["quantities"] for d in q["depends_on"]}
    scope = FULL_SCOPE if uses else ENTROPY_ONLY_LABEL
    report["scope"] = scope
    st = require_study(session, name=study)
    # Labels produced by `rcea demo --simulate-annotators` are not people's: say so in the
    # bundle itself, not only beside it.
    report["simulated"] = bool(list_events(session, kind=SIMULATED_EVENT, study_id=st.id))
    pair = report["audits"]["pair"]
    val = report["audits"]["validity"]

    out_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    final = _bundle_path(out_dir, study)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=out_dir))
    try:
        if "partition" in uses and rarefaction:
            _store_rarefaction(session, st.id, pair, rarefaction)
        else:
            rarefaction = []
        files = _write_bundle(session, tmp, report, scope, pair, val, uses, rarefaction)
        hashes = {
            "rubric_hash": pair["rubric_hash"] if "partition" in uses else None,
            "partition_hash": pair["partition_hash"] if "partition" in uses else None,
            "judge_hash": val.get("judge_hash") if "validity" in uses else None,
            "record_set_hash": report["record_set_hash"],
            "simulated": report["simulated"],
            "files": files,
        }
        write_private(tmp / "hashes.json", (json.dumps(hashes, indent=2) + "\n").encode())
        append_event(
            session,
            actor=actor,
            kind=PUBLISH_EVENT,
            study_id=st.id,
            payload={
                "bundle": str(final),
                "scope": scope,
                "n_quantities": len(report["quantities"]),
                **{k: v for k, v in hashes.items() if k not in ("files", "simulated")},
                "simulated": report["simulated"],
                "report_json_sha256": files["report.json"],
            },
        )
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {
        "bundle": str(final),
        "scope": scope,
        "hashes": hashes,
        "files": sorted([*files, "hashes.json"]),
        "n_quantities": len(report["quantities"]),
    }


def _bundle_path(out_dir: Path, study: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = path_under(out_dir, study, suffix=f"-{stamp}")
    n = 2
    while path.exists():
        path = path_under(out_dir, study, suffix=f"-{stamp}-{n}")
        n += 1
    return path


def _write_bundle(
    session: Session,
    tmp: Path,
    report: dict[str, Any],
    scope: str,
    pair: dict[str, Any],
    val: dict[str, Any],
    uses: set[str],
    rarefaction: list[dict[str, Any]],
) -> dict[str, str]:
    """Write every file except ``hashes.json``; returns ``{relative path: sha256}``."""
    from app.report.figures import make_figures
    from app.report.html import render_html

    written: dict[str, str] = {}

    def put(rel: str, data: bytes) -> None:
        path = tmp / rel
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private(path, data)
        written[rel] = hashlib.sha256(data).hexdigest()

    put("report.json", (json.dumps(report, indent=2, allow_nan=False) + "\n").encode())
    figures = make_figures(report)
    for name, png in figures.items():
        put(f"figures/{name}.png", png)
    if "partition" in uses:
        rubric = session.exec(
            select(Rubric).where(Rubric.content_hash == pair["rubric_hash"])
        ).first()
        if rubric is not None:
            put("rubric.toml", rubric.source_text.encode())
        put("gate.json", (json.dumps(pair, indent=2) + "\n").encode())
    if rarefaction:
        put("rarefaction.json", (json.dumps(rarefaction, indent=1) + "\n").encode())
    if "validity" in uses:
        put("calibration.json", (json.dumps(val, indent=2, default=str) + "\n").encode())
    html = render_html(
        report,
        scope=scope,
        figures=figures,
        hashes={
            "record_set_hash": report["record_set_hash"],
            "rubric_hash": pair["rubric_hash"] if "partition" in uses else None,
            "partition_hash": pair["partition_hash"] if "partition" in uses else None,
            "judge_hash": val.get("judge_hash") if "validity" in uses else None,
            "files": dict(written),
        },
    )
    put("report.html", html.encode())
    return written


def _rarefaction(session: Session, report: dict[str, Any]) -> list[dict[str, Any]]:
    """Take the draws out of every checkpoint's retention (they stay out of
    ``report.json``) and pair them with the mode labels they index, per checkpoint: the
    bundle's ``rarefaction.json`` (DESIGN.md item 5: the draws are stored, not the seed)."""
    from app.report.build import mode_labels, study_trajectories

    withdraws = [c for c in report["checkpoints"] if c["retention"] and "draws" in c["retention"]]
    if not withdraws:
        return []
    rows = study_trajectories(session, report["study_id"])
    modes = mode_labels(
        session, rows, report["audits"]["pair"], report["audits"]["validity"]["filter"] == "judge"
    )
    out = []
    for c in withdraws:
        r = c["retention"]
        draws = r.pop("draws")
        b = r["base"]
        base = modes[(b["run"], b["model"], b["step"])]
        ckpt = modes[(c["run"], c["model"], c["step"])]
        out.append(
            {
                "run": c["run"],
                "model": c["model"],
                "step": c["step"],
                "base": b,
                "retention": r["retention"],
                "settings": {k: r[k] for k in ("seed", "n_min", "n_draws", "n_boot", "confidence")},
                # every question's labels (positions in these lists are what the draws
                # index); draws only for the eligible questions
                "base_labels": base,
                "checkpoint_labels": ckpt,
                "draws": draws,
            }
        )
    return out


def _store_rarefaction(
    session: Session, study_id: int, pair: dict[str, Any], entries: list[dict[str, Any]]
) -> None:
    """One ``rarefaction_draws`` measurement per checkpoint, keyed by the partition."""
    from app.store.measurements import record_measurement

    key = str(pair.get("partition_hash") or "mode-column")
    for e in entries:
        record_measurement(
            session,
            study_id=study_id,
            kind="rarefaction_draws",
            run=e["run"],
            model=e["model"],
            step=e["step"],
            key=key,
            payload=e,
        )
