"""What a rubric's plans would give on a study, before anything is frozen or drawn
(``rcea audit rubric check``, ``rcea audit rubric freeze --study``, docs/rubrics.md).

* **Pairs**: the pool ``rcea audit sample`` draws from — the frozen partition's
  trajectories when the study has one, else the judge-accepted successes (R = 1,
  validity 1 or not judged) that the partition will hold — restricted to the plan's
  checkpoints, development questions left out; the draw itself is run with the plan's
  seed (:func:`rcea.audits.sampling.sample_pairs`, the function ``sample`` calls), so the
  numbers shown are the pairs ``sample`` would draw from the same store.
* **Calibration**: the judged population (the verdicts of the study's latest judge run;
  before any run, the verifier successes the judge will judge) against ``size`` and
  ``held_out``.
* **Evidence**: at ``k_min`` and ``n_min``, how many checkpoints (checkpoint pairs for
  retention) reach the minimum-evidence floor.

Problems (the plan cannot be met) refuse a freeze unless forced with a reason; warnings
(numbers that will be "insufficient evidence") never do."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable
from math import comb
from pathlib import Path
from typing import Any

from sqlalchemy import func
from sqlmodel import Session, col, select

from rcea.audits.evidence_sizing import coverage_at
from rcea.audits.rubric import PairPlan, Rubric, load_rubric
from rcea.audits.sampling import sample_pairs
from rcea.pipeline.judge import VALID
from rcea.study import events
from rcea.study.pair_audit.freeze import FreezeError, freeze_rubric, partition_modes
from rcea.study.pair_audit.sampling import Checkpoint, checkpoint_of, dev_questions, in_scope
from rcea.study.store import Trajectory, list_events, require_study
from rcea.study.store.models import JudgeVerdict, JudgeVersion, Partition
from rcea.study.store.models import Rubric as RubricRow


def accepted_successes(session: Session, *, study_id: int) -> list[tuple[str, str, Checkpoint]]:
    """(question_id, trajectory_id, checkpoint) of every judge-accepted success: R = 1 and
    validity 1 or not judged (what a partition freezes)."""
    rows = session.exec(
        select(  # type: ignore[call-overload]  # sqlmodel's select is typed for at most four columns
            Trajectory.question_id,
            Trajectory.trajectory_id,
            Trajectory.run,
            Trajectory.model,
            Trajectory.step,
        )
        .where(Trajectory.study_id == study_id, Trajectory.reward == 1)
        .where(col(Trajectory.validity).is_(None) | (col(Trajectory.validity) == 1))
    ).all()
    return [(q, t, (r, m, s)) for q, t, r, m, s in rows]


def pair_pool(
    session: Session, *, study_id: int, plan: PairPlan
) -> tuple[dict[str, list[str]], str]:
    """question → trajectory ids the draw takes pairs from, and where they come from
    (``partition #N`` or ``accepted successes``), restricted to the plan's checkpoints."""
    part = session.exec(
        select(Partition).where(Partition.study_id == study_id).order_by(col(Partition.id).desc())
    ).first()
    by_q: dict[str, list[str]] = defaultdict(list)
    if part is not None:
        where = checkpoint_of(session, study_id=study_id)
        for tid, (qid, _mode) in partition_modes(session, partition_id=part.id).items():  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            ck = where.get(tid)
            if ck is not None and in_scope(plan, *ck):
                by_q[qid].append(tid)
        return dict(by_q), f"partition #{part.id}"
    for qid, tid, ck in accepted_successes(session, study_id=study_id):
        if in_scope(plan, *ck):
            by_q[qid].append(tid)
    return dict(by_q), "accepted successes (no partition frozen yet)"


def pair_flow(session: Session, *, study_id: int, plan: PairPlan) -> dict[str, Any]:
    """The flow table of the pair plan: questions of the study → with accepted successes
    at the plan's checkpoints → development questions left out → below the floor (listed)
    → drawn, with the pairs ``rcea audit sample`` would draw (``error`` when it would
    refuse)."""
    n_study = session.exec(
        select(func.count(func.distinct(Trajectory.question_id))).where(
            Trajectory.study_id == study_id
        )
    ).one()
    pool, source = pair_pool(session, study_id=study_id, plan=plan)
    dev = set(dev_questions(session, study_id=study_id))
    dev_in = sorted(q for q in pool if q in dev)
    kept = {q: ts for q, ts in pool.items() if q not in dev}
    below = sorted(
        (
            {"question_id": q, "successes": len(ts), "pairs": comb(len(ts), 2)}
            for q, ts in kept.items()
            if comb(len(ts), 2) < plan.floor
        ),
        key=lambda r: (r["pairs"], r["question_id"]),
    )
    out: dict[str, Any] = {
        "source": source,
        "scope": plan.scope() or "every checkpoint",
        "allocation": "from each question" if plan.from_each_question else "fixed",
        "floor": plan.floor,
        "cap": plan.pairs_per_question,
        "n_questions_in_study": int(n_study),
        "n_questions_with_successes": len(pool),
        "n_development_excluded": len(dev_in),
        "n_below_floor": len(below),
        "below_floor": below,
        "n_qualifying": len(kept) - len(below),
        "n_questions_drawn": 0,
        "n_pairs": 0,
        "pairs_available": sum(comb(len(ts), 2) for ts in kept.values()),
        "error": None,
    }
    try:
        pairs = sample_pairs(
            kept,
            pairs_per_question=plan.pairs_per_question,
            n_questions=plan.n_questions,
            seed=plan.seed,
            max_pairs=plan.max_pairs,
            min_pairs_per_question=plan.min_pairs_per_question,
        )
    except ValueError as exc:
        out["error"] = str(exc)
        return out
    out["n_questions_drawn"] = len({p.question_id for p in pairs})
    out["n_pairs"] = len(pairs)
    return out


def _latest_run_judge(session: Session, *, study_id: int) -> JudgeVersion | None:
    """The judge of the study's latest ``rcea judge run`` (``None``: no run)."""
    runs = list_events(session, kind=events.JUDGE_RUN, study_id=study_id)
    if not runs:
        return None
    last = runs[-1].payload
    return session.exec(
        select(JudgeVersion).where(
            JudgeVersion.name == last.get("judge_name"),
            JudgeVersion.version == last.get("judge_version"),
        )
    ).first()


def judged_population(session: Session, *, study_id: int) -> tuple[int, str]:
    """The calibration's population: verdicts of the study's latest judge run, else the
    verifier successes a judge run will judge; and which of the two it is."""
    jv = _latest_run_judge(session, study_id=study_id)
    if jv is not None:
        n = session.exec(
            select(func.count())
            .select_from(JudgeVerdict)
            .where(JudgeVerdict.study_id == study_id, JudgeVerdict.judge_id == jv.id)
        ).one()
        return int(n), f"verdicts of judge {jv.name} v{jv.version}"
    n = session.exec(
        select(func.count())
        .select_from(Trajectory)
        .where(Trajectory.study_id == study_id, Trajectory.reward == 1)
    ).one()
    return int(n), "verifier successes (no judge run yet)"


def judge_accepted_count(session: Session, *, study_id: int) -> int | None:
    """The judge-accepted (``valid``) verdicts of the study's latest judge run (``None``:
    no judge run yet): what a calibration and the accepted-set check draw from."""
    jv = _latest_run_judge(session, study_id=study_id)
    if jv is None:
        return None
    n = session.exec(
        select(func.count())
        .select_from(JudgeVerdict)
        .where(
            JudgeVerdict.study_id == study_id,
            JudgeVerdict.judge_id == jv.id,
            JudgeVerdict.verdict == VALID,
        )
    ).one()
    return int(n)


def success_counts(
    session: Session, *, study_id: int, accepted_only: bool
) -> dict[Checkpoint, dict[str, int]]:
    """checkpoint → question → successes (every question of the checkpoint, 0 included);
    ``accepted_only``: judge-accepted successes only."""
    ok = col(Trajectory.reward) == 1
    if accepted_only:
        ok = ok & (col(Trajectory.validity).is_(None) | (col(Trajectory.validity) == 1))
    rows = session.exec(
        select(  # type: ignore[call-overload]  # sqlmodel's select is typed for at most four columns
            Trajectory.run,
            Trajectory.model,
            Trajectory.step,
            Trajectory.question_id,
            ok,
        ).where(Trajectory.study_id == study_id)
    ).all()
    out: dict[Checkpoint, dict[str, int]] = defaultdict(dict)
    for r, m, s, q, good in rows:
        per = out[(r, m, s)]
        per[q] = per.get(q, 0) + int(bool(good))
    return dict(out)


def retention_counts(
    accepted: dict[Checkpoint, dict[str, int]], *, base_step: int = 0
) -> dict[Hashable, list[int]]:
    """(checkpoint, base) → n(x) = min(m₀, m_t) over the questions of both, for every
    checkpoint after ``base_step`` whose run and model have a checkpoint at ``base_step``
    (the report's base, docs/estimators.md item 5)."""
    out: dict[Hashable, list[int]] = {}
    for (r, m, s), per in accepted.items():
        base = accepted.get((r, m, base_step))
        if s == base_step or base is None:
            continue
        common = sorted(set(per) & set(base))
        out[(r, m, s)] = [min(per[q], base[q]) for q in common]
    return out


def evidence_outlook(session: Session, *, study_id: int, rubric: Rubric) -> dict[str, Any]:
    """At the rubric's ``k_min`` and ``n_min``: the checkpoints whose validity (K₊ ≥ k_min)
    and retention (n(x) ≥ n_min) numbers reach the minimum-evidence floor."""
    est = rubric.estimators
    floors = est.min_evidence()
    succ = success_counts(session, study_id=study_id, accepted_only=False)
    acc = success_counts(session, study_id=study_id, accepted_only=True)
    val = coverage_at(
        {ck: list(per.values()) for ck, per in succ.items()},
        est.k_min,
        min_questions=floors["validity"]["questions"],
        min_share=floors["validity"]["share"],
    )
    ret = coverage_at(
        retention_counts(acc),
        est.n_min,
        min_questions=floors["retention"]["questions"],
        min_share=floors["retention"]["share"],
    )
    most = max((max(per.values(), default=0) for per in succ.values()), default=0)
    return {
        "k_min": est.k_min,
        "n_min": est.n_min,
        "most_successes_per_question": most,
        "validity": val.to_dict(),
        "retention": ret.to_dict(),
    }


def check_rubric(session: Session, *, study: str, rubric: Rubric) -> dict[str, Any]:
    """What the rubric's plans give on ``study`` (module docstring): ``problems`` (the
    plan cannot be met: a freeze refuses without ``--force``) and ``warnings``."""
    st = require_study(session, name=study)
    sid: int = st.id  # type: ignore[assignment]  # a stored row's id is set: SQLModel types every primary key Optional
    flow = pair_flow(session, study_id=sid, plan=rubric.pairs)
    problems: list[str] = []
    warnings: list[str] = []
    if flow["error"]:
        problems.append(f"pairs: `rcea audit sample` would refuse: {flow['error']}")
    elif rubric.pairs.from_each_question and flow["n_below_floor"]:
        warnings.append(
            f"pairs: {flow['n_below_floor']} question(s) have fewer than the floor of "
            f"{rubric.pairs.floor} pair(s) and are left out of the audit (listed)"
        )
    n_pop, pop_source = judged_population(session, study_id=sid)
    cal = rubric.calibration
    calibration: dict[str, Any] | None = None
    if cal is not None:
        n_drawn = min(cal.size, n_pop)
        calibration = {
            "size": cal.size,
            "held_out": cal.held_out,
            "population": n_pop,
            "population_source": pop_source,
            "n_drawn": n_drawn,
            "n_development": max(0, n_drawn - cal.held_out),
        }
        if n_drawn < cal.held_out:
            problems.append(
                f"calibration: holds out {cal.held_out} item(s) but the study has only "
                f"{n_pop} {pop_source}: `rcea judge calibrate sample` would refuse"
            )
        elif cal.size > n_pop:
            warnings.append(
                f"calibration: size {cal.size} but only {n_pop} {pop_source}: "
                f"{n_drawn} item(s) would be drawn"
            )
    evidence = evidence_outlook(session, study_id=sid, rubric=rubric)
    for what, key in (("validity and mode numbers", "validity"), ("retention", "retention")):
        cov = evidence[key]
        if cov["n_checkpoints"] and 2 * cov["n_meeting_floor"] < cov["n_checkpoints"]:
            k = "k_min" if key == "validity" else "n_min"
            warnings.append(
                f"evidence: at {k} = {evidence[k]} only {cov['n_meeting_floor']} of "
                f"{cov['n_checkpoints']} checkpoint(s) reach the minimum-evidence floor for "
                f'{what}; the rest will read "insufficient evidence" '
                "(`rcea audit rubric init` sizes it to the study)"
            )
    return {
        "study": study,
        "rubric": rubric.name,
        "version": rubric.version,
        "content_hash": rubric.content_hash(),
        "meets_plan": not problems,
        "pairs": flow,
        "calibration": calibration,
        "evidence": evidence,
        "problems": problems,
        "warnings": warnings,
    }


def freeze_checked(
    session: Session,
    *,
    path: Path,
    actor: str,
    study: str | None = None,
    force: bool = False,
    reason: str | None = None,
) -> tuple[RubricRow, bool, dict[str, Any] | None]:
    """Freeze the rubric at ``path``; with ``study``, only when the study can meet its
    plans (:func:`check_rubric`), unless ``force`` with a ``reason`` (both recorded in
    the ``rubric.freeze`` event). Returns the row, whether it is new, and the check."""
    reason = (reason or "").strip() or None
    if force and not reason:
        raise FreezeError("--force needs --reason TEXT: why the plan is frozen anyway (recorded)")
    check: dict[str, Any] | None = None
    record: dict[str, Any] | None = None
    if study is not None:
        check = check_rubric(session, study=study, rubric=load_rubric(path))
        if check["problems"] and not force:
            raise FreezeError(
                f"refusing to freeze {path}: study {study} cannot meet its plan: "
                + "; ".join(check["problems"])
                + f". Write one it can (`rcea audit rubric init --study {study} --out FILE`), "
                "or freeze it anyway with --force --reason TEXT"
            )
        record = {
            "study": study,
            "meets_plan": check["meets_plan"],
            "n_pairs": check["pairs"]["n_pairs"],
            "n_questions": check["pairs"]["n_questions_drawn"],
            "problems": check["problems"],
            "warnings": check["warnings"],
        }
    if force:
        record = {**(record or {}), "forced": True, "reason": reason}
    row, created = freeze_rubric(session, path=path, actor=actor, check=record)
    return row, created, check
