"""Shared test support (moved from tests/study/codebook/test_codebook_cycle.py)."""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from pathlib import Path

from sqlmodel import select

from rcea.pipeline.codebook import OracleBackend
from rcea.study.codebook import (
    assign,
    freeze_codebooks,
    induce,
    merge,
    reconcile,
)
from rcea.study.records.ingest import ingest_file
from rcea.study.store import make_engine, session_scope, upgrade
from rcea.study.store.models import (
    Trajectory,
)
from tests.support.fake_llm import FakeLLM, domain_records, strategy_of
from tests.support.helpers import write_jsonl

PHASE1 = {
    "q00": ["direct", "distribute"] * 4,
    "q01": ["direct", "factor", "direct", None] * 2,
    "q02": ["distribute"] * 6 + ["direct"] * 2,
}


PHASE2 = {"q00": ["factor", "direct", "factor", "factor", "distribute"]}


def ingest(engine, tmp_path: Path, questions: dict, step: int, name: str) -> None:  # type: ignore[no-untyped-def]
    recs = domain_records(questions=questions, step=step, start_k=0 if step == 0 else 50)
    ingest_file(
        engine,
        write_jsonl(tmp_path / f"{name}.jsonl", recs),
        study="s",
        artifacts_dir=tmp_path / "art",
        data_dir=tmp_path,
    )


def first_half(engine, backend) -> None:  # type: ignore[no-untyped-def]
    kw = {"study": "s", "backend": backend, "actor": "alice"}
    induce(engine, batch_size=4, **kw)
    merge(engine, **kw)
    with session_scope(engine) as s:
        freeze_codebooks(s, study="s", actor="alice")
    assign(engine, batch_size=3, **kw)
    reconcile(engine, **kw)


def truth(engine) -> dict[str, str | None]:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        return {
            t.trajectory_id: t.mode
            for t in s.exec(select(Trajectory).where(Trajectory.reward == 1)).all()
        }


def assert_recovers(labels: dict[str, tuple[str, str | None]], true: dict) -> None:  # type: ignore[type-arg]
    """Within each question, modes and true strategies correspond one to one."""
    pairs: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for tid, (q, mode) in labels.items():
        if true[tid] is None:
            assert mode is None, f"{tid} has no strategy but got mode {mode}"
            continue
        assert mode is not None, f"{tid} ({true[tid]}) left uncertain"
        pairs[q].add((mode, true[tid]))
    for q, p in pairs.items():
        assert len({m for m, _ in p}) == len(p) == len({s for _, s in p}), (q, p)


ROOT = Path(__file__).resolve().parents[2]


QUESTIONS = {f"q{i:02d}": ["direct", "distribute", "factor", "direct"] * 4 for i in range(6)}


CONCURRENCY = 4


def prepared_store(tmp_path: Path) -> Path:
    """A SQLite store with frozen codebooks (oracle-built), ready for assignment."""
    db = tmp_path / "prepared.db"
    engine = make_engine(f"sqlite:///{db}")
    upgrade(engine)
    recs = domain_records(questions=QUESTIONS, unique=True)
    ingest_file(
        engine,
        write_jsonl(tmp_path / "r.jsonl", recs),
        study="s",
        artifacts_dir=tmp_path / "art",
        data_dir=tmp_path,
    )
    oracle = OracleBackend(strategy_of)
    induce(engine, study="s", backend=oracle, actor="t", batch_size=8)
    merge(engine, study="s", backend=oracle, actor="t")
    with session_scope(engine) as s:
        freeze_codebooks(s, study="s", actor="t")
    engine.dispose()
    return db


def llm_env(db: Path, data_dir: Path, llm: FakeLLM) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RCEA_")}
    env.update(
        RCEA_DATABASE_URL=f"sqlite:///{db}",
        RCEA_DATA_DIR=str(data_dir),
        RCEA_LLM_BASE_URL=llm.base_url,
        RCEA_LLM_MODEL="fake",
        RCEA_LLM_API_KEY="k",
        PYTHONPATH=str(ROOT),
    )
    return env


ASSIGN = [
    sys.executable, "-c", "from rcea.app.cli import main; main()", "codebook", "assign",
    "--study", "s", "--backend", "openai", "--batch-size", "2",
    "--concurrency", str(CONCURRENCY), "--timeout", "5", "--actor", "t",
]  # fmt: skip
