"""Where any study stands, from import to verify, and the one command that advances it
(``rcea status --study S``): each track read from the store by the functions its own
commands use — ``validity_status`` and the calibration's labels, the codebook cycle's
queue, the recorded final gate and the re-audit rule of ``rcea audit sample``, and
``rcea report publish``'s own decision (:func:`rcea.study.report.publish.publishability`).
The pair and calibration steps are the demo walkthrough's (:mod:`rcea.study.progress`),
naming the study instead of the record."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from sqlalchemy import func
from sqlmodel import Session, col, select

from rcea.audits.sampling import ACCEPTED_CHECK_SIZE
from rcea.study import events
from rcea.study.codebook.cycle import cycle_progress
from rcea.study.labelling import VALIDITY
from rcea.study.pair_audit.reaudit import failed_gate_options, reaudit_allowed, reaudit_command
from rcea.study.pair_audit.sampling import audit_pairs
from rcea.study.progress import (
    SERVE,
    NextCommand,
    PairProgress,
    bound_projects,
    calibration_next,
    failed_calibration_step,
    pair_next,
    read_calibration,
    read_pair,
)
from rcea.study.report.publish import publishability
from rcea.study.store.models import Audit, Rubric, Trajectory, ValidityCheck
from rcea.study.store.repository import get_study, latest_payload, payloads
from rcea.study.validity_audit.attempts import current_check
from rcea.study.validity_audit.status import validity_status


def _q(value: str) -> str:
    return shlex.quote(value)


def study_rubric(session: Session, *, study: str, study_id: int) -> Rubric | None:
    """The frozen rubric a study's commands should name: the one its latest audit used,
    else the one ``rcea audit rubric init`` names for it (``STUDY-rubric``), else the
    latest frozen one; ``None`` when none is frozen."""
    audit = session.exec(
        select(Audit).where(Audit.study_id == study_id).order_by(col(Audit.id).desc())
    ).first()
    if audit is not None:
        used = session.exec(select(Rubric).where(Rubric.content_hash == audit.rubric_hash)).first()
        if used is not None:
            return used
    order = col(Rubric.id).desc()
    named = session.exec(select(Rubric).where(Rubric.name == f"{study}-rubric").order_by(order))
    return named.first() or session.exec(select(Rubric).order_by(order)).first()


def study_steps(session: Session, *, study: str) -> list[NextCommand]:
    """Where any study stands, from import to verify, read from the store alone: one
    :class:`NextCommand` per track that applies now (import; validity judge and its
    calibration; codebook and partition; pair audit; report; verify; optionally token
    entropies). Each track reads the state its own commands read (``validity_status``,
    the calibration's labels, the codebook cycle's queue, the recorded final gate, the
    re-audit rule of ``rcea audit sample``); the report track asks
    :func:`~rcea.study.report.publish.publishability`, ``rcea report publish``'s own
    decision. The engine
    behind ``rcea status --study S`` (``rcea demo status`` reads the same pair and
    calibration states)."""
    s = _q(study)
    st = get_study(session, name=study)
    n = 0
    if st is not None:
        n = session.execute(
            select(func.count()).select_from(Trajectory).where(Trajectory.study_id == st.id)
        ).scalar_one()
    if st is None or not n:
        return [
            NextCommand(
                "import",
                "no trajectories" if st is not None else f"no study {study}",
                f"rcea import verl DIR --study {s} --run RUN --model MODEL",
            )
        ]
    sid: int = st.id  # type: ignore[assignment]  # a stored row's id is set: SQLModel types every primary key Optional
    out: list[NextCommand] = []
    rubric = study_rubric(session, study=study, study_id=sid)
    # -- the validity judge and its calibration
    vstat = validity_status(session, study_id=sid)
    out.append(_validity_step(session, study, sid, vstat, rubric))
    judged = vstat["status"] != "no-judge"
    # -- the codebook cycle and the frozen partition
    partition = latest_payload(session, events.PARTITION_FREEZE, sid)
    if not partition:
        cycle = cycle_progress(session, study=study)
        if cycle is None:
            out.append(
                NextCommand(
                    "codebook",
                    "no codebook stage has run",
                    f"rcea codebook run --study {s}",
                    None
                    if judged
                    else "the validity judge run (modes use judge-accepted successes)",
                )
            )
        else:
            state, command = cycle.next_command(study)
            out.append(NextCommand("codebook", state, command))
    # -- the pair audit
    pp: PairProgress | None = None
    if partition:
        latest = session.exec(
            select(Audit).where(Audit.study_id == sid).order_by(col(Audit.id).desc())
        ).first()
        if latest is None:
            out.append(
                NextCommand(
                    "pair audit",
                    "partition frozen; no audit sample",
                    f"rcea audit sample --study {s} --rubric {_q(rubric.name)}",
                )
                if rubric is not None
                else NextCommand(
                    "pair audit",
                    "partition frozen; no rubric frozen (size one to the study, review it, "
                    "then `rcea audit rubric freeze rubric.toml`)",
                    f"rcea audit rubric init --study {s} --out rubric.toml",
                )
            )
        else:
            pp = read_pair(session, latest.name)
            n_pairs = len(audit_pairs(session, audit_id=latest.id))  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            out.append(
                NextCommand(
                    "pair audit",
                    f"audit {latest.name} drawn ({n_pairs} pairs), not pushed",
                    f"rcea audit push --study {s} --annotator-a A_EMAIL --annotator-b B_EMAIL",
                    SERVE,
                )
                if pp is None
                else pair_next(pp, "ADJUDICATOR_EMAIL", study)
            )
            if pp is not None and pp.final_gate == "failed":
                options = failed_gate_options(session, study=study)
                again = reaudit_allowed(session, study=study)
                out.append(
                    NextCommand(
                        "pair audit",
                        "the final gate FAILED; the options: " + " | ".join(options),
                        reaudit_command(study, again)
                        if again is not None
                        else f"rcea report publish --study {s} --entropy-only",
                    )
                )
    # -- the report and its verification
    bundle = latest_payload(session, events.REPORT_PUBLISH, sid).get("bundle")
    if bundle:
        out.append(NextCommand("verify", f"published: {bundle}", f"rcea report verify {bundle}"))
    elif pp is not None and pp.final_gate == "failed":
        pass  # the failed gate's step names what can be published
    elif any(x.command for x in out):
        # publish's decision is asked once nothing before it is left to do (it builds the
        # report): until then the audited numbers wait for the tracks above
        out.append(
            NextCommand(
                "report",
                "the audit-independent numbers are ready; the audited ones wait for the "
                "tracks above",
                f"rcea report build --study {s}",
            )
        )
    else:
        refusals = publishability(session, study=study)
        out.append(
            NextCommand(
                "report",
                "ready to publish (`rcea report publish` would not refuse)",
                f"rcea report publish --study {s} --out reports/",
            )
            if not refusals
            else NextCommand(
                "report",
                "`rcea report publish` refuses the audited numbers: "
                + "; ".join(refusals)
                + "; the audit-independent numbers alone can be published",
                f"rcea report publish --study {s} --entropy-only --out reports/",
            )
        )
    # -- token entropies: optional, offered only where the team has checkpoints
    probe = _probe_step(session, study, sid)
    if probe is not None:
        out.append(probe)
    return out


def _validity_step(
    session: Session, study: str, sid: int, vstat: dict[str, Any], rubric: Rubric | None
) -> NextCommand:
    s = _q(study)
    judge = _q(str(vstat.get("judge_name") or "NAME"))
    status = vstat["status"]
    if status == "no-judge":
        return NextCommand(
            "validity judge",
            "no judge run on this study",
            f"rcea judge run --study {s} --judge NAME",
            "a frozen judge (`rcea judge freeze --name NAME`, once)",
        )
    if status == "calibrated":
        return NextCommand("validity calibration", f"completed ({vstat['calibration']})", None)
    latest, abandoned = current_check(
        session, study_id=sid, kind="calibration", judge_hash=vstat["judge_hash"]
    )
    if latest is None:
        if status == "calibration-failed":  # recorded by another tool, say
            return failed_calibration_step(
                "the validity audit",
                vstat.get("failed_requirements") or [],
                vstat.get("judge_name"),
            )
        if rubric is None:
            return NextCommand(
                "validity calibration",
                f"judge {vstat.get('judge_name')} ran; the calibration sample is sized from "
                "the rubric: size one to the study, review it, then `rcea audit rubric "
                "freeze rubric.toml`",
                f"rcea audit rubric init --study {s} --out rubric.toml",
            )
        return NextCommand(
            "validity calibration",
            f"judge {vstat.get('judge_name')} ran; no calibration sample"
            + (f" (abandoned: {', '.join(abandoned)})" if abandoned else ""),
            f"rcea judge calibrate sample --study {s} --judge {judge} --rubric {_q(rubric.name)}",
        )
    cp = read_calibration(session, latest.name)
    if cp is None:
        return NextCommand(
            "validity calibration",
            f"calibration {latest.name} drawn, not pushed",
            f"rcea judge calibrate push --study {s} --annotator A_EMAIL --annotator B_EMAIL",
            SERVE,
        )
    if status == "calibration-incomplete" and cp.accepted is None:
        return NextCommand(
            "accepted-set check",
            f"calibration {vstat['calibration']} passed; no accepted-set check drawn",
            f"rcea judge accepted sample --study {s} --judge {judge} --size {ACCEPTED_CHECK_SIZE}",
        )
    if cp.completed and cp.accepted is not None and not cp.failed:
        acc_pushed = bound_projects(session, VALIDITY, _check_id(session, cp.accepted), {})
        if not acc_pushed:
            return NextCommand(
                "accepted-set check",
                f"accepted-set check {cp.accepted} drawn, not pushed",
                f"rcea judge accepted push --study {s} --annotator-a A_EMAIL --annotator-b B_EMAIL",
                SERVE,
            )
    return calibration_next(cp, "ADJUDICATOR_EMAIL", study)


def _check_id(session: Session, name: str) -> int:
    row = session.exec(select(ValidityCheck).where(ValidityCheck.name == name)).first()
    assert row is not None and row.id is not None
    return row.id


def _probe_step(session: Session, study: str, sid: int) -> NextCommand | None:
    """Token entropies of the imported trajectories, offered only when some are missing
    *and* the team has checkpoints (a ``probe score`` of this study recorded one that is
    still on disk): never a blocker — the rewards-only and audited numbers need no probe."""
    lacking = session.execute(
        select(Trajectory.run, Trajectory.model, Trajectory.step, func.count())
        .where(Trajectory.study_id == sid, col(Trajectory.mean_token_entropy).is_(None))
        .group_by(col(Trajectory.run), col(Trajectory.model), col(Trajectory.step))
        .order_by(col(Trajectory.run), col(Trajectory.model), col(Trajectory.step))
    ).all()
    if not lacking:
        return None
    scored = payloads(session, events.PROBE_SCORE, sid)
    if not any(p.get("checkpoint") and Path(str(p["checkpoint"])).is_dir() for p in scored):
        return None
    run, model, step, _ = lacking[0]
    return NextCommand(
        "token entropies",
        f"{sum(r[3] for r in lacking)} trajectories at {len(lacking)} checkpoint(s) have "
        "none: optional (the outcome and audited numbers need rewards only)",
        f"rcea probe score --study {_q(study)} --run {_q(run)} --model {_q(model)} "
        f"--step {step} --checkpoint DIR",
        optional=True,
    )


def status_lines(study: str, steps: list[NextCommand]) -> list[str]:
    """``rcea status``'s text: each track's state, the first command marked NEXT."""
    lines = [f"status — study {study}"]
    first = True
    for step in steps:
        lines.append(f"  {step.track}: {step.state}")
        if step.waits_for:
            lines.append(f"    needs {step.waits_for}")
        if step.command and step.optional:
            lines.append(f"    optional: {step.command}")
        elif step.command:
            lines.append(f"    {'NEXT' if first else 'then'}: {step.command}")
            first = False
    if first:
        lines.append("  done: every step is finished")
    return lines
