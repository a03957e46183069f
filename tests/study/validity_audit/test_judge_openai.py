"""The validity judge through the ``openai`` backend against the local fake
OpenAI-compatible server: temperature 0 and the frozen seed, blinded prompts (checked on
what the server received), replies that are not valid JSON → ``unparseable`` (counted
against coverage, never valid), a call that fails after its retries stays pending and is
asked again by the next run, the response cache (a rerun repeats no call), and the
provenance scan stopping a leaking prompt."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from sqlmodel import select

from rcea.annotation.tasks import BlindingViolation
from rcea.pipeline.judge import JudgeSpec
from rcea.pipeline.toy import process_valid, question_from_id
from rcea.pipeline.toy.domain import all_questions
from rcea.study.settings import Settings
from rcea.study.store import make_engine, require_study, session_scope, upgrade
from rcea.study.store.models import JudgeVerdict, Trajectory
from rcea.study.validity_audit.problems import load_problems
from rcea.study.validity_audit.run import RunOptions, run_judge
from rcea.study.validity_audit.versions import freeze_judge
from tests.support.fake_llm import FakeLLM, expected_fingerprint
from tests.support.judge_study import MODEL, RUN, ingest_toy
from tests.support.product_helpers import scan_for_leaks

QUESTIONS = {q.expression: q for q in all_questions()}


def fake_judge(task: str, messages: list[dict[str, str]]) -> str | None:
    """The toy oracle as a chat model; one solution in four gets a non-JSON answer."""
    if task != "judge.validity":
        return None
    user = messages[-1]["content"]
    problem = re.search(r"<problem>\n(.*?)\n</problem>", user, re.DOTALL).group(1)  # type: ignore[union-attr]
    solution = re.search(r"<solution>\n(.*?)\n</solution>", user, re.DOTALL).group(1)  # type: ignore[union-attr]
    if sum(map(ord, solution)) % 4 == 0:
        return "The solution looks valid to me."
    ok = process_valid(QUESTIONS[problem], solution)
    return json.dumps({"verdict": "valid" if ok else "invalid", "rationale": "checked each step"})


@pytest.fixture
def sqlite_engine(tmp_path: Path):  # type: ignore[no-untyped-def]
    eng = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    upgrade(eng)
    yield eng
    eng.dispose()


def test_openai_judge_run(sqlite_engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    engine = sqlite_engine
    recs = ingest_toy(engine, tmp_path, n_questions=5, per_question=8)
    with session_scope(engine) as s:
        load_problems(s, study="toy", source="rcea.pipeline.toy:problem_by_id")
        freeze_judge(s, name="llm", spec=JudgeSpec("openai", "judge-model-x", seed=7), actor="r")
        sid = require_study(s, name="toy").id
    successes = {r["trajectory_id"]: r for r in recs if r["reward"] == 1}
    with FakeLLM() as llm:
        llm.responder = fake_judge
        settings = Settings(
            data_dir=tmp_path / "d", llm_base_url=llm.base_url, llm_model="other", llm_api_key="k"
        )
        opts = RunOptions(concurrency=1, max_retries=1, timeout_s=5)
        llm.script.extend([("500", 0.0), ("500", 0.0)])  # the first call fails twice
        first = run_judge(
            engine, study="toy", judge="llm", settings=settings, actor="r", options=opts
        )
        assert first["n_failed"] == 1 and not first["complete"]
        pending = first["failed_trajectory_ids"][0]
        second = run_judge(
            engine, study="toy", judge="llm", settings=settings, actor="r", options=opts
        )
        assert second["n_new"] == 1 and second["complete"]
        served = len(llm.served())
        third = run_judge(
            engine, study="toy", judge="llm", settings=settings, actor="r", options=opts
        )
        assert third["n_new"] == 0 and len(llm.served()) == served  # nothing asked again
        bodies = list(llm.requests)

    # decoding: the frozen model, temperature 0, the frozen seed
    assert {(b["model"], b["temperature"], b["seed"]) for b in bodies} == {
        ("judge-model-x", 0.0, 7)
    }
    # blinding, on what the server received
    prompts = [m["content"] for b in bodies for m in b["messages"]]
    forbidden = {RUN, MODEL, *successes}
    exact = {r["question_id"] for r in recs} | {str(r["seed"]) for r in recs}
    assert scan_for_leaks(prompts, forbidden, forbidden_exact=exact) == []

    with session_scope(engine) as s:
        verdicts = {
            v.trajectory_id: v
            for v in s.exec(select(JudgeVerdict).where(JudgeVerdict.study_id == sid)).all()
        }
        validity = {
            t.trajectory_id: t.validity
            for t in s.exec(select(Trajectory).where(Trajectory.study_id == sid)).all()
        }
    assert set(verdicts) == set(successes) and pending in verdicts
    unparseable = [t for t, v in verdicts.items() if v.verdict == "unparseable"]
    assert unparseable, "the fake judge answers one solution in four with prose"
    for tid, v in verdicts.items():
        text = successes[tid]["text"]
        if sum(map(ord, text)) % 4 == 0:
            assert v.verdict == "unparseable" and validity[tid] == 0  # never valid
            assert "invalid reply" in (v.error or "")
        else:
            truth = process_valid(question_from_id(successes[tid]["question_id"]), text)
            assert v.verdict == ("valid" if truth else "invalid")
            assert validity[tid] == truth
    assert third["n_unparseable"] == len(unparseable)
    assert third["coverage"] == pytest.approx(1 - len(unparseable) / len(successes))
    assert third["n_valid"] == sum(validity[t] == 1 for t in successes)


def test_openai_judge_refuses_leaking_prompt(sqlite_engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from tests.support.helpers import write_jsonl

    rec = {
        "trajectory_id": "leaky-1",
        "question_id": "st-1-2-3",
        "text": f"1+2=3\n3*3=9\nas in {RUN}\n\\boxed{{9}}",
        "reward": 1,
        "run": RUN,
        "model": MODEL,
        "step": 0,
        "seed": 1,
    }
    from rcea.study.records.ingest import ingest_file

    ingest_file(
        sqlite_engine,
        write_jsonl(tmp_path / "l.jsonl", [rec]),
        study="leaky",
        artifacts_dir=tmp_path / "a",
        data_dir=tmp_path,
    )
    with session_scope(sqlite_engine) as s:
        load_problems(s, study="leaky", source="rcea.pipeline.toy:problem_by_id")
        freeze_judge(s, name="llm", spec=JudgeSpec("openai", "m"), actor="r")
    with FakeLLM() as llm:
        llm.responder = fake_judge
        settings = Settings(data_dir=tmp_path / "d", llm_base_url=llm.base_url, llm_model="m")
        with pytest.raises(BlindingViolation, match="refusing to send"):
            run_judge(sqlite_engine, study="leaky", judge="llm", settings=settings, actor="r")
        assert llm.requests == []


def test_paged_run_equals_one_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Successes are read in keyset pages (bounded memory): pages of 3 rows give the same
    verdicts, validity column and summary as one page, sending the same prompts."""
    import rcea.study.validity_audit.run as judge_run

    outs, stores, served = [], [], []
    for page in (10_000, 3):
        monkeypatch.setattr(judge_run, "PAGE", page)
        root = tmp_path / f"p{page}"
        root.mkdir()
        engine = make_engine(f"sqlite:///{root / 'store.db'}")
        upgrade(engine)
        recs = ingest_toy(engine, root, n_questions=5, per_question=8)
        with session_scope(engine) as s:
            load_problems(s, study="toy", source="rcea.pipeline.toy:problem_by_id")
            freeze_judge(s, name="llm", spec=JudgeSpec("openai", "judge-model-x"), actor="r")
        with FakeLLM() as llm:
            llm.responder = fake_judge
            settings = Settings(
                data_dir=root / "d", llm_base_url=llm.base_url, llm_model="m", llm_api_key="k"
            )
            opts = RunOptions(concurrency=2, max_retries=0, timeout_s=5)
            out = run_judge(
                engine, study="toy", judge="llm", settings=settings, actor="r", options=opts
            )
            served.append(sorted(expected_fingerprint(b) for b in llm.requests))
        with session_scope(engine) as s:
            stores.append(
                sorted(
                    (v.trajectory_id, v.verdict, t.validity)
                    for v, t in s.exec(
                        select(JudgeVerdict, Trajectory).where(
                            JudgeVerdict.trajectory_id == Trajectory.trajectory_id
                        )
                    ).all()
                )
            )
        engine.dispose()
        outs.append({k: v for k, v in out.items() if k != "usage"})
    n_success = sum(r["reward"] == 1 for r in recs)
    assert n_success > 3 * 3  # several pages
    assert outs[0] == outs[1] and outs[1]["n_new"] == n_success and outs[1]["complete"]
    assert stores[0] == stores[1] and len(stores[1]) == n_success
    # the same prompts (identical toy solutions share one; concurrent twins may both go out)
    texts = {(r["question_id"], r["text"]) for r in recs if r["reward"] == 1}
    assert set(served[0]) == set(served[1]) and len(set(served[1])) == len(texts)


def test_paged_run_scans_a_later_page(
    sqlite_engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """The provenance scan knows the trajectory ids of the questions of every page: a
    solution on the third page naming a sibling trajectory's id is refused there, after
    the calls of the first two pages."""
    import rcea.study.validity_audit.run as judge_run
    from rcea.study.records.ingest import ingest_file
    from tests.support.helpers import write_jsonl

    monkeypatch.setattr(judge_run, "PAGE", 2)
    recs = []
    for q in ("st-1-2-3", "st-2-3-4", "st-3-4-5"):
        for k in (1, 2):
            recs.append(
                {
                    "trajectory_id": f"traj-{q}-{k}",
                    "question_id": q,
                    "text": f"1+2=3\n3*3=9\ncheck {k}\n\\boxed{{9}}",
                    "reward": 1,
                    "run": RUN,
                    "model": MODEL,
                    "step": 0,
                    "seed": k,
                }
            )
    recs[-1]["text"] = "as in traj-st-3-4-5-1: 1+2=3\n\\boxed{9}"
    ingest_file(
        sqlite_engine,
        write_jsonl(tmp_path / "p.jsonl", recs),
        study="paged",
        artifacts_dir=tmp_path / "a",
        data_dir=tmp_path,
    )
    with session_scope(sqlite_engine) as s:
        load_problems(s, study="paged", source="rcea.pipeline.toy:problem_by_id")
        freeze_judge(s, name="llm", spec=JudgeSpec("openai", "m"), actor="r")
    with FakeLLM() as llm:
        llm.responder = fake_judge
        settings = Settings(data_dir=tmp_path / "d", llm_base_url=llm.base_url, llm_model="m")
        opts = RunOptions(concurrency=1, max_retries=0, timeout_s=5)
        with pytest.raises(BlindingViolation, match="traj-st-3-4-5-1"):
            run_judge(
                sqlite_engine, study="paged", judge="llm", settings=settings, actor="r",
                options=opts,
            )  # fmt: skip
        sent = {
            re.search(
                r"<solution>\n(.*?)\n</solution>", b["messages"][-1]["content"], re.DOTALL
            ).group(1)  # type: ignore[union-attr]
            for b in llm.requests
        }
        # pages 1 and 2 and the clean first row of page 3 were asked; the leak never left
        assert sent == {r["text"] for r in recs[:5]}
