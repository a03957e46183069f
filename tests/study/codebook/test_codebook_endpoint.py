"""Real endpoints, real failures, against the local fake server: a
batch that got no answer (endpoint stopped) is retried by the rerun, counted in
``n_retried``, and the result equals an uninterrupted run; merge waits for unanswered
induction; the run's seed and the configured ``response_format`` are sent; the leak guard
names the trajectory and the value; an excluded trajectory leaves plans, prompts and the
export."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlmodel import select

from rcea.annotation.tasks import BlindingViolation
from rcea.pipeline.codebook.schemas import AssignReply
from rcea.study.codebook import (
    BackendOptions,
    exclude_trajectory,
    export_partition,
    final_labels,
    freeze_codebooks,
    induce,
    make_backend,
    merge,
    reconcile,
)
from rcea.study.codebook import assign as assign_stage
from rcea.study.codebook.backend import llm_config
from rcea.study.records.ingest import ingest_file
from rcea.study.settings import Settings
from rcea.study.store import list_events, require_study, session_scope
from rcea.study.store.models import (
    CodebookAssignment,
    CodebookBatch,
    CodebookDispute,
    CodebookDraft,
)
from tests.support.fake_llm import RUNS, FakeLLM, Faults, domain_records
from tests.support.helpers import write_jsonl

QUESTIONS = {
    "q00": ["direct", "distribute", "factor"] * 3,
    "q01": ["direct", "factor"] * 4,
}


def setup_study(engine, tmp_path: Path, study: str, recs: list | None = None) -> None:  # type: ignore[no-untyped-def,type-arg]
    recs = recs or domain_records(questions=QUESTIONS, unique=True)
    ingest_file(
        engine,
        write_jsonl(tmp_path / f"{study}.jsonl", recs),
        study=study,
        artifacts_dir=tmp_path / "art",
        data_dir=tmp_path,
    )


def backend(port: int, data: Path, **opts):  # type: ignore[no-untyped-def]
    settings = Settings(data_dir=data, llm_base_url=f"http://127.0.0.1:{port}/v1", llm_model="fake")
    kw = {"kind": "openai", "concurrency": 2, "timeout_s": 2.0, "max_retries": 1, **opts}
    return make_backend(settings, BackendOptions(**kw))


def labels(engine, study: str) -> dict[tuple[str, int], str]:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        st = require_study(s, name=study)
        rows = s.exec(select(CodebookAssignment).where(CodebookAssignment.study_id == st.id)).all()
        return {(r.trajectory_id, r.pass_no): r.label for r in rows}


def finals(engine, study: str) -> dict[str, str | None]:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        st = require_study(s, name=study)
        return {x.trajectory_id: x.mode for x in final_labels(s, study_id=st.id)}  # type: ignore[arg-type]


def cycle_head(engine, study: str, be) -> None:  # type: ignore[no-untyped-def]
    kw = {"study": study, "backend": be, "actor": "t"}
    induce(engine, batch_size=4, **kw)
    merge(engine, **kw)
    with session_scope(engine) as s:
        freeze_codebooks(s, study=study, actor="t")


def test_unanswered_batches_are_retried_and_the_result_equals_an_uninterrupted_run(
    engine, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    setup_study(engine, tmp_path, "control")
    setup_study(engine, tmp_path, "faulty")
    with FakeLLM() as llm:
        port = llm.port
        ref = backend(port, tmp_path / "ref")
        cycle_head(engine, "control", ref)
        assign_stage(engine, study="control", backend=ref, actor="t", batch_size=3)
        reconcile(engine, study="control", backend=ref, actor="t")
        be = backend(port, tmp_path / "data")
        cycle_head(engine, "faulty", be)
    # The endpoint is gone: every assignment batch fails after its retry.
    be = backend(port, tmp_path / "data")
    down = assign_stage(engine, study="faulty", backend=be, actor="t", batch_size=3)
    assert down.n_batches == down.n_run == down.n_failed > 0 and down.n_retried == 0
    assert down.usage["connection_errors"] == 2 * down.n_batches  # first try + one retry
    # Reconciliation does not arbitrate labels of unanswered batches (no dispute opened).
    rec = reconcile(engine, study="faulty", backend=be, actor="t")
    assert rec.details["new_disputes"] == 0 and rec.n_batches == 0
    assert rec.details["missing_pass"] == sum(len(v) for v in QUESTIONS.values())
    # A rerun against the dead endpoint retries them again (and counts them).
    again = assign_stage(engine, study="faulty", backend=be, actor="t", batch_size=3)
    assert again.n_retried == again.n_run == down.n_batches and again.n_skipped == 0
    with FakeLLM(port=port) as llm:
        be = backend(port, tmp_path / "data")
        up = assign_stage(engine, study="faulty", backend=be, actor="t", batch_size=3)
        assert up.n_retried == up.n_run == down.n_batches and up.n_failed == 0
        assert up.n_skipped == 0 and len(llm.served("codebook.assign")) == down.n_batches
        reconcile(engine, study="faulty", backend=be, actor="t")
        # Finished now: a further rerun asks nothing.
        done = assign_stage(engine, study="faulty", backend=be, actor="t", batch_size=3)
        assert done.n_run == done.n_retried == 0 and done.n_skipped == down.n_batches
    assert labels(engine, "faulty") == labels(engine, "control")
    assert finals(engine, "faulty") == finals(engine, "control")
    assert "INVALID" not in set(labels(engine, "faulty").values())


def test_unanswered_arbitration_leaves_disputes_open_and_is_retried(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Arbitration that got no answer sends nothing to the researcher queue: the disputes
    stay open, the rerun asks again, and the outcome equals an uninterrupted run."""
    setup_study(engine, tmp_path, "control")
    setup_study(engine, tmp_path, "faulty")
    faults = Faults(flip=0.3, low_confidence=0.15)
    with FakeLLM(faults=faults) as llm:
        port = llm.port
        ref = backend(port, tmp_path / "ref")
        cycle_head(engine, "control", ref)
        assign_stage(engine, study="control", backend=ref, actor="t", batch_size=3)
        reconcile(engine, study="control", backend=ref, actor="t")
        be = backend(port, tmp_path / "data")
        cycle_head(engine, "faulty", be)
        assign_stage(engine, study="faulty", backend=be, actor="t", batch_size=3)
    be = backend(port, tmp_path / "data")
    down = reconcile(engine, study="faulty", backend=be, actor="t")
    assert down.n_batches == down.n_failed > 0 and down.details["new_disputes"] > 0
    assert dispute_states(engine, "faulty") == {"open": down.details["new_disputes"]}
    with FakeLLM(port=port, faults=faults) as llm:
        be = backend(port, tmp_path / "data")
        up = reconcile(engine, study="faulty", backend=be, actor="t")
    assert up.n_retried == up.n_run == down.n_batches and up.n_failed == 0
    assert up.details["new_disputes"] == 0
    assert "open" not in dispute_states(engine, "faulty")
    assert dispute_states(engine, "faulty") == dispute_states(engine, "control")
    assert finals(engine, "faulty") == finals(engine, "control")


def dispute_states(engine, study: str) -> dict[str, int]:  # type: ignore[no-untyped-def]
    from collections import Counter

    with session_scope(engine) as s:
        st = require_study(s, name=study)
        rows = s.exec(select(CodebookDispute).where(CodebookDispute.study_id == st.id)).all()
        return dict(Counter(d.status for d in rows))


def test_merge_waits_for_unanswered_induction_then_drafts(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    setup_study(engine, tmp_path, "s")
    with FakeLLM() as llm:
        port = llm.port
    be = backend(port, tmp_path / "data", max_retries=0)
    down = induce(engine, study="s", backend=be, actor="t", batch_size=4)
    assert down.n_failed == down.n_batches > 0
    waiting = merge(engine, study="s", backend=be, actor="t")
    assert waiting.details["induction_unanswered"] == ["q00", "q01"]
    assert waiting.details["drafted"] == [] and waiting.n_batches == 0
    with FakeLLM(port=port):
        be = backend(port, tmp_path / "data", max_retries=0)
        up = induce(engine, study="s", backend=be, actor="t", batch_size=4)
        assert up.n_retried == up.n_run == down.n_batches and up.n_failed == 0
        made = merge(engine, study="s", backend=be, actor="t")
    assert made.details["drafted"] == ["q00", "q01"]
    assert made.details["induction_unanswered"] == []
    with session_scope(engine) as s:
        assert len(s.exec(select(CodebookDraft)).all()) == 2


def test_an_invalid_reply_is_an_answer_and_stays_finished(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    setup_study(engine, tmp_path, "s", domain_records(questions={"q00": ["direct"] * 3}))
    with FakeLLM() as llm:
        llm.script.extend([("malformed", 0), ("malformed", 0)])  # the first try + re-ask
        be = backend(llm.port, tmp_path / "data")
        first = induce(engine, study="s", backend=be, actor="t", batch_size=4)
        assert first.n_failed == 1
        second = induce(engine, study="s", backend=be, actor="t", batch_size=4)
    assert second.n_retried == second.n_run == 0 and second.n_skipped == 1
    with session_scope(engine) as s:
        (row,) = s.exec(select(CodebookBatch)).all()
        assert row.status == "failed" and row.error.startswith("invalid reply")


@pytest.mark.parametrize("mode", ["json_object", "json_schema", "none"])
def test_seed_and_response_format_are_sent(engine, tmp_path: Path, mode: str) -> None:  # type: ignore[no-untyped-def]
    setup_study(engine, tmp_path, "s", domain_records(questions={"q00": ["direct"] * 3}))
    with FakeLLM() as llm:
        be = backend(llm.port, tmp_path / "data", seed=1234, json_mode=mode)
        induce(engine, study="s", backend=be, actor="t", batch_size=4)
        (body,) = llm.requests
    assert body["seed"] == 1234
    if mode == "json_object":
        assert body["response_format"] == {"type": "json_object"}
    elif mode == "json_schema":
        fmt = body["response_format"]
        assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "InduceReply"
        assert "modes" in fmt["json_schema"]["schema"]["properties"]
    else:
        assert "response_format" not in body


def test_endpoint_options_override_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(llm_base_url="http://a/v1", llm_model="m", llm_api_key="k")
    monkeypatch.setenv("MY_LLM_KEY", "secret-2")
    cfg = llm_config(
        settings,
        BackendOptions(base_url="http://b/v1", model="m2", api_key_env="MY_LLM_KEY", seed=9),
    )
    assert (cfg.base_url, cfg.model, cfg.api_key, cfg.seed) == ("http://b/v1", "m2", "secret-2", 9)
    assert llm_config(settings, BackendOptions()).api_key == "k"
    with pytest.raises(ValueError, match="--api-key-env NOT_SET_X"):
        llm_config(settings, BackendOptions(api_key_env="NOT_SET_X"))
    with pytest.raises(ValueError, match="--response-format 'xml'"):
        llm_config(settings, BackendOptions(json_mode="xml"))
    with pytest.raises(ValueError, match="--base-url and --model"):
        llm_config(Settings(), BackendOptions())
    assert AssignReply  # the schema json_schema mode sends for assignments


def test_leak_names_the_trajectory_and_exclusion_leaves_it_out(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    recs = domain_records(questions=QUESTIONS, unique=True)
    bad = next(r for r in recs if r["question_id"] == "q01" and r["reward"] == 1)
    bad["text"] += f"\n(copied from the {RUNS[1]} logs)"
    setup_study(engine, tmp_path, "s", recs)
    with FakeLLM() as llm:
        be = backend(llm.port, tmp_path / "data")
        with pytest.raises(BlindingViolation) as err:
            cycle_head(engine, "s", be)
        msg = str(err.value)
        assert f"trajectory {bad['trajectory_id']!r}" in msg and repr(RUNS[1]) in msg
        assert "rcea codebook exclude" in msg
        with session_scope(engine) as s:
            out = exclude_trajectory(
                s, study="s", trajectory_id=bad["trajectory_id"], reason="leaks a run", actor="r"
            )
            assert out["created"] and out["question_id"] == "q01"
        with session_scope(engine) as s:  # idempotent
            again = exclude_trajectory(
                s, study="s", trajectory_id=bad["trajectory_id"], reason="x", actor="r"
            )
            assert not again["created"] and again["reason"] == "leaks a run"
        n_before = len(llm.requests)
        cycle_head(engine, "s", be)
        assign_stage(engine, study="s", backend=be, actor="t", batch_size=3)
        reconcile(engine, study="s", backend=be, actor="t")
        sent = [m["content"] for b in llm.requests[n_before:] for m in b["messages"]]
    assert sent and not any(RUNS[1] in c for c in sent)
    with session_scope(engine) as s:
        st = require_study(s, name="s")
        batches = s.exec(select(CodebookBatch)).all()
        assert not any(bad["trajectory_id"] in b.trajectory_ids for b in batches if b.reply)
        kinds = [e.kind for e in list_events(s, study_id=st.id)]
        assert kinds.count("codebook.exclude") == 1
        res = export_partition(
            s, study="s", actor="t", artifacts_dir=tmp_path / "art", allow_incomplete=True
        )
    assert res["excluded"] == {
        bad["trajectory_id"]: {"question_id": "q01", "reason": "leaks a run"}
    }
    assert res["n_accepted"] == sum(len(v) for v in QUESTIONS.values()) - 1
    import pyarrow.parquet as pq

    assert (
        bad["trajectory_id"]
        not in pq.read_table(res["parquet"]).column("trajectory_id").to_pylist()
    )


def test_cli_run_exits_4_while_the_endpoint_is_down_then_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rcea codebook run` with --base-url/--model/--api-key-env against a stopped
    endpoint: exit 4 naming the unanswered batches; with the endpoint up, the rerun
    retries them (n_retried) and finishes."""
    import json

    from typer.testing import CliRunner

    from rcea.app.cli import app

    runner = CliRunner()
    path = write_jsonl(tmp_path / "r.jsonl", domain_records(questions=QUESTIONS, unique=True))
    assert runner.invoke(app, ["ingest", str(path), "--study", "s"]).exit_code == 0
    monkeypatch.setenv("MY_KEY", "k-123")
    with FakeLLM() as llm:
        port = llm.port
    run = [
        "codebook", "run", "--study", "s", "--base-url", f"http://127.0.0.1:{port}/v1",
        "--model", "fake", "--api-key-env", "MY_KEY", "--max-retries", "0",
        "--response-format", "json_schema", "--seed", "11", "--json",
    ]  # fmt: skip
    down = runner.invoke(app, run)
    assert down.exit_code == 4, down.output
    out = json.loads(down.output)
    n_induce = out["stages"][0]["n_batches"]
    assert out["unanswered_batches"] == n_induce > 0 and out["exit_code"] == 4
    assert "got no answer from the endpoint" in out["waiting"]
    assert out["stages"][1]["details"]["induction_unanswered"] == ["q00", "q01"]
    with FakeLLM(port=port) as llm:
        up = runner.invoke(app, run)
        bodies = list(llm.requests)
    assert up.exit_code in (0, 3), up.output
    again = json.loads(up.output)
    assert again["stages"][0]["n_retried"] == n_induce and again["unanswered_batches"] == 0
    assert {b["seed"] for b in bodies} == {11}
    assert {b["response_format"]["type"] for b in bodies} == {"json_schema"}
