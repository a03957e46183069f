"""Drawing the human checks of a frozen judge (docs/estimators.md item 12).

* **Calibration** (:func:`sample_calibration`): from the judge's verdicts on the study's
  verifier successes, a seeded sample of ``size`` items balanced between judge-accepted
  (``valid``) and not accepted (``invalid`` or ``unparseable``) — half each, the other
  stratum filling in when one is short — split into ``held_out`` held-out items
  (stratified, proportional to the two strata) and the rest for development. The plan
  comes from a frozen rubric's ``[calibration]`` table (defaults 600 / 300 / seed 0) and
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
from rcea.audits.rubric import CalibrationPlan, RecalibrationPolicy
from rcea.audits.sampling import balanced_split
from rcea.pipeline.judge import VALID
from rcea.study import events
from rcea.study.pair_audit.freeze import get_rubric, rubric_spec
from rcea.study.store import append_event, list_events, require_study
from rcea.study.store.models import JudgeVerdict, JudgeVersion, ValidityCheck, ValidityItem
from rcea.study.store.widths import check_stored
from rcea.study.validity_audit.attempts import attempt_check, attempt_seed, prior_checks
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


def study_checks(
    session: Session, *, study_id: int, kind: str | None = None
) -> list[ValidityCheck]:
    """The study's validity checks (of ``kind`` when given), oldest first."""
    stmt = select(ValidityCheck).where(ValidityCheck.study_id == study_id)
    if kind is not None:
        stmt = stmt.where(ValidityCheck.kind == kind)
    return list(session.exec(stmt.order_by(ValidityCheck.id)).all())  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column


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
    check_stored(name, ValidityCheck.name, option="--name")
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


def check_acceptance(check: ValidityCheck) -> JudgeAcceptance:
    """The thresholds frozen into a check's plan when it was drawn (checks drawn before
    thresholds existed: the documented defaults; before the basis existed: on the balanced
    sample)."""
    return JudgeAcceptance.from_dict(check.plan.get("acceptance"))


#: bootstrap replicates of the population-weighted calibration intervals
CALIBRATION_N_BOOT = 10_000


def population_counts(session: Session, check: ValidityCheck) -> dict[str, int] | None:
    """The judge's verdict counts over the study's whole judged population (``accepted``:
    ``valid``; ``not_accepted``: the rest), recorded in the plan when the calibration was
    drawn; calibrations drawn before that: counted now from the bound judge's verdicts
    (immutable, though a later run may have added some); ``None`` when there are none."""
    recorded = check.plan.get("population")
    if recorded:
        return {k: int(v) for k, v in recorded.items()}
    pool = _verdicts(session, judge_id=check.judge_id, study_id=check.study_id)
    n_acc = sum(v.verdict == VALID for v in pool)
    return {"accepted": n_acc, "not_accepted": len(pool) - n_acc} if pool else None


def bootstrap_settings(check: ValidityCheck) -> dict[str, Any]:
    """``n_boot``, ``seed`` and ``confidence`` of the population intervals (the plan's;
    before they were recorded: 10,000, the check's seed, 95%)."""
    return {
        "n_boot": int(check.plan.get("n_boot", CALIBRATION_N_BOOT)),
        "seed": int(check.plan.get("bootstrap_seed", check.seed)),
        "confidence": float(check.plan.get("confidence", 0.95)),
    }


def _attempt(
    session: Session,
    *,
    study_id: int,
    judge: JudgeVersion,
    kind: str,
    rubric: str | None,
    reason: str | None,
) -> tuple[dict[str, Any], JudgeAcceptance, set[str]]:
    """The attempt this draw is (rcea/study/validity_audit/attempts.py), the thresholds
    it is judged against (the rubric's, tightened for a later attempt), and the
    trajectories of earlier attempts (never drawn again)."""
    row = get_rubric(session, name=rubric) if rubric else None
    spec = rubric_spec(row) if row is not None else None
    att = attempt_check(
        session,
        study_id=study_id,
        judge_hash=judge.content_hash,
        kind=kind,
        rubric_hash=row.content_hash if row is not None else None,
        policy=spec.recalibration if spec is not None else RecalibrationPolicy(),
        reason=reason,
    )
    base = spec.acceptance if spec is not None else JudgeAcceptance()
    seen = {
        i.trajectory_id
        for c in prior_checks(session, study_id=study_id, judge_hash=judge.content_hash, kind=kind)
        for i in check_items(session, check_id=c.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    }
    plan = {
        "rubric_hash": row.content_hash if row is not None else None,
        "recalibration": att["policy"],
        "attempt": att["attempt"],
        "reason": reason,
        "failed_before": att["failed_before"],
        "tighten_by": att["tighten_by"],
        "alpha": att["alpha"],
        "n_excluded_earlier_attempts": len(seen),
    }
    # the predeclared design a later attempt is compared with when this one fails
    # ("changed after a failed attempt"): the rubric's thresholds before any tightening
    plan["design"] = {"acceptance": base.to_dict()}
    return plan, base.tightened(att["tighten_by"]), seen


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


def calibration_too_big(study: str, n_pool: int, plan: CalibrationPlan) -> str:
    """The refusal of the default calibration plan on a smaller judged population: what
    to run instead (docs/how-to-verl.md step 4)."""
    return (
        f"study {study} has {n_pool} judged verifier successes, fewer than the default "
        f"calibration plan's {plan.size} items ({plan.held_out} held out); size the plan "
        f"from the study first: `rcea audit rubric init --study {study} --out rubric.toml`, "
        f"`rcea audit rubric freeze rubric.toml --study {study}`, then pass "
        f"`--rubric {study}-rubric` (or choose the size yourself: --size N --held-out H)"
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
    reason: str | None = None,
) -> ValidityCheck:
    """Draw a balanced, blinded calibration set (see the module docstring). After a
    failed calibration of the same judge only under its predeclared re-calibration
    policy, with ``reason``; a later attempt's items are disjoint from every earlier
    attempt's and drawn with a seed derived from the attempt."""
    st = require_study(session, name=study)
    jv = get_judge(session, name=judge, version=judge_version)
    # stored rows have ids; SQLModel types keys Optional
    assert st.id is not None and jv.id is not None
    plan = calibration_plan(session, rubric=rubric, size=size, held_out=held_out, seed=seed)
    reason = (reason or "").strip() or None
    record, thresholds, seen = _attempt(
        session, study_id=st.id, judge=jv, kind=CALIBRATION, rubric=rubric, reason=reason
    )
    everything = _verdicts(session, judge_id=jv.id, study_id=st.id)
    if not everything:
        raise JudgeError(
            f"judge {jv.name} v{jv.version} has no verdicts in study {study!r}: "
            "run `rcea judge run` first"
        )
    pool = [v for v in everything if v.trajectory_id not in seen]
    if rubric is None and size is None and len(pool) < plan.size and not seen:
        raise JudgeError(calibration_too_big(study, len(pool), plan))
    n = min(plan.size, len(pool))
    if n < plan.held_out:
        raise JudgeError(
            f"only {len(pool)} judged verifier successes"
            + (f" outside earlier attempts' {len(seen)} items" if seen else "")
            + f"; the plan holds out {plan.held_out}"
            + (
                f" (rubric {rubric}): size it to the study with `rcea audit rubric init "
                f"--study {study} --out rubric.toml`, freeze it, pass its --rubric"
                if rubric
                else f"; pass --size N --held-out H with H <= {len(pool)}"
            )
        )
    drawn_seed = attempt_seed(plan.seed, record["attempt"])
    record["design"]["calibration"] = {
        "size": plan.size,
        "held_out": plan.held_out,
        "annotators_per_item": plan.annotators_per_item,
    }
    rng = random.Random(f"calibration:{drawn_seed}")
    acc = [v for v in pool if v.verdict == VALID]
    rej = [v for v in pool if v.verdict != VALID]
    n_accepted = sum(v.verdict == VALID for v in everything)
    rng.shuffle(acc)
    rng.shuffle(rej)
    n_acc, n_rej = balanced_split(n, len(acc), len(rej))
    h_acc = min(n_acc, round(plan.held_out * n_acc / n))
    h_rej = plan.held_out - h_acc
    if h_rej > n_rej:
        h_acc, h_rej = plan.held_out - n_rej, n_rej
    picked = [(v, HELD_OUT if i < h_acc else DEVELOPMENT) for i, v in enumerate(acc[:n_acc])]
    picked += [(v, HELD_OUT if i < h_rej else DEVELOPMENT) for i, v in enumerate(rej[:n_rej])]
    check = _new_check(
        session,
        kind=CALIBRATION,
        study_id=st.id,
        name=name,
        study=study,
        judge=jv,
        seed=drawn_seed,
        plan={
            **plan.to_dict(),
            "seed": drawn_seed,
            "rubric_seed": plan.seed,
            "rubric": rubric,
            **record,
            "acceptance": thresholds.to_dict(),
            "n_drawn": n,
            "n_pool": len(pool),
            "n_judge_accepted": n_acc,
            "n_judge_not_accepted": n_rej,
            "held_out_judge_accepted": h_acc,
            "held_out_judge_not_accepted": h_rej,
            "balanced": n_acc == n_rej or abs(n_acc - n_rej) <= 1,
            # the verdict shares of the whole judged population (population figures)
            "population": {"accepted": n_accepted, "not_accepted": len(everything) - n_accepted},
            "n_boot": CALIBRATION_N_BOOT,
            "bootstrap_seed": drawn_seed,
            "confidence": 1.0 - record["alpha"],
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
    reason: str | None = None,
) -> ValidityCheck:
    """Draw ``size`` judge-accepted trajectories outside every calibration set; the
    acceptance threshold (rubric ``[acceptance]``, defaults without one) is frozen into
    the plan. After a failed accepted-set check of the judge, only under its predeclared
    policy with ``reason``, items disjoint from earlier checks', seed derived from the
    attempt (as for calibrations)."""
    st = require_study(session, name=study)
    assert st.id is not None  # stored rows have ids; SQLModel types keys Optional
    jv = (
        get_judge(session, name=judge, version=judge_version)
        if judge
        else production_judge(session, study_id=st.id)
    )
    assert jv.id is not None  # stored rows have ids; SQLModel types keys Optional
    calibrated = set(
        session.exec(
            select(ValidityItem.trajectory_id)
            .join(ValidityCheck, ValidityCheck.id == ValidityItem.check_id)  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
            .where(ValidityCheck.study_id == st.id, ValidityCheck.kind == CALIBRATION)
        ).all()
    )
    reason = (reason or "").strip() or None
    record, thresholds, seen = _attempt(
        session, study_id=st.id, judge=jv, kind=ACCEPTED, rubric=rubric, reason=reason
    )
    pool = [
        v
        for v in _verdicts(session, judge_id=jv.id, study_id=st.id)
        if v.verdict == VALID and v.trajectory_id not in calibrated | seen
    ]
    if size < 1:
        raise JudgeError("--size must be at least 1")
    if len(pool) < size:
        raise JudgeError(
            f"only {len(pool)} judge-accepted trajectories outside the calibration sets; "
            f"asked for {size}" + (f": draw all of them with --size {len(pool)}" if pool else "")
        )
    drawn_seed = attempt_seed(seed, record["attempt"])
    record["design"]["accepted"] = {"size": size}
    picked = random.Random(f"accepted:{drawn_seed}").sample(pool, size)
    check = _new_check(
        session,
        kind=ACCEPTED,
        study_id=st.id,
        name=name,
        study=study,
        judge=jv,
        seed=drawn_seed,
        plan={
            "size": size,
            "seed": drawn_seed,
            "rubric_seed": seed,
            "n_pool": len(pool),
            "n_excluded": len(calibrated),
            "rubric": rubric,
            **record,
            "acceptance": thresholds.to_dict(),
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
