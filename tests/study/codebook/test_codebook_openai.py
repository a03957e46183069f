"""The full codebook cycle through the ``openai`` backend against the local fake
OpenAI-compatible server, with faults injected: 429 + Retry-After, 500, hangs past the
client timeout, malformed JSON, unknown mode ids, flipped labels, low confidence.
Checks recovery of the true partition, fault routing, the prompt provenance scan and that
a rerun repeats no call."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from sqlmodel import select

from rcea.annotation.tasks import BlindingViolation
from rcea.study.codebook import (
    BackendOptions,
    assign,
    decide_extension,
    edit_draft,
    export_partition,
    freeze_codebooks,
    induce,
    make_backend,
    merge,
    reconcile,
    request_extensions,
    researcher_queue,
    resolve_dispute,
)
from rcea.study.settings import Settings
from rcea.study.store import make_engine, session_scope, upgrade
from rcea.study.store.models import (
    CodebookAssignment,
    CodebookBatch,
    CodebookDispute,
    PartitionAssignment,
    Trajectory,
)
from tests.support.codebook_study import PHASE1, PHASE2, assert_recovers, ingest, truth
from tests.support.fake_llm import MODEL, RUNS, FakeLLM, Faults
from tests.support.product_helpers import scan_for_leaks

FAULTS = Faults(
    rate_limit=0.15,
    retry_after_s=0.2,
    server_error=0.1,
    hang=0.08,
    hang_s=1.5,
    malformed=0.08,
    wrong_mode=0.15,
    flip=0.08,
    low_confidence=0.12,
)


@pytest.fixture
def sqlite_engine(tmp_path: Path):  # type: ignore[no-untyped-def]
    eng = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    upgrade(eng)
    yield eng
    eng.dispose()


def backend_for(llm: FakeLLM, tmp_path: Path, **opts):  # type: ignore[no-untyped-def]
    settings = Settings(
        data_dir=tmp_path / "data", llm_base_url=llm.base_url, llm_model="fake", llm_api_key="k"
    )
    options = {"kind": "openai", "concurrency": 4, "timeout_s": 0.7, "max_retries": 4, **opts}
    return make_backend(settings, BackendOptions(**options))


def forbidden_values(engine) -> tuple[set[str], set[str]]:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        rows = s.exec(select(Trajectory)).all()
        values = {r.trajectory_id for r in rows} | {*RUNS, MODEL}
        values |= {str(r.step) for r in rows} | {str(r.seed) for r in rows}
        return values, {r.trajectory_id for r in rows}


def test_openai_cycle_with_faults(sqlite_engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    engine = sqlite_engine
    ingest(engine, tmp_path, PHASE1, 0, "phase1")
    with FakeLLM(latency_s=0.01, faults=FAULTS) as llm:
        be = backend_for(llm, tmp_path)
        kw = {"study": "s", "backend": be, "actor": "alice"}
        induce(engine, batch_size=4, **kw)
        merge(engine, **kw)
        with session_scope(engine) as s:
            assert len(freeze_codebooks(s, study="s", actor="alice")) == 3
        reports = [assign(engine, batch_size=2, **kw)]
        reports.append(reconcile(engine, **kw))
        with session_scope(engine) as s:
            for d in researcher_queue(s, study="s"):
                resolve_dispute(s, study="s", dispute_id=d.id, actor="bob", uncertain=True)
        ingest(engine, tmp_path, PHASE2, 100, "phase2")
        reports.append(assign(engine, batch_size=2, **kw))
        reports.append(reconcile(engine, **kw))
        with session_scope(engine) as s:
            (ext,) = request_extensions(s, study="s", actor="alice")
            assert [p["name"] for p in ext.proposals] == ["factor"]
            _, v2 = decide_extension(s, study="s", extension_id=ext.id, approve=True, actor="c")
            assert v2 is not None and v2.version == 2 and v2.parent_id == ext.base_version_id
        reports.append(assign(engine, batch_size=2, **kw))
        reports.append(reconcile(engine, **kw))
        with session_scope(engine) as s:
            out = export_partition(s, study="s", actor="alice", artifacts_dir=tmp_path / "art")

        # Faults happened and were retried or routed; nothing was guessed.
        usage: dict[str, int] = defaultdict(int)
        for r in reports:
            for k, v in r.usage.items():
                usage[k] += v
        assert usage["rate_limited"] >= 1 and usage["server_errors"] >= 1
        assert usage["timeouts"] >= 1 and usage["invalid_replies"] >= 1
        assert usage["failures"] >= 1  # a persistently malformed batch was given up...
        with session_scope(engine) as s:
            failed = s.exec(select(CodebookBatch).where(CodebookBatch.status == "failed")).all()
            assert failed and all("invalid reply" in (b.error or "") for b in failed)
            bad = s.exec(
                select(CodebookAssignment).where(CodebookAssignment.label == "INVALID")
            ).all()
            notes = {(r.note or "").split(":")[0] for r in bad}
            assert {"no valid reply", "unknown mode id 'm99'"} <= notes
            disputes = {
                (d.version_id, d.trajectory_id): d for d in s.exec(select(CodebookDispute)).all()
            }
            for r in bad:  # ...and every unusable answer went to reconciliation
                d = disputes[(r.version_id, r.trajectory_id)]
                assert "invalid reply" in d.reasons and d.status in ("resolved", "new")
            reasons = {x for d in disputes.values() for x in d.reasons}
            assert {"passes disagree", "low confidence", "special label NEW"} <= reasons
        # Every rejected request (429, 500, hang) was answered on a later attempt. (How
        # long a 429 waits is checked in tests/pipeline/llm/test_llm_client.py; here two
        # batches can send identical prompts, so attempts cannot be paired by content.)
        answered = {c.key for c in llm.calls if c.status == 200}
        rejected = [c for c in llm.calls if c.status in (429, 500, 599)]
        assert rejected and all(c.key in answered for c in rejected)

        # The exported partition recovers the true strategies.
        assert out["n_uncertain"] == 2 and out["n_modes"] == 7
        with session_scope(engine) as s:
            labels = {
                r.trajectory_id: (r.question_id, r.mode)
                for r in s.exec(
                    select(PartitionAssignment).where(
                        PartitionAssignment.partition_id == out["partition_id"]
                    )
                ).all()
            }
        assert_recovers(labels, truth(engine))

        # Blinding: no rendered prompt carries provenance, trajectory ids or labels.
        values, ids = forbidden_values(engine)
        contents = [m["content"] for body in llm.requests for m in body["messages"]]
        assert len(contents) > 100
        assert scan_for_leaks(contents, values) == []
        assert not [c for c in contents for t in ids if t in c]
        assert not [
            body
            for body in llm.requests
            if set(body) - {"model", "messages", "temperature", "seed", "response_format"}
        ]
        assert {body["temperature"] for body in llm.requests} == {0.0}

        # A rerun of every stage repeats no call (finished batches, cache).
        served = len(llm.served())
        for stage in (induce, assign, reconcile):
            assert stage(engine, **kw).n_run == 0
        assert len(llm.served()) == served


def test_prompt_scan_stops_a_leaking_prompt(sqlite_engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    engine = sqlite_engine
    ingest(engine, tmp_path, {"q00": ["direct", "distribute"] * 2}, 0, "a")
    with FakeLLM() as llm:
        be = backend_for(llm, tmp_path)
        kw = {"study": "s", "backend": be, "actor": "alice"}
        induce(engine, **kw)
        merge(engine, **kw)
        with session_scope(engine) as s:
            edit_draft(
                s,
                study="s",
                question_id="q00",
                op="rename",
                actor="bob",
                mode="m1",
                name=f"what {RUNS[0]} does",
            )
            freeze_codebooks(s, study="s", actor="alice")
        n = len(llm.requests)
        with pytest.raises(BlindingViolation, match=RUNS[0]):
            assign(engine, **kw)
        assert len(llm.requests) == n  # refused before sending anything
