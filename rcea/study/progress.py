"""The demo's walkthrough per role: what annotator A, annotator B, the adjudicator and the
researcher open and do, and the researcher's exact next command at the current stage.

The stage is read from the store (:func:`read_progress`: labels counted, pairs needing
adjudication, the adjudication pushed, ``gate.final`` recorded, the calibration completed,
a bundle published) and turned into commands by the pure :func:`next_commands`, so running
``rcea demo status`` again after each step always says what comes next. The pair and
calibration steps (:func:`pair_next`, :func:`calibration_next`) are also those of any
study's ``rcea status`` (:mod:`rcea.study.study_status`), there naming the study.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlmodel import Session, select

from rcea.study import events
from rcea.study.labelling import PAIR, VALIDITY
from rcea.study.labelling.bindings import bindings
from rcea.study.pair_audit.gate import recorded_final_gate
from rcea.study.pair_audit.labels import (
    ADJUDICATOR,
    audit_rubric,
    current_labels,
    needs_adjudication,
)
from rcea.study.pair_audit.sampling import audit_pairs
from rcea.study.store.models import Audit, ValidityCheck
from rcea.study.store.repository import get_study, latest_payload
from rcea.study.validity_audit import labelling as validity_labels
from rcea.study.validity_audit.attempts import current_check
from rcea.study.validity_audit.checks import HELD_OUT, check_items
from rcea.study.validity_audit.status import validity_status

ROLE_TITLES = {"A": "annotator A", "B": "annotator B", "adjudicator": "the adjudicator"}


@dataclass(frozen=True)
class Project:
    """One person's Label Studio project of a round (from the labelling bindings)."""

    role: str
    email: str
    url: str  # the project's address on the person's own server
    n_labelled: int


@dataclass(frozen=True)
class PairProgress:
    audit: str
    n_pairs: int
    labelled: dict[str, int]  # A, B → pairs with a counted label
    n_needing_adjudication: int
    n_adjudication_pushed: int  # pairs in the adjudication project (0: none yet)
    n_adjudicated: int
    final_gate: str | None  # passed | failed once a gate.final event is recorded
    projects: list[Project] = field(default_factory=list)


@dataclass(frozen=True)
class CalibrationProgress:
    calibration: str
    double: bool  # two annotators per item (disagreements adjudicated)
    n_items: int  # held-out items
    n_unlabelled: int  # held-out items still waiting for a first-round label
    n_needing_adjudication: int
    n_adjudication_pushed: int
    n_adjudicated: int
    n_reference: int  # held-out items with a human reference
    completed: bool  # judge.calibration.completed recorded for this calibration
    projects: list[Project] = field(default_factory=list)
    # the accepted-set check of the same judge: "calibrated" needs it too
    # (docs/validity-audit.md "Acceptance"); None: none drawn for this judge
    accepted: str | None = None
    accepted_items: int = 0
    accepted_labelled: dict[str, int] = field(default_factory=dict)  # A, B → items
    accepted_completed: bool = False
    # the missed acceptance thresholds of the judge's latest completed calibration or
    # accepted-set check (validity_status "calibration-failed"); empty: none missed
    failed: tuple[str, ...] = ()
    judge_name: str | None = None


@dataclass(frozen=True)
class Progress:
    study: str
    pair: PairProgress | None  # None: the pair audit is not pushed yet
    calibration: CalibrationProgress | None  # None: the calibration is not pushed yet
    bundle: str | None  # the latest published bundle


@dataclass(frozen=True)
class NextCommand:
    track: str  # pair audit | validity calibration | report
    state: str  # where the track stands, in words
    command: str | None  # the researcher's command (None: nothing to run, track done)
    waits_for: str | None = None  # who must act before the command makes progress
    optional: bool = False  # never the NEXT step: nothing waits for it


def _q(value: str) -> str:
    return shlex.quote(value)


def next_commands(p: Progress, adjudicator: str) -> list[NextCommand]:
    """Each track's next step (pair audit, validity calibration, then publishing)."""
    out: list[NextCommand] = []
    if p.pair is None:
        out.append(NextCommand("pair audit", "not pushed yet", "rcea demo"))
    else:
        out.append(pair_next(p.pair, adjudicator))
    if p.calibration is None:
        out.append(NextCommand("validity calibration", "not pushed yet", "rcea demo"))
    else:
        out.append(calibration_next(p.calibration, adjudicator))
    gate_done = p.pair is not None and p.pair.final_gate is not None
    cal_done = p.calibration is not None and p.calibration.completed and not p.calibration.failed
    if p.calibration is not None and p.calibration.accepted is not None:
        cal_done = cal_done and p.calibration.accepted_completed
    study = _q(p.study)
    if p.bundle:
        out.append(NextCommand("report", f"published: {p.bundle}", None))
    elif gate_done and cal_done and p.pair is not None and p.pair.final_gate == "passed":
        out.append(
            NextCommand("report", "ready to publish", f"rcea report publish --study {study}")
        )
    elif gate_done and cal_done:
        out.append(
            NextCommand(
                "report",
                "the final pair gate FAILED: audited numbers cannot be published",
                f"rcea report publish --study {study} --entropy-only",
            )
        )
    else:
        out.append(
            NextCommand(
                "report",
                "waits for the final pair gate and a completed calibration",
                None,
                "the two tracks above",
            )
        )
    return out


#: What to do after a calibration or accepted-set check missed a predeclared threshold
#: (docs/validity-audit.md "Acceptance"), in words; :func:`calibration_remedy_command`
#: is the command that starts it (``rcea status``, ``rcea demo status``, ``rcea judge status``)
CALIBRATION_REMEDY = (
    "validity-dependent numbers cannot be published; the remedy: freeze a revised judge "
    "(a new version), run it and calibrate it anew, or publish without them"
)


def calibration_remedy_command(judge_name: str | None) -> str:
    return f"rcea judge freeze --name {_q(judge_name or 'NAME')} --template TEMPLATE --reason TEXT"


def failed_calibration_step(
    what: str, failed: Sequence[str], judge_name: str | None
) -> NextCommand:
    """The validity track after a missed threshold: FAILED, which ones, the remedy."""
    return NextCommand(
        "validity calibration",
        f"{what} FAILED ({'; '.join(failed)}): {CALIBRATION_REMEDY}",
        calibration_remedy_command(judge_name),
    )


def pair_next(pp: PairProgress, adjudicator: str, study: str | None = None) -> NextCommand:
    """The pair audit's next step. The demo (``study`` None) names the audit and serves
    its own receiver (``--no-receiver-check``); a real study names the study, whose
    latest audit the command acts on (:mod:`rcea.study.targets`), and its receiver is
    ``rcea serve``."""
    audit = f"--audit {_q(pp.audit)}" if study is None else f"--study {_q(study)}"
    a, b, n = pp.labelled.get("A", 0), pp.labelled.get("B", 0), pp.n_pairs
    pre = "" if study is None else f"audit {pp.audit} "  # the demo has one audit
    if a < n or b < n:
        return NextCommand(
            "pair audit",
            f"{pre}labelling: A {a}/{n}, B {b}/{n}",
            f"rcea audit sync {audit}",
            "annotators A and B label every pair (labels also arrive live while `rcea serve` runs)",
        )
    need = pp.n_needing_adjudication
    if need > pp.n_adjudication_pushed:
        receiver = (
            " --no-receiver-check"  # the demo serves this data dir's receiver itself
            if study is None
            else ""
        )
        return NextCommand(
            "pair audit",
            f"{pre}labelled; {need} pair(s) need adjudication, "
            + (
                "none pushed yet"
                if not pp.n_adjudication_pushed
                else f"{pp.n_adjudication_pushed} pushed"
            ),
            f"rcea audit adjudicate {audit} --adjudicator {_q(adjudicator)}{receiver}",
            None if study is None else SERVE,
        )
    if pp.n_adjudicated < need:
        return NextCommand(
            "pair audit",
            f"{pre}adjudication: {pp.n_adjudicated}/{need}",
            f"rcea audit sync {audit}",
            "the adjudicator decides every pushed pair",
        )
    if pp.final_gate is None:
        return NextCommand(
            "pair audit",
            f"{pre}labelled"
            + (f" and {need} pair(s) adjudicated" if need else ", no adjudication needed"),
            f"rcea audit gate --final {audit}",
        )
    return NextCommand("pair audit", f"{pre}final gate {pp.final_gate.upper()}", None)


SERVE = "`rcea serve` answering at RCEA_API_HOST:RCEA_API_PORT (webhooks)"


def calibration_next(
    cp: CalibrationProgress, adjudicator: str, study: str | None = None
) -> NextCommand:
    """The calibration's next step (``study``: as for :func:`_pair_next`)."""
    cal = f"--calibration {_q(cp.calibration)}" if study is None else f"--study {_q(study)}"
    receiver = " --no-receiver-check" if study is None else ""
    pre = "" if study is None else f"calibration {cp.calibration} "  # the demo has one
    if cp.failed:
        return failed_calibration_step(f"calibration {cp.calibration}", cp.failed, cp.judge_name)
    if cp.completed and cp.accepted is not None and not cp.accepted_completed:
        check = f"--check {_q(cp.accepted)}" if study is None else f"--study {_q(study)}"
        done = min(cp.accepted_labelled.get(r, 0) for r in ("A", "B"))
        if done < cp.accepted_items:
            return NextCommand(
                "validity calibration",
                f"calibration completed; accepted-set check {cp.accepted}: A "
                f"{cp.accepted_labelled.get('A', 0)}/{cp.accepted_items}, B "
                f"{cp.accepted_labelled.get('B', 0)}/{cp.accepted_items} labelled",
                f"rcea judge accepted sync {check}",
                "the validity annotators A and B label every accepted-set item",
            )
        return NextCommand(
            "validity calibration",
            f"calibration completed; every item of accepted-set check {cp.accepted} "
            "labelled by A and B",
            f"rcea judge accepted report {check}",
        )
    if cp.completed:
        return NextCommand("validity calibration", f"{pre}completed", None)
    if cp.n_unlabelled:
        return NextCommand(
            "validity calibration",
            f"{pre}labelling: {cp.n_items - cp.n_unlabelled}/{cp.n_items} held-out items labelled",
            f"rcea judge calibrate sync {cal}",
            "the validity annotators label every item",
        )
    if cp.double and cp.n_needing_adjudication > cp.n_adjudication_pushed:
        return NextCommand(
            "validity calibration",
            f"{pre}{cp.n_needing_adjudication} item(s) need adjudication",
            f"rcea judge calibrate adjudicate {cal} --adjudicator {_q(adjudicator)}{receiver}",
            None if study is None else SERVE,
        )
    if cp.double and cp.n_adjudicated < cp.n_needing_adjudication:
        return NextCommand(
            "validity calibration",
            f"{pre}adjudication: {cp.n_adjudicated}/{cp.n_needing_adjudication}",
            f"rcea judge calibrate sync {cal}",
            "the adjudicator decides every pushed item",
        )
    return NextCommand(
        "validity calibration",
        f"every held-out item {'' if study is None else 'of ' + pre}has a human reference "
        f"({cp.n_reference}/{cp.n_items})",
        f"rcea judge calibrate report {cal}",
    )


# --------------------------------------------------------------------------- the store


def bound_projects(
    session: Session, family: Any, owner_id: int, labels: dict[str, dict[str, Any]]
) -> list[Project]:

    return [
        Project(
            role=b.role,
            email=b.person,
            url=f"{b.server_url.rstrip('/')}/projects/{b.project_id}",
            n_labelled=len(labels.get(b.role, {})),
        )
        for b in bindings(session, family, owner_id)
        if b.project_id is not None
    ]


def read_pair(session: Session, audit_name: str) -> PairProgress | None:
    audit = session.exec(select(Audit).where(Audit.name == audit_name)).first()
    if audit is None:
        return None
    projects = bound_projects(session, PAIR, audit.id, current_labels(session, audit))  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    if not any(p.role in ("A", "B") for p in projects):
        return None
    pairs = audit_pairs(session, audit_id=audit.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    labels = current_labels(session, audit)
    todo = needs_adjudication(pairs, labels, audit_rubric(session, audit).adjudication.scope)
    adj = labels.get(ADJUDICATOR, {})
    pushed = latest_payload(session, events.AUDIT_ADJUDICATE, audit.study_id, audit_id=audit.id)
    gate = recorded_final_gate(session, audit) or {}
    return PairProgress(
        audit=audit.name,
        n_pairs=len(pairs),
        labelled={r: len(labels.get(r, {})) for r in ("A", "B")},
        n_needing_adjudication=len(todo),
        n_adjudication_pushed=int(pushed.get("n_pairs", 0)),
        n_adjudicated=sum(p.id in adj for p in todo),
        final_gate=gate.get("status"),
        projects=projects,
    )


def read_calibration(session: Session, name: str) -> CalibrationProgress | None:
    check = session.exec(
        select(ValidityCheck).where(ValidityCheck.name == name, ValidityCheck.kind == "calibration")
    ).first()
    if check is None:
        return None
    labels = validity_labels.current_labels(session, check)
    projects = bound_projects(session, VALIDITY, check.id, labels)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    if not any(p.role != validity_labels.ADJUDICATOR for p in projects):
        return None
    items = [i for i in check_items(session, check_id=check.id) if i.split == HELD_OUT]  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    double = validity_labels.double_labelled(check)
    first = {r: v for r, v in labels.items() if r != validity_labels.ADJUDICATOR}
    if double:
        unlabelled = [i for i in items if not all(i.id in first.get(r, {}) for r in ("A", "B"))]
    else:
        unlabelled = [i for i in items if not any(i.id in v for v in first.values())]
    disputed = validity_labels.needs_adjudication(session, check)
    adj = labels.get(validity_labels.ADJUDICATOR, {})
    ref = validity_labels.human_reference(session, check)
    pushed = latest_payload(
        session, events.judge_round(check.kind, "adjudicate"), check.study_id, check=name
    )
    done = latest_payload(session, events.CALIBRATION_COMPLETED, check.study_id, calibration=name)
    acc, _abandoned = current_check(
        session, study_id=check.study_id, kind="accepted", judge_hash=check.judge_hash
    )
    acc_labels = validity_labels.current_labels(session, acc) if acc is not None else {}
    acc_done = acc is not None and bool(
        latest_payload(session, events.ACCEPTED_COMPLETED, check.study_id, check=acc.name)
    )
    vstat = validity_status(session, study_id=check.study_id)
    failed = (
        vstat.get("failed_requirements") or []
        if vstat["status"] == "calibration-failed" and vstat["judge_hash"] == check.judge_hash
        else []
    )
    return CalibrationProgress(
        calibration=name,
        double=double,
        n_items=len(items),
        n_unlabelled=len(unlabelled),
        n_needing_adjudication=len(disputed),
        n_adjudication_pushed=int(pushed.get("n_items", 0)),
        n_adjudicated=sum(i.id in adj for i in disputed),
        n_reference=sum(i.id in ref for i in items),
        completed=bool(done) and done.get("judge_hash") == check.judge_hash,
        projects=projects,
        accepted=acc.name if acc is not None else None,
        accepted_items=len(check_items(session, check_id=acc.id)) if acc is not None else 0,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        accepted_labelled={r: len(acc_labels.get(r, {})) for r in ("A", "B")},
        accepted_completed=acc_done,
        failed=tuple(failed),
        judge_name=vstat.get("judge_name"),
    )


def read_progress(session: Session, *, study: str, audit: str, calibration: str) -> Progress:
    """Where the demo study stands, from the store only."""

    st = get_study(session, name=study)
    bundle = None
    if st is not None:
        bundle = latest_payload(session, events.REPORT_PUBLISH, st.id).get("bundle")
    return Progress(
        study=study,
        pair=read_pair(session, audit),
        calibration=read_calibration(session, calibration),
        bundle=bundle,
    )


# --------------------------------------------------------------------------- the text


@dataclass(frozen=True)
class Where:
    """Addresses the walkthrough names: each person's server, the files with logins."""

    people: dict[str, str]  # role → e-mail (A, B, adjudicator)
    servers: dict[str, str]  # e-mail → the person's own Label Studio server
    logins_file: Path
    view_url: str
    view_login: str  # where the researcher's view login is
    simulated: bool = False


def walkthrough(p: Progress, where: Where) -> list[str]:
    """The walkthrough per role, then the researcher's next commands (first: NEXT)."""
    sim = "SIMULATED " if where.simulated else ""
    projects = (p.pair.projects if p.pair else []) + (
        p.calibration.projects if p.calibration else []
    )
    lines = [f"walkthrough — study {p.study} (run `rcea demo status` again after each step)"]
    for role, title in ROLE_TITLES.items():
        email = where.people[role]
        server = where.servers.get(email, "(no server yet: `rcea labelstudio add-annotator`)")
        lines.append(f"  {sim}{title} — {email}")
        lines.append(f"    open {server}/user/login/ (password: {where.logins_file}, mode 0600)")
        mine = [pr for pr in projects if pr.email == email]
        for pr in mine:
            what = _what(pr, p)
            lines.append(f"    {what}: {pr.url} ({pr.n_labelled} labelled)")
        if not mine:
            lines.append(
                "    nothing to label yet"
                + (
                    ": the researcher pushes the adjudication when A and B have labelled"
                    if role == "adjudicator"
                    else ""
                )
            )
    steps = next_commands(p, where.people["adjudicator"])
    lines.append(f"  the researcher — view {where.view_url} (login: {where.view_login})")
    first = True
    for s in steps:
        lines.append(f"    {s.track}: {s.state}")
        if s.waits_for:
            lines.append(f"      after {s.waits_for}:")
        if s.command:
            mark = "NEXT" if first else "then"
            first = False
            lines.append(f"      {mark}: {s.command}")
    if first:
        lines.append("    done: every step is finished")
    return lines


def _what(pr: Project, p: Progress) -> str:
    if p.pair and pr in p.pair.projects:
        if pr.role == "adjudicator":
            return "decide each pair's answer (answers in random order, sources hidden)"
        return "label each pair same/different strategy"
    if pr.role == "adjudicator":
        return "decide each disputed validity item"
    return "label each answer's validity"
