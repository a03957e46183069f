"""Shared test support (moved from tests/study/report/test_report_build.py)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np

from rcea.annotation.payloads import ParsedAnnotation
from rcea.audits.acceptance import JudgeAcceptance, accepted_acceptance
from rcea.audits.tail import reward_stratified_tail
from rcea.study import events
from rcea.study.labelling import PAIR, bind_existing
from rcea.study.pair_audit.freeze import freeze_partition_from_modes, freeze_rubric
from rcea.study.pair_audit.gate import gate_status, record_final_gate
from rcea.study.pair_audit.labels import record_annotation
from rcea.study.pair_audit.sampling import audit_pairs, draw_audit
from rcea.study.records.ingest import ingest_file
from rcea.study.report.publish import publish_report
from rcea.study.store import append_event, require_study, session_scope
from rcea.study.store.measurements import record_measurement
from rcea.study.store.models import Audit, AuditTask
from rcea.study.validity_audit.status import CALIBRATION_COMPLETED_EVENT, JUDGE_RUN_EVENT
from tests.support.helpers import RUBRIC, fake_person, fake_tasks, rubric_file, write_jsonl

RUNS = ("grpo", "ppo", "dapo", "clipcov")


STEPS = (0, 10, 20)


N_Q = 8


PER_Q = 16


N_BOOT = 200


FAILED_RUN = "ppo"


def report_records(
    seed: int = 0, uncertain: float = 0.02, reverse_ids: bool = False
) -> list[dict[str, Any]]:
    """Four runs × steps 0/10/20 × 8 questions × 16 samples with token entropies,
    log-probabilities, validity on successes and modes (ids ascending in file order, or
    descending with ``reverse_ids``)."""
    rng = random.Random(seed)
    recs = []
    for run in RUNS:
        for step in STEPS:
            for q in range(N_Q):
                p = 0.35 + 0.03 * q + 0.005 * step
                n_modes = 3 if step == 0 else 3 - RUNS.index(run) % 2
                for k in range(PER_Q):
                    r = int(rng.random() < p)
                    mode = f"m{rng.randrange(n_modes)}" if rng.random() >= uncertain else None
                    recs.append(
                        {
                            "trajectory_id": f"t{len(recs):06d}",
                            "question_id": f"q{q}",
                            "text": f"solution {len(recs)}",
                            "reward": r,
                            "run": run,
                            "model": "tiny",
                            "step": step,
                            "seed": k,
                            "mean_token_entropy": rng.uniform(0.2, 1.2) * (1.4 if r == 0 else 1.0),
                            "seq_logprob": -rng.uniform(5.0, 40.0),
                            "validity": (int(rng.random() < 0.9) if r else None),
                            "mode": mode if r else None,
                        }
                    )
    if reverse_ids:
        for i, r in enumerate(recs):
            r["trajectory_id"] = f"t{len(recs) - i:06d}"
    return recs


def make_report_study(engine, tmp_path: Path, *, study: str = "rep", **kw: Any) -> Path:  # type: ignore[no-untyped-def]
    """Ingest ``report_records`` and record every measurement kind; returns the JSONL."""
    path = write_jsonl(tmp_path / f"{study}.jsonl", report_records(**kw))
    ingest_file(engine, path, study=study, artifacts_dir=tmp_path / "art", data_dir=tmp_path)
    add_measurements(engine, study)
    return path


def add_measurements(engine, study: str) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(7)
    with session_scope(engine) as s:
        sid = require_study(s, name=study).id
        for run in RUNS:
            peak = 0.5 if run == FAILED_RUN else 0.6
            trace = []
            for step in range(0, 21, 2):
                acc = 0.3 + 0.02 * step
                if run == FAILED_RUN:
                    acc = 0.3 + 0.02 * step if step <= 10 else 0.02
                trace.append({"step": step, "progress": step / 20, "accuracy": min(acc, peak)})
            record_measurement(
                s,
                study_id=sid,
                kind="accuracy_trace",
                run=run,
                model="tiny",
                key="toy",
                payload={"points": trace},
            )
            record_measurement(
                s,
                study_id=sid,
                kind="training_curve",
                run=run,
                payload={
                    "points": [
                        {"step": st, "progress": st / 20, "entropy": 1.0 - 0.02 * st}
                        for st in range(0, 21, 5)
                    ]
                },
            )
            for step in STEPS:
                for bench in ("toy", "toy-hard"):
                    record_measurement(
                        s,
                        study_id=sid,
                        kind="greedy_accuracy",
                        run=run,
                        model="tiny",
                        step=step,
                        key=bench,
                        payload={"accuracy": float(rng.uniform(0.2, 0.8)), "n": 50},
                    )
                qs = [
                    {"question_id": f"q{q}", "n": 16, "c": int(rng.integers(0, 17))}
                    for q in range(N_Q)
                ]
                record_measurement(
                    s,
                    study_id=sid,
                    kind="passk",
                    run=run,
                    model="tiny",
                    step=step,
                    key="toy",
                    payload={"n": 16, "k": [1, 4, 8], "pass_at_k": {}, "questions": qs},
                )
                groups = [f"q{i // 4}" for i in range(32)]
                rewards = rng.integers(0, 2, size=32)
                tok_traj = np.repeat(np.arange(32), 20)
                tail = reward_stratified_tail(
                    groups,
                    rewards,
                    tok_traj,
                    -rng.exponential(1.0, size=tok_traj.size),
                    endpoint=f"{run}@{step}",
                )
                record_measurement(
                    s,
                    study_id=sid,
                    kind="tail",
                    run=run,
                    model="tiny",
                    step=step,
                    payload=tail.to_dict(),
                )
            for a, b in ((0, 10), (10, 20)):
                pred = float(rng.normal(0, 0.02))
                record_measurement(
                    s,
                    study_id=sid,
                    kind="covariance_transition",
                    run=run,
                    model="tiny",
                    step=b,
                    payload={
                        "from_step": a,
                        "to_step": b,
                        "transition": f"{run}:{a}->{b}",
                        "predicted": pred,
                        "observed": 0.8 * pred + float(rng.normal(0, 0.004)),
                        "n_positions": 64,
                    },
                )


JUDGE = "9c1d" + "0" * 60


def draw(engine, tmp_path: Path, study: str = "rep", rubric: str = RUBRIC) -> int:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        freeze_rubric(s, path=rubric_file(tmp_path, rubric), actor="r")
        freeze_partition_from_modes(s, study=study, actor="r")
        return draw_audit(s, study=study, rubric="test-rubric", actor="r").id


def final_gate(engine, audit_id: int, *, passing: bool) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Both annotators label every pair; passing: as the automatic partition says;
    failing: always "same", and the adjudicator confirms "same" where the automatic label
    was "different" (automatic F1 falls)."""
    tasks = fake_tasks(engine, audit_id)
    ann = iter(range(1, 100_000))
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        pairs = audit_pairs(s, audit_id=audit_id)
        for role, user in (("A", 11), ("B", 12)):
            for p in pairs:
                label = (p.automatic or "same") if passing else "same"
                record_annotation(
                    s,
                    audit,
                    ParsedAnnotation(next(ann), tasks[role][p.id], None, user, label, None, False),
                    source="test",
                )
        disputed = [p for p in pairs if not passing and p.automatic == "different"]
        assert passing or disputed
        for p in disputed:
            s.add(
                AuditTask(
                    audit_id=audit_id,
                    role="adjudicator",
                    pair_id=p.id,
                    project_id=3,
                    task_id=3000 + p.id,
                    left_is_a=True,
                )
            )
        bind_existing(
            s,
            PAIR,
            audit,
            "adjudicator",
            person=fake_person("adjudicator"),
            user_id=13,
            project_id=3,
        )
        for p in disputed:
            record_annotation(
                s,
                audit,
                ParsedAnnotation(next(ann), 3000 + p.id, 3, 13, "same", None, False),
                source="test",
            )
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        res = gate_status(s, audit, final=True)
        record_final_gate(s, audit, res, "tester")
    assert res["status"] == ("passed" if passing else "failed"), res["report"]["requirements"]
    return res


def accepted_passing(judge_hash: str, check: str = "acc-1") -> dict[str, Any]:
    """A ``judge.accepted.completed`` payload whose lower 95% bounds meet the default
    threshold (0.80): without one a calibrated judge is "calibration-incomplete"."""
    report = {
        "confidence": 0.95,
        "annotator_a": {"precision": 0.93, "ci_low": 0.88, "ci_high": 0.96, "n": 300},
        "annotator_b": {"precision": 0.91, "ci_low": 0.86, "ci_high": 0.94, "n": 300},
    }
    return {
        "judge_hash": judge_hash,
        "check": check,
        "report": report,
        "acceptance": accepted_acceptance(report, JudgeAcceptance()),
    }


def judge(  # type: ignore[no-untyped-def]
    engine, *, calibrated_hash: str | None, study: str = "rep", accepted: bool = True
) -> None:
    with session_scope(engine) as s:
        sid = require_study(s, name=study).id
        append_event(
            s,
            actor="r",
            kind=JUDGE_RUN_EVENT,
            study_id=sid,
            payload={"judge_hash": JUDGE, "judge_name": "toy-judge", "n_judged": 10},
        )
        if calibrated_hash:
            append_event(
                s,
                actor="r",
                kind=CALIBRATION_COMPLETED_EVENT,
                study_id=sid,
                payload={
                    "judge_hash": calibrated_hash,
                    "calibration": "cal-1",
                    "report": {  # meets the default acceptance (rcea/audits/acceptance.py)
                        "accuracy": 0.93,
                        "macro_f1": 0.92,
                        "accepted_valid_precision": 0.94,
                        "valid_recall": 0.95,
                        "coverage": 1.0,
                    },
                },
            )
            if accepted:
                append_event(
                    s,
                    actor="r",
                    kind=events.ACCEPTED_COMPLETED,
                    study_id=sid,
                    payload=accepted_passing(calibrated_hash),
                )


def publish(engine, out: Path, **kw: Any) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        return publish_report(s, study="rep", out_dir=out, actor="pub", n_boot=N_BOOT, **kw)


def unfreeze(engine, table: str) -> None:  # type: ignore[no-untyped-def]
    """Drop the immutability trigger of ``table`` (what someone editing the database
    directly could do): the frozen row can then change behind the recorded gate."""
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {table}_no_update")
        else:
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {table}_frozen ON {table}")
