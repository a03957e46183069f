"""Publishing: the bundle writer. The refusal rule itself is in
:mod:`rcea.study.report.publication`: a report is refused while any quantity that
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
other bundle file). It is written into a temporary sibling directory, checked with
:func:`rcea.study.report.verify.verify_bundle` (a bundle that does not verify is refused), and
renamed into place after the ``report.publish`` event is appended, so a failure leaves no
bundle. ``inputs.json`` carries what every number is computed from (docs/publication.md).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlmodel import Session, select

import rcea.study.validity_audit.labelling as jl
from rcea import DISTRIBUTION, __version__
from rcea.audits.partition import partition_hash
from rcea.audits.rubric import parse_rubric
from rcea.pipeline.safety import path_under, write_private
from rcea.study.pair_audit.freeze import FreezeError, partition_modes
from rcea.study.pair_audit.gate import gate_status
from rcea.study.report.attempt_labels import audited_pairs
from rcea.study.report.build import with_time
from rcea.study.report.compute import compute_report, mode_labels_from_rows
from rcea.study.report.figures import make_figures
from rcea.study.report.html import render_html
from rcea.study.report.inputs import gather_inputs
from rcea.study.report.parameters import ReportParameters
from rcea.study.report.publication import (
    BUNDLE_FORMAT,
    ENTROPY_ONLY_LABEL,
    PUBLISH_EVENT,
    SIMULATED_EVENT,
    PublishRefused,
    publication_scope,
    refusal_reasons,
    strip_audited,
)
from rcea.study.report.schema import report_json, report_json_schema_text
from rcea.study.report.signing import sign_bundle
from rcea.study.report.verify import compare, verify_bundle
from rcea.study.store import append_event, list_events, require_study
from rcea.study.store.measurements import record_measurement
from rcea.study.store.models import (
    Audit,
    CodebookExport,
    Partition,
    Rubric,
    Trajectory,
    ValidityCheck,
)
from rcea.study.validity_audit.checks import HELD_OUT, check_items
from rcea.study.validity_audit.reports import accepted_report, calibration_report


def publish_report(
    session: Session,
    *,
    study: str,
    out_dir: Path,
    actor: str,
    entropy_only: bool = False,
    include_texts: bool = False,
    sign_key: Path | None = None,
    params: ReportParameters | None = None,
    progress: bool = False,
    **overrides: Any,
) -> dict[str, Any]:
    """Build, check and write the bundle; returns ``{"bundle", "scope", "hashes",
    "files", "n_quantities"}``. Raises :class:`PublishRefused` (nothing written, no
    event) unless every quantity is publishable or ``entropy_only`` is set. ``params``
    (with keyword ``overrides`` of its fields) are the report's
    :class:`~rcea.study.report.parameters.ReportParameters`."""
    require_study(session, name=study)
    inputs = gather_inputs(session, study=study, params=ReportParameters.of(params, **overrides))
    report = report_json(with_time(compute_report(inputs, include_draws=True, progress=progress)))
    rarefaction = _rarefaction(inputs, report)
    if not entropy_only:
        reasons = publication_refusals(session, report)
        if reasons:
            raise PublishRefused(reasons)
    if entropy_only:
        report = strip_audited(report)
    uses = {d for q in report["quantities"] for d in q["depends_on"]}
    scope = publication_scope(report, ENTROPY_ONLY_LABEL)
    report["scope"] = scope
    st = require_study(session, name=study)
    # Labels produced by `rcea demo --simulate-annotators` are not people's: say so in the
    # bundle itself, not only beside it.
    report["simulated"] = bool(list_events(session, kind=SIMULATED_EVENT, study_id=st.id))
    pair = report["audits"]["pair"]
    val = report["audits"]["validity"]

    out_dir = out_dir.absolute()  # the path printed and recorded works from anywhere
    out_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    final = _bundle_path(out_dir, study)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=out_dir))
    try:
        if "partition" in uses and rarefaction:
            _store_rarefaction(session, st.id, pair, rarefaction, report.get("replicates"))  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        else:
            rarefaction = []
        audit = _audit_inputs(session, st.id, pair) if "partition" in uses else None  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        files = _write_bundle(
            session,
            tmp,
            report,
            scope,
            pair,
            val,
            uses,
            rarefaction,
            inputs_json=_inputs_json(session, inputs, audit=audit, entropy_only=entropy_only),
            calibration_items=(
                _calibration_items(session, st.id, val) if "validity" in uses else None  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            ),
            texts=_texts(session, st.id) if include_texts else None,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        )
        hashes = {
            "rubric_hash": pair["rubric_hash"] if "partition" in uses else None,
            "partition_hash": pair["partition_hash"] if "partition" in uses else None,
            "judge_hash": val.get("judge_hash") if "validity" in uses else None,
            "record_set_hash": report["record_set_hash"],
            "simulated": report["simulated"],
            # the head of the audit-event chain: with the signature, no attempt can be
            # dropped and the chain rebuilt (docs/publication.md "Every attempt")
            "audit_events_head": (inputs["audit_events"] or [{"hash": None}])[-1]["hash"],
            "files": files,
        }
        write_private(tmp / "hashes.json", (json.dumps(hashes, indent=2) + "\n").encode())
        if sign_key is not None:
            sign_bundle(tmp, sign_key)
        # A bundle that would not verify is never published.
        check = verify_bundle(tmp)
        if not check.ok:
            raise PublishRefused(
                ["the written bundle does not verify: " + "; ".join(check.mismatches[:10])]
            )
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


def publication_refusals(session: Session, report: dict[str, Any]) -> list[str]:
    """The one publish decision: why ``rcea report publish`` (without ``--entropy-only``)
    refuses ``report`` — a missing gate (:func:`refusal_reasons`), else a recorded gate
    or calibration its stored labels no longer give (:func:`recompute_audits`); empty:
    it publishes."""
    return refusal_reasons(report) or recompute_audits(session, report)


#: bootstrap resamples of the report ``publishability`` builds: whether a number is
#: publishable never rests on its interval, only on which numbers exist and their gates
#: (the least a rubric may predeclare, docs/rubrics.md)
DECISION_N_BOOT = 100


def publishability(
    session: Session, *, study: str, params: ReportParameters | None = None
) -> list[str]:
    """Why ``rcea report publish --study STUDY`` would refuse now (empty: it would
    publish): the report built as publish builds it (intervals from fewer resamples,
    which decide nothing here) and :func:`publication_refusals`, the publisher's own
    decision. What ``rcea status`` asks."""
    params = ReportParameters.of(params, n_boot=DECISION_N_BOOT)
    report = report_json(compute_report(gather_inputs(session, study=study, params=params)))
    return publication_refusals(session, report)


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
    *,
    inputs_json: dict[str, Any],
    calibration_items: list[dict[str, Any]] | None = None,
    texts: list[dict[str, Any]] | None = None,
) -> dict[str, str]:
    """Write every file except ``hashes.json``; returns ``{relative path: sha256}``."""

    written: dict[str, str] = {}

    def put(rel: str, data: bytes) -> None:
        path = tmp / rel
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private(path, data)
        written[rel] = hashlib.sha256(data).hexdigest()

    put("report.json", (json.dumps(report, indent=2, allow_nan=False) + "\n").encode())
    put("inputs.json", (json.dumps(inputs_json, allow_nan=False) + "\n").encode())
    put("report.schema.json", report_json_schema_text().encode())
    if texts is not None:
        put("texts.jsonl", "".join(json.dumps(t) + "\n" for t in texts).encode())
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
        cal = val if calibration_items is None else {**val, "items": calibration_items}
        put("calibration.json", (json.dumps(cal, indent=2, default=str) + "\n").encode())
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


def _rarefaction(inputs: dict[str, Any], report: dict[str, Any]) -> list[dict[str, Any]]:
    """Take the draws out of every checkpoint's retention (they stay out of
    ``report.json``) and pair them with the mode labels they index, per checkpoint: the
    bundle's ``rarefaction.json`` (docs/estimators.md item 5: the draws are stored, not
    the seed)."""

    withdraws = [c for c in report["checkpoints"] if c["retention"] and "draws" in c["retention"]]
    if not withdraws:
        return []
    modes = mode_labels_from_rows(
        inputs["rows"], report["audits"]["pair"], report["audits"]["validity"]["filter"] == "judge"
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
    session: Session,
    study_id: int,
    pair: dict[str, Any],
    entries: list[dict[str, Any]],
    replicates: dict[str, Any] | None,
) -> None:
    """One ``rarefaction_draws`` measurement per checkpoint, keyed by the partition (a
    seeded run's under its run and training seed, not its report label)."""

    key = str(pair.get("partition_hash") or "mode-column")
    seeded = {r["label"]: (r["run"], r["train_seed"]) for r in (replicates or {}).get("runs", [])}
    for e in entries:
        run, train_seed = seeded.get(e["run"], (e["run"], None))
        record_measurement(
            session,
            study_id=study_id,
            kind="rarefaction_draws",
            run=run,
            train_seed=train_seed,
            model=e["model"],
            step=e["step"],
            key=key,
            payload=e,
        )


# --------------------------------------------------------------------------- recompute


def recompute_audits(session: Session, report: dict[str, Any]) -> list[str]:
    """Recompute, instead of trusting, what the recorded events say (docs/publication.md):
    the final gate of the audit the mode numbers rest on, from the stored labels, the
    frozen rubric and the locked partition (``gate_status(final=True)``), and
    the judge calibration from the stored validity labels of the check named by the
    ``judge.calibration.completed`` event (``calibration_report``). Returns a reason per
    difference, naming the requirement/field and both values (empty = all hold)."""

    reasons: list[str] = []
    uses = {d for q in report["quantities"] for d in q["depends_on"]}
    pair = report["audits"]["pair"]
    if "partition" in uses and pair["status"] == "passed" and pair["audit"]:
        reasons += recompute_gate(session, report["study_id"], pair, compare)
    val = report["audits"]["validity"]
    if "validity" in uses and val["status"] == "calibrated":
        reasons += recompute_calibration(session, report["study_id"], val, compare)
        reasons += recompute_accepted(session, report["study_id"], val, compare)
    return reasons


def recompute_accepted(
    session: Session, study_id: int, val: dict[str, Any], compare: Any
) -> list[str]:
    """The accepted-set check behind "calibrated", re-decided from its stored labels
    (``accepted_report``): its recorded acceptance must follow from them."""
    name = val.get("accepted_check")
    check = session.exec(
        select(ValidityCheck).where(ValidityCheck.study_id == study_id, ValidityCheck.name == name)
    ).first()
    if check is None or val.get("accepted_acceptance") is None:
        return []  # recorded by another tool: the bundle's attempts say what is carried
    where = f"judge.accepted.completed ({name})"
    res = accepted_report(session, check)
    if res["status"] != "complete":
        return [f"{where}: status recorded complete, recomputed {res['status']}"]
    lines: list[str] = []
    compare(val["accepted_acceptance"], json.loads(json.dumps(res["acceptance"])), "", lines)
    return [f"{where}: acceptance {line}" for line in lines]


def recompute_gate(
    session: Session, study_id: int, pair: dict[str, Any], compare: Any
) -> list[str]:
    name = pair["audit"]
    audit = session.exec(
        select(Audit).where(Audit.study_id == study_id, Audit.name == name)
    ).first()
    if audit is None:
        return [f"gate.final of audit {name}: the audit is no longer in the store"]
    out = []
    for field in ("rubric_hash", "partition_hash"):
        if getattr(audit, field) != pair[field]:
            out.append(
                f"gate.final of audit {name}: {field} recorded {pair[field]}, "
                f"the audit now binds {getattr(audit, field)}"
            )
    part = session.get(Partition, audit.partition_id)
    if part is not None:
        triples = [
            (q, t, m)
            for t, (q, m) in partition_modes(session, partition_id=part.id).items()  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        ]
        got = partition_hash(triples) if triples else None
        if got != pair["partition_hash"]:
            out.append(
                f"gate.final of audit {name}: partition_hash recorded {pair['partition_hash']}, "
                f"recomputed from the locked partition's assignments {got}"
            )
    rubric = session.exec(select(Rubric).where(Rubric.id == audit.rubric_id)).first()
    if rubric is not None:
        try:
            got = parse_rubric(rubric.source_text).content_hash()
        except ValueError as exc:
            got = f"unparseable ({exc})"
        if got != pair["rubric_hash"]:
            out.append(
                f"gate.final of audit {name}: rubric_hash recorded {pair['rubric_hash']}, "
                f"recomputed from the frozen rubric's text {got}"
            )
    if out:
        return out
    try:
        res = gate_status(session, audit, final=True)
    except (FreezeError, ValueError) as exc:
        return [f"gate.final of audit {name}: the final gate cannot be recomputed ({exc})"]
    if res["status"] != pair["status"]:
        out.append(
            f"gate.final of audit {name}: status recorded {pair['status']}, "
            f"recomputed {res['status']}"
        )
    recorded = {r["name"]: r for r in (pair["gate"] or {}).get("requirements", [])}
    for r in (res["report"] or {}).get("requirements", []):
        old = recorded.get(r["name"])
        if old is None or old["value"] != r["value"] or old["passed"] != r["passed"]:
            was = "absent" if old is None else f"{old['value']!r} (passed {old['passed']})"
            out.append(
                f"gate.final of audit {name}: requirement {r['name']} recorded {was}, "
                f"recomputed {r['value']!r} (passed {r['passed']})"
            )
    lines: list[str] = []
    compare(pair["gate"], json.loads(json.dumps(res["report"])), "gate", lines)
    if lines and not out:
        out.append(
            f"gate.final of audit {name}: recomputed report differs: " + "; ".join(lines[:5])
        )
    return out


def recompute_calibration(
    session: Session, study_id: int, val: dict[str, Any], compare: Any
) -> list[str]:
    name = val.get("calibration")
    check = session.exec(
        select(ValidityCheck).where(ValidityCheck.study_id == study_id, ValidityCheck.name == name)
    ).first()
    if check is None:
        # The event names no stored check (written by another tool): nothing to recompute
        # here; the bundle says so (calibration.json has no items) and verify lists it.
        return []
    where = f"judge.calibration.completed ({name})"
    if check.judge_hash != val["judge_hash"]:
        return [
            f"{where}: judge_hash recorded {val['judge_hash']}, the check binds {check.judge_hash}"
        ]
    res = calibration_report(session, check)
    if res["status"] != "complete":
        return [f"{where}: status recorded complete, recomputed {res['status']}"]
    lines: list[str] = []
    compare(val.get("report"), json.loads(json.dumps(res["report"])), "report", lines)
    if val.get("acceptance") is not None:  # the predeclared acceptance, re-decided
        compare(val["acceptance"], json.loads(json.dumps(res["acceptance"])), "acceptance", lines)
    return [f"{where}: {line}" for line in lines]


# --------------------------------------------------------------------------- bundle inputs


def _audit_inputs(session: Session, study_id: int, pair: dict[str, Any]) -> dict[str, Any] | None:
    """The audited pairs of the gate's audit with A, B, adjudicated and automatic labels,
    and the coverages the gate used (what ``rcea report verify`` re-evaluates it from)."""

    if not pair.get("audit"):
        return None
    audit = session.exec(
        select(Audit).where(
            Audit.study_id == study_id,
            Audit.name == pair["audit"],
            Audit.partition_hash == pair["partition_hash"],
        )
    ).first()
    if audit is None:
        return None
    return audited_pairs(session, audit)


def _inputs_json(
    session: Session,
    inputs: dict[str, Any],
    *,
    audit: dict[str, Any] | None,
    entropy_only: bool,
) -> dict[str, Any]:
    """The bundle's ``inputs.json``: the report's inputs (rows without texts, the
    partition as triples rather than per-row fields), the audited pairs, the codebook
    versions behind the partition, and the software version."""

    pid = inputs["pair"]["partition_id"]
    partition = None
    codebook = None
    if pid is not None:
        partition = sorted(
            [q, t, m] for t, (q, m) in partition_modes(session, partition_id=pid).items()
        )
        part = session.get(Partition, pid)
        export = session.exec(
            select(CodebookExport).where(CodebookExport.partition_id == pid)
        ).first()
        if export is not None and part is not None:
            codebook = {"source": part.source, "versions": export.versions}
    skip = ("in_partition", "partition_mode")
    columns = [k for k in (inputs["rows"][0] if inputs["rows"] else {}) if k not in skip]
    # columnar: one list per trajectory, in the order of ``columns``
    rows = {"columns": columns, "values": [[r[c] for c in columns] for r in inputs["rows"]]}
    return {
        "format": BUNDLE_FORMAT,
        "software": {"name": DISTRIBUTION, "version": __version__},
        "entropy_only": entropy_only,
        "inputs": {**inputs, "rows": rows},
        "partition": partition,
        "codebook": codebook,
        "audit": audit,
    }


def _calibration_items(
    session: Session, study_id: int, val: dict[str, Any]
) -> list[dict[str, Any]] | None:
    """Held-out items (human label, judge verdict) of the completed calibration, when the
    check is stored."""
    check = session.exec(
        select(ValidityCheck).where(
            ValidityCheck.study_id == study_id, ValidityCheck.name == val.get("calibration")
        )
    ).first()
    if check is None:
        return None
    human = _human_reference(session, check, jl.current_labels)
    return [
        {"item_key": i.item_key, "human": human[i.id], "judge": i.judge_verdict}
        for i in check_items(session, check_id=check.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        if i.split == HELD_OUT and i.id in human
    ]


def _human_reference(session: Session, check: Any, current_labels: Any) -> dict[int, str]:
    """item id → the human label the calibration counts: ``human_reference`` of the
    judge labelling module where it exists (agreed or adjudicated label with two
    annotators per item), else the single annotator's label."""

    ref = getattr(jl, "human_reference", None)
    if ref is not None:
        return dict(ref(session, check))
    human: dict[int, str] = {}
    for by_item in current_labels(session, check).values():
        human.update(by_item)
    return human


def _texts(session: Session, study_id: int) -> list[dict[str, Any]]:
    stmt = (
        select(Trajectory.trajectory_id, Trajectory.text)
        .where(Trajectory.study_id == study_id)
        .order_by(Trajectory.id)  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
    )
    return [{"trajectory_id": t, "text": x} for t, x in session.exec(stmt).all()]
