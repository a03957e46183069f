"""Shared test support (moved from tests/app/view/test_view_pages.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rcea.annotation.payloads import ParsedAnnotation
from rcea.audits.tail import reward_stratified_tail
from rcea.pipeline.codebook import OracleBackend
from rcea.study.codebook import (
    assign,
    reconcile,
    request_extensions,
)
from rcea.study.labelling import PAIR, bind_existing
from rcea.study.pair_audit.freeze import freeze_partition_from_modes, freeze_rubric
from rcea.study.pair_audit.labels import record_annotation
from rcea.study.pair_audit.sampling import audit_pairs, draw_audit, get_audit
from rcea.study.records.ingest import ingest_file
from rcea.study.settings import Settings
from rcea.study.store import open_store, require_study, session_scope
from rcea.study.store.measurements import record_measurement
from rcea.study.store.models import AuditTask
from tests.support.codebook_study import PHASE1, PHASE2, first_half
from tests.support.fake_llm import MODEL, RUNS, domain_records, strategy_of
from tests.support.helpers import fake_person, fake_tasks, rubric_file, write_jsonl

RUBRIC = """
[rubric]
name = "view-rubric"
version = "1"

[pairs]
seed = 3
pairs_per_question = 4
n_questions = 3
"""


def _with_entropies(recs: list[dict[str, Any]], step: int) -> list[dict[str, Any]]:
    """Token entropies and log-probabilities that make failures more uncertain and fall
    with the step (deterministic); records spread over both runs so that each run sees
    every strategy and both outcomes."""
    for i, r in enumerate(recs):
        r["run"] = RUNS[(i // 2) % 2]
        base = 0.9 if r["reward"] == 0 else 0.5
        r["mean_token_entropy"] = round(base * (1 - step / 400) + 0.01 * (i % 5), 4)
        r["seq_logprob"] = -round(20 * r["mean_token_entropy"] + (i % 3), 4)
    return recs


def observed(predicted: float, k: int) -> float:
    """The fixture's observed ΔH of transition ``k``: near 1.1 × predicted, not exactly."""
    return 1.1 * predicted + 0.001 + 0.0005 * (-1) ** k


def _tail_report(seed: int) -> dict[str, Any]:
    """A real ``rcea.audits.tail`` report on synthetic tokens (4 questions × 8 samples)."""
    rng = np.random.default_rng(seed)
    groups = [f"q{i // 8}" for i in range(32)]
    rewards = [int(x) for x in rng.integers(0, 2, 32)]
    token_traj = np.repeat(np.arange(32), 20)
    logp = -rng.exponential(1.0, token_traj.size)
    return reward_stratified_tail(groups, rewards, token_traj, logp).to_dict()


def _ingest(settings: Settings, tmp: Path, recs: list[dict[str, Any]], name: str) -> None:
    ingest_file(
        open_store(settings),
        write_jsonl(tmp / f"{name}.jsonl", recs),
        study="s",
        artifacts_dir=settings.artifacts_dir,
        data_dir=settings.data_dir,
    )


def _phase(settings: Settings, tmp: Path, step: int) -> None:
    """The oracle domain at base step 0, or at checkpoint step 100 where q00 gains the
    ``factor`` strategy its base codebook lacks (two runs each)."""
    base = {q: m * 4 for q, m in PHASE1.items()}
    if step == 0:
        recs = domain_records(questions=base, n_failed=32)
    else:
        later = {**base, "q00": base["q00"] + PHASE2["q00"]}
        recs = domain_records(questions=later, step=step, start_k=200, n_failed=32)
    _ingest(settings, tmp, _with_entropies(recs, step), f"step{step}")


def full_store(tmp: Path) -> Settings:
    """The records of ``ingested_store`` plus: the codebook cycle (oracle backend) frozen
    on the base records, then the checkpoint's new strategy as a pending extension request
    for q00; the mode column frozen as partition; a pair audit with A's and B's labels (one
    disagreement, pushed to an adjudication task); measurements (training curves,
    covariance transitions)."""
    settings = Settings(data_dir=tmp / "data")
    _phase(settings, tmp, 0)
    engine = open_store(settings)
    oracle = OracleBackend(strategy_of)
    first_half(engine, oracle)
    _phase(settings, tmp, 100)
    kw = {"study": "s", "backend": oracle, "actor": "alice"}
    assign(engine, batch_size=3, **kw)
    reconcile(engine, **kw)
    with session_scope(engine) as s:
        assert len(request_extensions(s, study="s", actor="alice")) >= 1
        freeze_rubric(s, path=rubric_file(tmp, RUBRIC), actor="r")
        freeze_partition_from_modes(s, study="s", actor="r")
        audit_id = draw_audit(s, study="s", rubric="view-rubric", actor="r").id
    tasks = fake_tasks(engine, audit_id)
    with session_scope(engine) as s:
        audit = get_audit(s, study="s")
        pairs = audit_pairs(s, audit_id=audit_id)
        flipped = pairs[1]
        n = 0
        for role, user in (("A", 11), ("B", 12)):
            for p in pairs:
                truth = p.automatic or "same"
                if role == "B" and p.id == flipped.id:
                    truth = "different" if truth == "same" else "same"
                n += 1
                ann = ParsedAnnotation(n, tasks[role][p.id], None, user, truth, None, False)
                record_annotation(s, audit, ann, source="test")
        s.add(
            AuditTask(
                audit_id=audit_id,
                role="adjudicator",
                pair_id=flipped.id,
                project_id=3,
                task_id=3000 + flipped.id,
                left_is_a=False,
            )
        )
        bind_existing(
            s, PAIR, audit, "adjudicator", person=fake_person("adjudicator"), user_id=13,
            project_id=3,
        )  # fmt: skip
        st_id = require_study(s, name="s").id
        for run, slope in (("grpo_main", 1.0), ("clipcov_ablation", 0.5)):
            points = [
                {
                    "step": k * 10,
                    "progress": k / 10,
                    "entropy": 1.0 - 0.05 * slope * k,
                    "train.loss": 0.1 * k if k % 2 else None,  # a dotted, sparse key
                }
                for k in range(11)
            ]
            record_measurement(
                s, study_id=st_id, kind="training_curve", run=run, payload={"points": points}
            )
            for k in range(3):
                pred = -0.01 * (k + 1) * slope
                record_measurement(
                    s,
                    study_id=st_id,
                    kind="covariance_transition",
                    run=run,
                    model=MODEL,
                    step=50 * (k + 1),
                    payload={
                        "from_step": 50 * k,
                        "to_step": 50 * (k + 1),
                        "transition": f"{50 * k}->{50 * (k + 1)}",
                        "predicted": pred,
                        "observed": observed(pred, k),
                        "n_positions": 64,
                    },
                )
            accuracy = [0.5, 0.6, 0.7] if run == "grpo_main" else [0.5, 0.6, 0.02]
            record_measurement(
                s,
                study_id=st_id,
                kind="accuracy_trace",
                run=run,
                model=MODEL,
                key="toy",
                payload={
                    "points": [
                        {"step": 50 * k, "progress": k / 2, "accuracy": a}
                        for k, a in enumerate(accuracy)
                    ]
                },
            )
            record_measurement(
                s,
                study_id=st_id,
                kind="tail",
                run=run,
                model=MODEL,
                step=100,
                payload=_tail_report(seed=len(run)),
            )
    return settings
