"""``rcea audit rubric init --study S``: a rubric whose plans the study can meet, every
other setting the shipped default's, spelled out (docs/rubrics.md "Sizing a rubric").

* **Pairs** come from the judge-accepted successes (R = 1, validity 1 or not judged:
  what the partition will hold) each question has *at the checkpoints the audit draws
  from* (``--run``/``--model``/``--step``, written into the plan; none: every
  checkpoint), development questions left out. A question with m such successes can
  give C(m, 2) pairs: it gives all of them up to a cap (the default's 156, or less when
  no question has that many), and a question below the floor (``--min-pairs``, default
  3) is left out and listed. Every question at or above the floor is drawn
  (``--questions N`` draws at most N). The plan is the rule, not a count, so
  ``rcea audit sample`` meets it on the same study.
* **K_min and n_min** are the largest values, at most the default 8, at which at least
  half of the checkpoints (checkpoint pairs for n_min) reach the minimum-evidence floor
  (:mod:`rcea.audits.evidence_sizing`); a value lowered from the default comes with a
  warning that says what is traded.
* **Calibration**: ``size`` = the judged population (the verdicts of the latest judge
  run, else the verifier successes), at most the default 600, the held-out share kept."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from math import comb
from typing import Any

from sqlalchemy import func
from sqlmodel import Session, col, select

from rcea.audits.evidence_sizing import ThresholdCoverage, largest_threshold
from rcea.audits.rubric import DEFAULT_RUBRIC_PATH, PairPlan, default_rubric, parse_rubric
from rcea.audits.sampling import ACCEPTED_CHECK_SIZE, balanced_split
from rcea.study.pair_audit.plan import (
    accepted_successes,
    judge_accepted_count,
    judged_population,
    pair_flow,
    retention_counts,
    success_counts,
)
from rcea.study.pair_audit.sampling import dev_questions, in_scope
from rcea.study.store import Trajectory, require_study

#: the fewest pairs a question gives to be audited, unless ``--min-pairs`` says otherwise
DEFAULT_MIN_PAIRS = 3


@dataclass
class RubricSize:
    study: str
    plan: PairPlan
    flow: dict[str, Any]
    k_min: int
    n_min: int
    k_table: list[ThresholdCoverage]
    n_table: list[ThresholdCoverage]
    most_samples_per_question: int
    calibration_size: int
    calibration_held_out: int
    calibration_population: int
    warnings: list[str] = field(default_factory=list)

    @property
    def planned_pairs(self) -> int:
        return int(self.flow["n_pairs"])

    def to_dict(self) -> dict[str, Any]:
        return {
            "study": self.study,
            "pairs": self.plan.to_dict(),
            "flow": self.flow,
            "planned_pairs": self.planned_pairs,
            "k_min": self.k_min,
            "n_min": self.n_min,
            "k_min_coverage": [c.to_dict() for c in self.k_table],
            "n_min_coverage": [c.to_dict() for c in self.n_table],
            "most_samples_per_question": self.most_samples_per_question,
            "calibration_size": self.calibration_size,
            "calibration_held_out": self.calibration_held_out,
            "calibration_population": self.calibration_population,
            "warnings": self.warnings,
        }


def _check_scope(
    known: set[tuple[str, str, int]],
    runs: list[str] | None,
    models: list[str] | None,
    steps: list[int] | None,
    study: str,
) -> None:
    for what, given, idx in (("run", runs, 0), ("model", models, 1), ("step", steps, 2)):
        have = sorted({ck[idx] for ck in known})
        for g in given or []:
            if g not in have:
                raise ValueError(
                    f"study {study} has no {what} {g!r} (its {what}s: "
                    + ", ".join(str(h) for h in have)
                    + ")"
                )


def _tradeoff(name: str, value: int, default: int, most: int, cov: ThresholdCoverage) -> str:
    if name == "k_min":
        what = (
            f"a question counts for validity and mode numbers at a checkpoint with "
            f"K+ >= {value} verifier successes"
        )
        why = (
            f"with at most {most} success(es) of one question at a checkpoint, K+ >= {default} "
            "is out of reach"
            if most < default
            else f"K+ >= {default} needs (nearly) every sample of a question to succeed"
        )
    else:
        what = (
            f"a question counts for retention with n(x) = min(m0, m_t) >= {value} accepted "
            "successes at both checkpoints"
        )
        why = f"n(x) >= {default} is out of reach for most questions"
    return (
        f"{name} = {value} (default {default}): {what}; {why}. At {value}, "
        f"{cov.n_meeting_floor} of {cov.n_checkpoints} checkpoint(s) reach the "
        f"minimum-evidence floor (median share of questions counted "
        f"{cov.median_share:.0%}). The trade-off: more questions count, each question's "
        f"estimate rests on as few as {value} samples (noisier per question, less "
        "selected toward easy questions); raise the samples per question "
        "(verl: actor_rollout_ref.rollout.val_kwargs.n) to keep the default"
    )


def size_rubric(
    session: Session,
    *,
    study: str,
    runs: list[str] | None = None,
    models: list[str] | None = None,
    steps: list[int] | None = None,
    min_pairs: int = DEFAULT_MIN_PAIRS,
    n_questions: int | None = None,
) -> RubricSize:
    """The plans the study can meet (module docstring). ``ValueError`` when no question
    reaches the floor at the chosen checkpoints, naming what there is."""
    st = require_study(session, name=study)
    sid: int = st.id  # type: ignore[assignment]  # a stored row's id is set: SQLModel types every primary key Optional
    base = default_rubric()
    if min_pairs < 1:
        raise ValueError(f"--min-pairs must be >= 1, got {min_pairs}")
    succ = success_counts(session, study_id=sid, accepted_only=False)
    _check_scope(set(succ), runs, models, steps, study)
    scope = PairPlan(
        runs=tuple(runs) if runs else None,
        models=tuple(models) if models else None,
        steps=tuple(steps) if steps else None,
    )
    dev = set(dev_questions(session, study_id=sid))
    per_q: dict[str, int] = {}
    for qid, _tid, ck in accepted_successes(session, study_id=sid):
        if qid not in dev and in_scope(scope, *ck):
            per_q[qid] = per_q.get(qid, 0) + 1
    avail = {q: comb(m, 2) for q, m in per_q.items()}
    qualifying = [q for q, a in avail.items() if a >= min_pairs]
    where = scope.scope() or "every checkpoint"
    if not qualifying:
        most = max(per_q.values(), default=0)
        raise ValueError(
            f"study {study}: no question has {min_pairs} pair(s) of judge-accepted successes "
            f"at {where} ({len(per_q)} question(s) with any; the most successes of one "
            f"question: {most}): the pair audit has nothing to draw; choose more "
            "checkpoints (--run/--model/--step) or a lower --min-pairs"
        )
    cap = min(base.pairs.pairs_per_question, max(avail[q] for q in qualifying))
    plan = PairPlan(
        seed=base.pairs.seed,
        pairs_per_question=max(cap, min_pairs),
        n_questions=min(n_questions or len(qualifying), len(qualifying)),
        min_pairs_per_question=min_pairs,
        runs=scope.runs,
        models=scope.models,
        steps=scope.steps,
    )
    flow = pair_flow(session, study_id=sid, plan=plan)

    est = base.estimators
    floors = est.min_evidence()
    warnings: list[str] = []
    most = max((max(per.values(), default=0) for per in succ.values()), default=0)
    per_ckpt_q = (
        select(func.count().label("n"))
        .where(Trajectory.study_id == sid)
        .group_by(
            col(Trajectory.run),
            col(Trajectory.model),
            col(Trajectory.step),
            col(Trajectory.question_id),
        )
        .subquery()
    )
    most_samples = int(session.exec(select(func.max(per_ckpt_q.c.n))).one() or 0)
    k_min, k_table, k_ok = largest_threshold(
        {ck: list(per.values()) for ck, per in succ.items()},
        default=est.k_min,
        min_questions=floors["validity"]["questions"],
        min_share=floors["validity"]["share"],
    )
    acc = success_counts(session, study_id=sid, accepted_only=True)
    n_min, n_table, n_ok = largest_threshold(
        retention_counts(acc),
        default=est.n_min,
        min_questions=floors["retention"]["questions"],
        min_share=floors["retention"]["share"],
    )
    for name, value, default, table, ok in (
        ("k_min", k_min, est.k_min, k_table, k_ok),
        ("n_min", n_min, est.n_min, n_table, n_ok),
    ):
        if value != default and table:
            warnings.append(_tradeoff(name, value, default, most, table[-1]))
        if not ok:
            warnings.append(
                f"{name} = {value}: even so, fewer than half of the checkpoints reach the "
                'minimum-evidence floor: most such numbers will read "insufficient evidence"'
            )

    cal = base.calibration
    assert cal is not None  # the shipped rubric has one
    population, _source = judged_population(session, study_id=sid)
    size = max(1, min(cal.size, population))
    n_accepted = judge_accepted_count(session, study_id=sid)
    if n_accepted is not None:
        size, note = _room_for_accepted_check(size, n_accepted, population - n_accepted)
        warnings.extend(note)
    held = max(1, min(size, round(size * cal.held_out / cal.size)))
    return RubricSize(
        study=study,
        plan=plan,
        flow=flow,
        k_min=k_min,
        n_min=n_min,
        k_table=k_table,
        n_table=n_table,
        most_samples_per_question=most_samples,
        calibration_size=size,
        calibration_held_out=held,
        calibration_population=population,
        warnings=warnings,
    )


def _room_for_accepted_check(size: int, n_accepted: int, n_not: int) -> tuple[int, list[str]]:
    """The largest calibration size up to ``size`` whose balanced draw
    (:func:`~rcea.audits.sampling.balanced_split`) leaves the accepted-set check's
    :data:`~rcea.audits.sampling.ACCEPTED_CHECK_SIZE` judge-accepted successes outside it
    (the check draws only outside the calibrations: ``rcea judge accepted sample``), and
    a warning when that cannot be done."""
    spare = n_accepted - ACCEPTED_CHECK_SIZE
    if spare < 1:
        return size, [
            f"only {n_accepted} judge-accepted successes: the accepted-set check "
            f"(`rcea judge accepted sample`, {ACCEPTED_CHECK_SIZE} outside the calibration) "
            "cannot be drawn at its default size beside this calibration"
        ]
    while size > 1 and balanced_split(size, n_accepted, n_not)[0] > spare:
        size -= 1
    return size, []


def _toml_list(values: tuple[Any, ...]) -> str:
    return "[" + ", ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in values) + "]"


def sized_rubric_text(size: RubricSize, *, name: str) -> str:
    """The shipped default rubric's TOML with ``name`` and the sized plans; parsed back
    before it is returned (``ValueError`` if the result is not a valid rubric)."""
    text = DEFAULT_RUBRIC_PATH.read_text(encoding="utf-8")
    plan, flow = size.plan, size.flow
    subs = {
        ("rubric", "name"): f'"{name}"',
        ("rubric", "description"): f'"The RCEA defaults, plans sized to study {size.study}."',
        ("estimators", "k_min"): str(size.k_min),
        ("estimators", "n_min"): str(size.n_min),
        ("pairs", "pairs_per_question"): str(plan.pairs_per_question),
        ("pairs", "n_questions"): str(plan.n_questions),
        ("calibration", "size"): str(size.calibration_size),
        ("calibration", "held_out"): str(size.calibration_held_out),
    }
    notes = {
        ("estimators", "k_min"): f"   # sized: at most {size.most_samples_per_question} "
        "samples per question (default 8)",
        ("estimators", "n_min"): "   # sized to the accepted successes (default 8)",
        ("pairs", "pairs_per_question"): "   # the cap: a question gives what it has, up to this",
        ("pairs", "n_questions"): (
            f"   # at most; {flow['n_qualifying']} question(s) reach the floor, "
            f"{flow['n_below_floor']} below it"
        ),
        ("calibration", "size"): f"   # of {size.calibration_population} judged successes",
    }
    extra = [f"min_pairs_per_question = {plan.min_pairs_per_question}   # the floor"]
    for key in ("runs", "models", "steps"):
        if getattr(plan, key) is not None:
            extra.append(f"{key} = {_toml_list(getattr(plan, key))}")
    out, section = [], None
    for line in text.splitlines():
        m = re.match(r"\s*\[(\w+)\]", line)
        if m:
            section = m.group(1)
        kv = re.match(r"(\s*)(\w+)(\s*=\s*)([^#]*?)(\s*#.*)?$", line)
        if kv and section is not None and (section, kv.group(2)) in subs:
            cell = (section, kv.group(2))
            line = f"{kv.group(1)}{kv.group(2)}{kv.group(3)}{subs[cell]}{notes.get(cell, '')}"
            out.append(line)
            if cell == ("pairs", "n_questions"):
                out.extend(extra)
            continue
        if line.startswith("# Pair-sampling plan"):
            line = (
                f"# Pair-sampling plan (sized by `rcea audit rubric init` to {size.study}: "
                f"{flow['n_pairs']} pairs on {flow['n_questions_drawn']} questions)."
            )
        out.append(line)
    result = "\n".join(out) + "\n"
    parse_rubric(result, source=f"sized rubric for {size.study}")
    return result
