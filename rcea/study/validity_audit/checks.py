"""Drawing the human checks of a frozen judge (docs/estimators.md item 12).

* **Calibration** (:func:`sample_calibration`): from the judge's verdicts on the study's
  verifier successes, a seeded sample of ``size`` items balanced between judge-accepted
  (``valid``) and not accepted (``invalid`` or ``unparseable``) — half each, the other
  stratum filling in when one is short — split into ``held_out`` held-out items
  (stratified, proportional to the two strata) and the rest for development. The plan
  comes from a frozen rubric's ``[calibration]`` table (defaults 600 / 117 / seed 0) and
  may be overridden. The judge version and its hash are bound when the sample is drawn
  and the verdict of each item is stored with it: the judge is frozen before any label
  exists; a changed judge is a new version and needs a new calibration.
* **Accepted-set check** (:func:`sample_accepted`): ``size`` trajectories drawn at random
  (seeded) from the production judge's accepted set — the judge of the study's latest
  ``judge.run`` unless named — excluding every trajectory of the study's calibrations.

Items get an opaque key (a hash of check name, seed and trajectory id); items are
immutable in the database.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from sqlmodel import Session, select

from rcea.audits.acceptance import JudgeAcceptance
from rcea.audits.rubric import CalibrationPlan
from rcea.pipeline.judge import VALID
from rcea.study import events
from rcea.study.pair_audit.freeze import get_rubric, rubric_spec
from rcea.study.store import append_event, list_events, require_study
from rcea.study.store.models import JudgeVerdict, JudgeVersion, ValidityCheck, ValidityItem
from rcea.study.validity_audit.status import JUDGE_RUN_EVENT
from rcea.study.validity_audit.versions import JudgeError, get_judge

CALIBRATION, ACCEPTED = "calibration", "accepted"
DEVELOPMENT, HELD_OUT = "development", "held_out"


def item_key(check_name: str, seed: int, trajectory_id: str) -> str:
    return hashlib.sha256(f"{check_name}\x00{seed}\x00{trajectory_id}".encode()).hexdigest()[:20]


def get_check(session: Session, *, name: str | None, kind: str) -> ValidityCheck:
    """The named check of ``kind`` (default: the latest one)."""
    stmt = select(ValidityCheck).where(ValidityCheck.kind == kind)
    if name:
        stmt = stmt.where(ValidityCheck.name == name)
    row = session.exec(stmt.order_by(ValidityCheck.id.desc())).first()  # type: ignore[union-attr]  # SQLModel types a column attribute as its Python value, not as the SQL column
    if row is None:
        what = f"{kind} {name!r}" if name else f"{kind} check"
        raise JudgeError(f"no {what} (draw one with `rcea judge {_cmd(kind)} sample`)")
    return row


def _cmd(kind: str) -> str:
    return "calibrate" if kind == CALIBRATION else "accepted"


def check_items(session: Session, *, check_id: int) -> list[ValidityItem]:
    return list(
        session.exec(
            select(ValidityItem).where(ValidityItem.check_id == check_id).order_by(ValidityItem.id)  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
        ).all()
    )


def _verdicts(session: Session, *, judge_id: int, study_id: int) -> list[JudgeVerdict]:
    return list(
        session.exec(
            select(JudgeVerdict)
            .where(JudgeVerdict.judge_id == judge_id, JudgeVerdict.study_id == study_id)
            .order_by(JudgeVerdict.trajectory_id)
        ).all()
    )


def _new_check(
    session: Session,
    *,
    kind: str,
    study_id: int,
    name: str | None,
    study: str,
    judge: JudgeVersion,
    seed: int,
    plan: dict[str, Any],
    actor: str,
) -> ValidityCheck:
    if name is None:
        n = len(session.exec(select(ValidityCheck).where(ValidityCheck.kind == kind)).all())
        name = f"{study}-{kind}-{n + 1}"
    if session.exec(select(ValidityCheck).where(ValidityCheck.name == name)).first():
        raise JudgeError(f"a check named {name!r} exists already; choose another --name")
    check = ValidityCheck(
        study_id=study_id,
        kind=kind,
        name=name,
        judge_id=judge.id,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        judge_hash=judge.content_hash,
        seed=seed,
        plan=plan,
        created_by=actor,
    )
    session.add(check)
    session.flush()
    return check


def _add_items(
    session: Session, check: ValidityCheck, picked: list[tuple[JudgeVerdict, str]]
) -> None:
    for v, split in picked:
        session.add(
            ValidityItem(
                check_id=check.id,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
                item_key=item_key(check.name, check.seed, v.trajectory_id),
                trajectory_id=v.trajectory_id,
                question_id=v.question_id,
                split=split,
                judge_verdict=v.verdict,
            )
        )
    session.flush()


def acceptance_thresholds(session: Session, *, rubric: str | None) -> JudgeAcceptance:
    """The judge acceptance thresholds of the rubric ``[acceptance]`` (the documented
    defaults without a rubric or without the section: rcea/audits/acceptance.py)."""
    if rubric:
        return rubric_spec(get_rubric(session, name=rubric)).acceptance
    return JudgeAcceptance()


def check_acceptance(check: ValidityCheck) -> JudgeAcceptance:
    """The thresholds frozen into a check's plan when it was drawn (checks drawn before
    thresholds existed: the documented defaults)."""
    return JudgeAcceptance.from_dict(check.plan.get("acceptance"))


def calibration_plan(
    session: Session,
    *,
    rubric: str | None,
    size: int | None,
    held_out: int | None,
    seed: int | None,
) -> CalibrationPlan:
    """The rubric's ``[calibration]`` plan (defaults without one), options overriding."""
    base = CalibrationPlan()
    if rubric:
        spec = rubric_spec(get_rubric(session, name=rubric))
        base = spec.calibration or base
    return CalibrationPlan(
        size=base.size if size is None else size,
        held_out=base.held_out if held_out is None else held_out,
        seed=base.seed if seed is None else seed,
        annotators_per_item=base.annotators_per_item,
    )


def sample_calibration(
    session: Session,
    *,
    study: str,
    judge: str,
    actor: str,
    judge_version: int | None = None,
    rubric: str | None = None,
    size: int | None = None,
    held_out: int | None = None,
    seed: int | None = None,
    name: str | None = None,
) -> ValidityCheck:
    """Draw a balanced, blinded calibration set (see the module docstring)."""
    st = require_study(session, name=study)
    jv = get_judge(session, name=judge, version=judge_version)
    plan = calibration_plan(session, rubric=rubric, size=size, held_out=held_out, seed=seed)
    pool = _verdicts(session, judge_id=jv.id, study_id=st.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    if not pool:
        raise JudgeError(
            f"judge {jv.name} v{jv.version} has no verdicts in study {study!r}: "
            "run `rcea judge run` first"
        )
    n = min(plan.size, len(pool))
    if n < plan.held_out:
        raise JudgeError(
            f"only {len(pool)} judged verifier successes; the plan holds out {plan.held_out}"
        )
    rng = random.Random(f"calibration:{plan.seed}")
    acc = [v for v in pool if v.verdict == VALID]
    rej = [v for v in pool if v.verdict != VALID]
    rng.shuffle(acc)
    rng.shuffle(rej)
    n_acc = min(len(acc), n // 2)
    n_rej = min(len(rej), n - n_acc)
    n_acc = min(len(acc), n - n_rej)
    h_acc = min(n_acc, round(plan.held_out * n_acc / n))
    h_rej = plan.held_out - h_acc
    if h_rej > n_rej:
        h_acc, h_rej = plan.held_out - n_rej, n_rej
    picked = [(v, HELD_OUT if i < h_acc else DEVELOPMENT) for i, v in enumerate(acc[:n_acc])]
    picked += [(v, HELD_OUT if i < h_rej else DEVELOPMENT) for i, v in enumerate(rej[:n_rej])]
    check = _new_check(
        session,
        kind=CALIBRATION,
        study_id=st.id,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        name=name,
        study=study,
        judge=jv,
        seed=plan.seed,
        plan={
            **plan.to_dict(),
            "rubric": rubric,
            "acceptance": acceptance_thresholds(session, rubric=rubric).to_dict(),
            "n_drawn": n,
            "n_pool": len(pool),
            "n_judge_accepted": n_acc,
            "n_judge_not_accepted": n_rej,
            "held_out_judge_accepted": h_acc,
            "held_out_judge_not_accepted": h_rej,
            "balanced": n_acc == n_rej or abs(n_acc - n_rej) <= 1,
        },
        actor=actor,
    )
    _add_items(session, check, picked)
    append_event(
        session,
        actor=actor,
        kind=events.CALIBRATION_SAMPLE,
        study_id=st.id,
        payload={
            "calibration": check.name,
            "judge_hash": jv.content_hash,
            "judge_name": jv.name,
            "judge_version": jv.version,
            **check.plan,
        },
    )
    return check


def production_judge(session: Session, *, study_id: int) -> JudgeVersion:
    """The judge of the study's latest ``judge.run``."""
    runs = list_events(session, kind=JUDGE_RUN_EVENT, study_id=study_id)
    if not runs:
        raise JudgeError("this study has no judge run: run `rcea judge run` first")
    last = runs[-1].payload
    return get_judge(session, name=last["judge_name"], version=last.get("judge_version"))


def sample_accepted(
    session: Session,
    *,
    study: str,
    size: int,
    actor: str,
    judge: str | None = None,
    judge_version: int | None = None,
    seed: int = 0,
    name: str | None = None,
    rubric: str | None = None,
) -> ValidityCheck:
    """Draw ``size`` judge-accepted trajectories outside every calibration set; the
    acceptance threshold (rubric ``[acceptance]``, defaults without one) is frozen into
    the plan."""
    st = require_study(session, name=study)
    jv = (
        get_judge(session, name=judge, version=judge_version)
        if judge
        else production_judge(session, study_id=st.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    )
    calibrated = set(
        session.exec(
            select(ValidityItem.trajectory_id)
            .join(ValidityCheck, ValidityCheck.id == ValidityItem.check_id)  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
            .where(ValidityCheck.study_id == st.id, ValidityCheck.kind == CALIBRATION)
        ).all()
    )
    pool = [
        v
        for v in _verdicts(session, judge_id=jv.id, study_id=st.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        if v.verdict == VALID and v.trajectory_id not in calibrated
    ]
    if size < 1:
        raise JudgeError("--size must be at least 1")
    if len(pool) < size:
        raise JudgeError(
            f"only {len(pool)} judge-accepted trajectories outside the calibration sets; "
            f"asked for {size}"
        )
    picked = random.Random(f"accepted:{seed}").sample(pool, size)
    check = _new_check(
        session,
        kind=ACCEPTED,
        study_id=st.id,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        name=name,
        study=study,
        judge=jv,
        seed=seed,
        plan={
            "size": size,
            "seed": seed,
            "n_pool": len(pool),
            "n_excluded": len(calibrated),
            "rubric": rubric,
            "acceptance": acceptance_thresholds(session, rubric=rubric).to_dict(),
        },
        actor=actor,
    )
    _add_items(session, check, [(v, ACCEPTED) for v in picked])
    append_event(
        session,
        actor=actor,
        kind=events.ACCEPTED_SAMPLE,
        study_id=st.id,
        payload={"check": check.name, "judge_hash": jv.content_hash, **check.plan},
    )
    return check
