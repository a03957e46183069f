"""Questions have text: the records' ``question`` is stored per (study,
question id), refused when it changes, and shown in the codebook prompts, the judge's
problems and the pair tasks — never provenance: a question text holding a run name is
refused with an error naming the question."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from sqlmodel import select

from rcea.annotation.tasks import BlindingViolation, build_pair_task, pair_label_config
from rcea.pipeline.codebook import BlindItem, prompts
from rcea.pipeline.codebook.model import Mode
from rcea.pipeline.records import RecordValidationError
from rcea.study.codebook import BackendOptions, freeze_codebooks, induce, make_backend, merge
from rcea.study.codebook import assign as assign_stage
from rcea.study.records.ingest import ingest_file
from rcea.study.settings import Settings
from rcea.study.store import question_texts, session_scope
from rcea.study.store.models import Question, Study, Trajectory
from rcea.study.validity_audit.problems import problems_for
from tests.support.fake_llm import RUNS, FakeLLM, domain_records
from tests.support.helpers import write_jsonl

QUESTIONS = {"q00": ["direct", "distribute"] * 3, "q01": ["factor", "direct"] * 3}
TEXTS = {"q00": "Compute (2 + 3) × 4 and box the result.", "q01": "Compute (3 + 5) × 5."}


def records(texts: dict[str, str | None] = TEXTS, **kw) -> list[dict]:  # type: ignore[no-untyped-def,type-arg]
    recs = domain_records(questions=QUESTIONS, **kw)
    for r in recs:
        if texts.get(r["question_id"]) is not None:
            r["question"] = texts[r["question_id"]]
    return recs


def ingest(engine, tmp_path: Path, recs: list, name: str, study: str = "s"):  # type: ignore[no-untyped-def,type-arg]
    return ingest_file(
        engine,
        write_jsonl(tmp_path / f"{name}.jsonl", recs),
        study=study,
        artifacts_dir=tmp_path / "art",
        data_dir=tmp_path,
    )


def n_trajectories(engine) -> int:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        return len(s.exec(select(Trajectory.id)).all())


def stored(engine) -> dict[str, str | None]:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        return {q.question_id: q.text for q in s.exec(select(Question)).all()}


# --------------------------------------------------------------------------- store


def test_question_text_is_stored_and_refused_when_it_changes(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # A first file without texts: works as before (no text stored).
    ingest(engine, tmp_path, records({}), "plain")
    assert stored(engine) == {"q00": None, "q01": None}
    # New records give the stored questions their text (same ids, new trajectories).
    ingest(engine, tmp_path, records(start_k=20), "texts")
    assert stored(engine) == TEXTS
    with session_scope(engine) as s:
        st = s.exec(select(Study)).one()
        assert question_texts(s, study_id=st.id) == TEXTS
        assert problems_for(s, study_id=st.id) == TEXTS  # the judge's problems
    # The same text again is fine.
    ingest(engine, tmp_path, records(start_k=40), "again")
    before = n_trajectories(engine)

    # Another text for q01 against the store: refused, naming file, line and field;
    # nothing of the file is written.
    other = records({"q00": TEXTS["q00"], "q01": "Compute (3 + 5) × 6."}, start_k=60)
    path_line = next(i for i, r in enumerate(other, 1) if r["question_id"] == "q01")
    with pytest.raises(RecordValidationError) as err:
        ingest(engine, tmp_path, other, "changed")
    (e,) = err.value.errors
    assert (e.source, e.location, e.field) == (
        str(tmp_path / "changed.jsonl"),
        f"line {path_line}",
        "question",
    )
    assert "q01" in e.message and "different question text in the store" in e.message
    assert n_trajectories(engine) == before and stored(engine) == TEXTS

    # Two texts for one question inside a file: refused at validation, second line named.
    mixed = records(start_k=80)
    lines = [i for i, r in enumerate(mixed, 1) if r["question_id"] == "q00"]
    mixed[lines[2] - 1]["question"] = "Compute (2 + 3) × 5."
    with pytest.raises(RecordValidationError) as err:
        ingest(engine, tmp_path, mixed, "mixed")
    (e,) = err.value.errors
    assert (e.location, e.field) == (f"line {lines[2]}", "question")
    assert f"first at line {lines[0]}" in e.message
    assert n_trajectories(engine) == before


def test_question_must_be_a_non_empty_string(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    recs = records()
    recs[0]["question"] = 7
    recs[1]["question"] = "   "
    with pytest.raises(RecordValidationError) as err:
        ingest(engine, tmp_path, recs, "bad")
    got = [(e.location, e.field) for e in err.value.errors]
    assert ("line 1", "question") in got and ("line 2", "question") in got


# --------------------------------------------------------------------------- prompts


def test_prompts_show_the_question_or_omit_it() -> None:
    items = [BlindItem("T1", "2+3 = 5\n5*4 = 20")]
    modes = [Mode(id="m1", name="direct", criterion="add first")]
    question = "Compute (2 + 3) × 4."
    block = f"Problem:\n<problem>\n{question}\n</problem>\n\n"
    for render, args in (
        (prompts.render_induce, (items,)),
        (prompts.render_assign, (modes, items)),
        (prompts.render_arbitrate, (modes, items)),
    ):
        with_q = render(*args, question)[1]["content"]  # type: ignore[operator]
        without = render(*args)[1]["content"]  # type: ignore[operator]
        assert with_q == block + without
        assert "<problem>" not in without
    merge_q = prompts.render_merge([], question)[1]["content"]
    assert merge_q.startswith(block)
    ids = prompts.prompt_set_id()
    for name in ("induce", "merge", "assign", "arbitrate"):
        assert f"codebook.{name}/v2" in ids


def test_codebook_prompts_carry_the_question_and_refuse_provenance_in_it(
    engine, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    ingest(engine, tmp_path, records(), "r")
    leaky = {"q00": f"Compute (2 + 3) × 4 (see run {RUNS[0]}).", "q01": None}
    ingest(engine, tmp_path, records(leaky), "leak", study="leaky")
    with FakeLLM() as llm:
        settings = Settings(data_dir=tmp_path / "data", llm_base_url=llm.base_url, llm_model="fake")
        be = make_backend(settings, BackendOptions(kind="openai", concurrency=2, seed=5))
        induce(engine, study="s", backend=be, actor="t", batch_size=4)
        merge(engine, study="s", backend=be, actor="t")
        with session_scope(engine) as s:
            freeze_codebooks(s, study="s", actor="t")
        assign_stage(engine, study="s", backend=be, actor="t", batch_size=4)
        bodies = list(llm.requests)
        with pytest.raises(BlindingViolation) as err:
            induce(engine, study="leaky", backend=be, actor="t", batch_size=4)
        assert len(llm.requests) == len(bodies)  # nothing was sent
    tasks = {b["messages"][0]["content"].splitlines()[0] for b in bodies}
    assert tasks == {
        "Task: codebook.induce",
        "Task: codebook.merge",
        "Task: codebook.assign",
    }
    for body in bodies:
        user = body["messages"][1]["content"]
        assert body["seed"] == 5  # the run's seed is sent
        shown = [q for q, t in TEXTS.items() if f"<problem>\n{t}\n</problem>" in user]
        assert len(shown) == 1, user[:200]
    msg = str(err.value)
    assert "the question text of 'q00'" in msg and repr(RUNS[0]) in msg


# --------------------------------------------------------------------------- pair tasks


def test_pair_task_and_config_show_the_question() -> None:
    plain = pair_label_config("d")
    shown = pair_label_config("d", question=True)
    assert "$question" in shown and "$question" not in plain
    adjudication = pair_label_config("d", adjudication=True, question=True)
    # once rendered (HyperText), once as source (Text in a collapsed panel)
    assert adjudication.count('value="$question_html"') == 1
    assert adjudication.count('value="$question"') == 1
    task = build_pair_task("p", "a", "b", rng=random.Random(0), question="Compute \u202e1+1.")
    assert task.data["question"] == "Compute ⟨U+202E⟩1+1."
    assert "Compute ⟨U+202E⟩1+1." in task.data["question_html"]
    assert "question" not in build_pair_task("p", "a", "b", rng=random.Random(0)).data


# --------------------------------------------------------------------------- judge


def test_judge_prompt_shows_the_ingested_question(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import json

    from rcea.pipeline.judge import JudgeSpec
    from rcea.study.validity_audit.run import RunOptions, run_judge
    from rcea.study.validity_audit.versions import freeze_judge

    recs = records()
    ingest(engine, tmp_path, recs, "r")  # no `rcea judge problems`: the records carry them
    with session_scope(engine) as s:
        freeze_judge(s, name="llm", spec=JudgeSpec("openai", "m", seed=3), actor="r")
    with FakeLLM() as llm:
        llm.responder = lambda task, messages: json.dumps({"verdict": "valid", "rationale": "ok"})
        settings = Settings(data_dir=tmp_path / "d", llm_base_url=llm.base_url, llm_model="m")
        out = run_judge(
            engine, study="s", judge="llm", settings=settings, actor="r",
            options=RunOptions(concurrency=1),
        )  # fmt: skip
        bodies = list(llm.requests)
    assert out["complete"] and out["n_valid"] == sum(r["reward"] for r in recs)
    by_text = {r["text"]: r["question_id"] for r in recs}
    for body in bodies:
        user = body["messages"][-1]["content"]
        (qid,) = {q for t, q in by_text.items() if t in user}
        assert f"<problem>\n{TEXTS[qid]}\n</problem>" in user
