"""SIGTERM and Ctrl-C (SIGINT) in the middle of the LLM stages, in real `rcea`
processes against the local fake server: no new call starts, every
call in flight finishes and is recorded in the store (they are paid for), and the rerun
resumes from the store — it skips exactly the recorded work and sends no call twice.

Calls are matched between the server's log and the store by the documented content hash,
recomputed from the logged request bodies (``tests.support.fake_llm.expected_fingerprint``)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from sqlmodel import select

from rcea.pipeline.judge import JudgeSpec
from rcea.study.store import make_engine, require_study, session_scope, upgrade
from rcea.study.store.models import CodebookBatch, JudgeVerdict
from rcea.study.validity_audit.problems import load_problems
from rcea.study.validity_audit.versions import freeze_judge
from tests.support.codebook_study import ASSIGN, QUESTIONS, llm_env, prepared_store
from tests.support.fake_llm import FakeLLM, expected_fingerprint
from tests.support.judge_study import ingest_toy

CONCURRENCY = 4  # ASSIGN's --concurrency


def always_json(task: str, messages: list[dict[str, str]]) -> str | None:
    """A judge that always answers in the schema (no re-asks, so one call per item)."""
    if task != "judge.validity":
        return None
    return json.dumps({"verdict": "valid", "rationale": "checked each step"})


SIGNALS = [pytest.param(signal.SIGTERM, id="SIGTERM"), pytest.param(signal.SIGINT, id="Ctrl-C")]


def _interrupt_when(proc: subprocess.Popen[bytes], llm: FakeLLM, n_served: int, sig: int) -> int:
    """Send ``sig`` once ``n_served`` calls are answered and calls are in flight; return
    how many were answered at that moment."""
    deadline = time.monotonic() + 120
    while len(llm.served()) < n_served or llm.in_flight < 2:
        assert proc.poll() is None, proc.communicate()[0].decode()
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.005)
    at_signal = len(llm.served())
    proc.send_signal(sig)
    return at_signal


@pytest.mark.slow
@pytest.mark.parametrize("sig", SIGNALS)
def test_codebook_assign_stops_gracefully_and_resumes(tmp_path: Path, sig: int) -> None:
    db = tmp_path / "store.db"
    shutil.copy(prepared_store(tmp_path), db)
    n_batches = 2 * len(QUESTIONS) * 8
    with FakeLLM(latency_s=0.4) as llm:
        env = llm_env(db, tmp_path / "data", llm)
        proc = subprocess.Popen(
            ASSIGN, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        at_signal = _interrupt_when(proc, llm, 8, sig)
        out = proc.communicate(timeout=60)[0].decode()
        assert proc.returncode != 0, out  # it stopped, it did not finish
        served = llm.served("codebook.assign")
        # no new call after the signal: only those in flight then were answered
        assert at_signal <= len(served) <= at_signal + CONCURRENCY
        engine = make_engine(f"sqlite:///{db}")
        with session_scope(engine) as s:
            rows = s.exec(select(CodebookBatch).where(CodebookBatch.stage == "assign")).all()
        engine.dispose()
        done = {r.request_hash for r in rows if r.status == "done"}
        assert len(rows) == n_batches and {r.status for r in rows} <= {"done", "planned"}
        # every answered call, those in flight at the signal included, is in the store
        assert {expected_fingerprint(llm.bodies[c.key]) for c in served} == done
        assert len(done) == len(served) < n_batches

        llm.latency_s = 0.0
        rerun = subprocess.run(
            [*ASSIGN, "--json"], env=env, cwd=tmp_path, capture_output=True, text=True,
            timeout=180,
        )  # fmt: skip
        assert rerun.returncode == 0, rerun.stdout + rerun.stderr
        report = json.loads(rerun.stdout)
        calls = llm.served("codebook.assign")
    assert (report["n_batches"], report["n_skipped"], report["n_run"]) == (
        n_batches,
        len(done),
        n_batches - len(done),
    )
    engine = make_engine(f"sqlite:///{db}")
    with session_scope(engine) as s:
        final = s.exec(select(CodebookBatch).where(CodebookBatch.stage == "assign")).all()
    engine.dispose()
    assert {r.status for r in final} == {"done"}
    # a batch whose prompt equals one answered before (same content hash) comes from the
    # cache; every other one is asked once, and no call is ever sent twice
    distinct = {r.request_hash for r in final}
    from_cache = len(final) - len(distinct)
    assert report["usage"]["cache_hits"] == from_cache
    assert report["usage"]["requests"] == report["n_run"] - from_cache
    assert {expected_fingerprint(llm.bodies[c.key]) for c in calls} == distinct
    # no call answered before the signal is sent again by the rerun
    assert not {c.key for c in calls[: len(served)]} & {c.key for c in calls[len(served) :]}


@pytest.mark.slow
@pytest.mark.parametrize("sig", SIGNALS)
def test_judge_run_interrupted_then_resumed(tmp_path: Path, sig: int) -> None:
    db = tmp_path / "store.db"
    engine = make_engine(f"sqlite:///{db}")
    upgrade(engine)
    recs = ingest_toy(engine, tmp_path, n_questions=5, per_question=8)
    with session_scope(engine) as s:
        load_problems(s, study="toy", source="rcea.pipeline.toy:problem_by_id")
        freeze_judge(s, name="llm", spec=JudgeSpec("openai", "judge-model-x", seed=7), actor="r")
        sid = require_study(s, name="toy").id
    successes = {r["trajectory_id"] for r in recs if r["reward"] == 1}
    assert len(successes) >= 12
    cmd = [*ASSIGN[:3], "judge", "run", "--study", "toy", "--judge", "llm",
           "--concurrency", "2", "--actor", "t"]  # fmt: skip
    with FakeLLM(latency_s=0.4) as llm:
        llm.responder = always_json
        env = llm_env(db, tmp_path / "data", llm)
        proc = subprocess.Popen(
            cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        at_signal = _interrupt_when(proc, llm, 4, sig)
        out = proc.communicate(timeout=60)[0].decode()
        assert proc.returncode == 130, out
        assert "interrupted: the verdicts received so far are stored; rerun to resume" in out
        served = llm.served("judge.validity")
        assert at_signal <= len(served) <= at_signal + 2
        with session_scope(engine) as s:
            stored = s.exec(select(JudgeVerdict).where(JudgeVerdict.study_id == sid)).all()
        assert {v.request_hash for v in stored} == {
            expected_fingerprint(llm.bodies[c.key]) for c in served
        }
        assert len({c.key for c in served}) <= len(stored) < len(successes)

        llm.latency_s = 0.0
        rerun = subprocess.run(
            [*cmd, "--json"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180
        )
        assert rerun.returncode == 0, rerun.stdout + rerun.stderr
        res = json.loads(rerun.stdout)
        calls = llm.served("judge.validity")
    with session_scope(engine) as s:
        verdicts = s.exec(select(JudgeVerdict).where(JudgeVerdict.study_id == sid)).all()
    engine.dispose()
    assert (res["n_already_judged"], res["n_new"], res["complete"]) == (
        len(stored),
        len(successes) - len(stored),
        True,
    )
    assert {v.trajectory_id for v in verdicts} == successes
    assert {expected_fingerprint(llm.bodies[c.key]) for c in calls} == {
        v.request_hash for v in verdicts
    }
    # no call answered before the signal is sent again by the rerun (identical prompts in
    # flight at the same moment may both be sent; that is not a resume)
    assert not {c.key for c in calls[: len(served)]} & {c.key for c in calls[len(served) :]}
