"""Kill -9 in the middle of `rcea codebook assign`, rerun, and compare with an
uninterrupted run: same result, and no repeated call for any batch finished before the
kill. The server keys its call log by its own hash of each request body (not by the
client's fingerprint), and the rerun's counts tell the store-level resume (batches
recorded before the kill are skipped, not re-run) from the disk cache (replies that
arrived but were not yet recorded come from the cache, not from the server)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

from sqlmodel import select

from rcea.pipeline.llm import ResponseCache
from rcea.study.codebook import BackendOptions, assign, make_backend
from rcea.study.settings import Settings
from rcea.study.store import make_engine, session_scope
from rcea.study.store.models import CodebookAssignment, CodebookBatch
from tests.support.codebook_study import (
    ASSIGN,
    CONCURRENCY,
    QUESTIONS,
    llm_env,
    prepared_store,
)
from tests.support.fake_llm import FakeLLM, Faults, expected_fingerprint

FAULTS = Faults(rate_limit=0.1, server_error=0.05, malformed=0.05, wrong_mode=0.1, flip=0.1)


def _labels(db: Path) -> dict[tuple[str, int], tuple[str, float | None]]:
    engine = make_engine(f"sqlite:///{db}")
    with session_scope(engine) as s:
        rows = s.exec(select(CodebookAssignment)).all()
        out = {(r.trajectory_id, r.pass_no): (r.label, r.confidence) for r in rows}
    engine.dispose()
    return out


def test_kill_minus_9_during_assign_then_rerun(tmp_path: Path) -> None:
    prepared = prepared_store(tmp_path)
    n_batches = 2 * len(QUESTIONS) * 8  # 16 trajectories per question, 2 per batch, 2 passes

    # Uninterrupted reference run (in-process, its own server and store).
    control_db = tmp_path / "control.db"
    shutil.copy(prepared, control_db)
    with FakeLLM(latency_s=0.1, faults=FAULTS) as ref_llm:
        settings = Settings(
            data_dir=tmp_path / "control-data", llm_base_url=ref_llm.base_url,
            llm_model="fake", llm_api_key="k",
        )  # fmt: skip
        be = make_backend(
            settings, BackendOptions(kind="openai", concurrency=CONCURRENCY, timeout_s=5)
        )
        engine = make_engine(f"sqlite:///{control_db}")
        report = assign(
            engine, study="s", backend=be, actor="t", batch_size=2, concurrency=CONCURRENCY
        )
        engine.dispose()
        assert report.n_run == n_batches
        reference_calls = Counter(c.key for c in ref_llm.served("codebook.assign"))

    db = tmp_path / "store.db"
    shutil.copy(prepared, db)
    data_dir = tmp_path / "data"
    with FakeLLM(latency_s=0.1, faults=FAULTS) as llm:
        env = llm_env(db, data_dir, llm)
        proc = subprocess.Popen(
            ASSIGN, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 90
        while len(llm.served("codebook.assign")) < 0.4 * n_batches:
            assert proc.poll() is None, proc.communicate()[0].decode()
            assert time.monotonic() < deadline, "assign made no progress"
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        killed_at = time.time()
        assert proc.returncode == -signal.SIGKILL
        time.sleep(0.3)  # let requests in flight at the kill land in the server log

        engine = make_engine(f"sqlite:///{db}")
        with session_scope(engine) as s:
            rows = s.exec(select(CodebookBatch).where(CodebookBatch.stage == "assign")).all()
            finished = {r.request_hash for r in rows if r.status in ("done", "failed")}
            done = {r.request_hash for r in rows if r.status == "done"}
            assert len(rows) == n_batches  # the whole plan was stored before any call
            assert 0 < len(finished) < n_batches
        engine.dispose()
        cached = ResponseCache(data_dir / "llm-cache").keys()
        assert done <= cached  # a validated reply reaches the disk cache before the store

        rerun = subprocess.run(
            [*ASSIGN, "--json"], env=env, cwd=tmp_path, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
        assert rerun.returncode == 0, rerun.stdout + rerun.stderr
        report_after = json.loads(rerun.stdout)
        after = [c for c in llm.served("codebook.assign") if c.time > killed_at]
        total = Counter(c.key for c in llm.served("codebook.assign"))
        sent_after = {expected_fingerprint(llm.bodies[c.key]) for c in after}

    # Store-level resume: every batch recorded before the kill is skipped, the others run;
    # of those, the ones whose reply reached the disk cache before the kill come from it
    # (a batch recorded as failed after invalid replies is cached too, but skipped).
    assert report_after["n_batches"] == n_batches
    assert report_after["n_skipped"] == len(finished)
    assert report_after["n_run"] == n_batches - len(finished)
    assert report_after["usage"]["cache_hits"] == len(cached - finished)
    # No call after the kill for a batch finished (recorded or cached) before it; the
    # server's own keys count repeats, so a client-side fingerprint bug cannot hide one.
    assert sent_after & (finished | cached) == set()
    # Only batches in flight at the kill were sent again (each at most once per attempt:
    # a first answer and one re-ask after an invalid reply).
    extra = total - reference_calls
    assert len(extra) <= CONCURRENCY and sum(extra.values()) <= 2 * CONCURRENCY, extra
    assert set(total) == set(reference_calls)
    # Same result as the uninterrupted run.
    assert _labels(db) == _labels(control_db)
    assert len(_labels(db)) == 2 * sum(len(v) for v in QUESTIONS.values())
