"""Shared test support (moved from tests/study/validity_audit/test_judge_run.py)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from rcea.pipeline.judge import DEFAULT_TEMPLATE, JudgeSpec, JudgeTemplate
from rcea.pipeline.toy import (
    VARIANTS,
    StepError,
    generate_questions,
    process_valid,
    question_from_id,
    render_trajectory,
    verify,
)
from rcea.study.records.ingest import ingest_file
from rcea.study.store import session_scope
from rcea.study.validity_audit.versions import freeze_judge

RUN, MODEL = "grpo_main_run", "tiny-char-lm-v9"


ORACLE = "rcea.pipeline.toy:validity_by_id"


WEAK = "tests.support.judge_study:lucky_answer"


def lucky_answer(question_id: str, text: str) -> int:
    """A deliberately weakened judge: accepts every right final answer (so every
    verifier success), however it was reached."""
    return verify(question_from_id(question_id), text)


def toy_records(
    n_questions: int = 8, per_question: int = 14, seed: int = 0, steps: tuple[int, ...] = (40,)
) -> list[dict[str, Any]]:
    """Toy-domain trajectories: valid solutions, slips (R = 1, V = 0) and arithmetic
    errors (R = 0), with long, distinctive provenance for the blinding scans."""
    rng = random.Random(seed)
    out = []
    for step in steps:
        for q in generate_questions("probe", n_questions, seed):
            for k in range(per_question):
                u = rng.random()
                err = (
                    StepError("slip", 0, 1 + k % 3)
                    if u < 0.3
                    else StepError("arith", 0, 2)
                    if u < 0.45
                    else None
                )
                text = render_trajectory(q, q.strategies[k % 2], VARIANTS[k % 8], err)
                out.append(
                    {
                        "trajectory_id": f"{RUN}-s{step}-{q.question_id}-k{k:02d}",
                        "question_id": q.question_id,
                        "text": text,
                        "reward": verify(q, text),
                        "run": RUN,
                        "model": MODEL,
                        "step": step,
                        "seed": 90_000 + k,
                    }
                )
    return out


def ingest_toy(engine, tmp_path: Path, study: str = "toy", **kw: Any) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    recs = toy_records(**kw)
    path = tmp_path / f"{study}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    ingest_file(engine, path, study=study, artifacts_dir=tmp_path / "art", data_dir=tmp_path)
    return recs


def freeze(engine, name: str, oracle: str, template: JudgeTemplate = DEFAULT_TEMPLATE):  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        row, created = freeze_judge(
            s, name=name, spec=JudgeSpec("oracle", oracle, template), actor="r"
        )
        return row.id, row.version, row.content_hash, created


def undecided_on_slips(question_id: str, text: str) -> int | None:
    """An oracle judge that gives no verdict (→ ``unparseable``) on every success with an
    invalid step, and the true validity otherwise."""
    return process_valid(question_from_id(question_id), text) or None
