"""The problem statement reaches annotators: a study whose records carry
``question`` texts pushes pair tasks and adjudication tasks to real Label Studio servers
with the text of each pair's question, shown by the label config; a question text holding
a run name is refused before anything is created."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from rcea.annotation.display import visible
from rcea.annotation.projects import export_tasks
from rcea.annotation.tasks import BlindingViolation
from rcea.study.labelling import PAIR, bindings
from rcea.study.pair_audit.push import adjudicate
from rcea.study.pair_audit.sampling import audit_pairs
from rcea.study.records.ingest import ingest_file
from rcea.study.store import session_scope
from rcea.study.store.models import Audit
from tests.support.helpers import make_record, write_jsonl
from tests.support.labelling_study import PASSWORD, Study
from tests.support.labelstudio_fixture import LabelStudioHandle
from tests.support.rendered import SHOWN_PAIR

pytestmark = pytest.mark.slow

TEXTS = {f"q{q}": f"Problem {q}: add {q + 2} and {q + 3}, then box the sum." for q in range(5)}


def add_question_texts(study: Study, tmp_path: Path, texts: dict[str, str]) -> None:
    """One failed record per question carrying its text (the audit is already drawn)."""
    recs = [
        make_record(9000 + i, question_id=q, reward=0, text="wrong", question=t)
        for i, (q, t) in enumerate(sorted(texts.items()))
    ]
    ingest_file(
        study.engine,
        write_jsonl(tmp_path / "questions.jsonl", recs),
        study="s",
        artifacts_dir=tmp_path / "art",
        data_dir=tmp_path,
    )


def test_pair_and_adjudication_tasks_show_the_question(study: Study, tmp_path: Path) -> None:
    add_question_texts(study, tmp_path, TEXTS)
    out = study.push()
    with session_scope(study.engine) as s:
        pairs = {p.pair_key: p for p in audit_pairs(s, audit_id=study.audit_id)}
    for role in ("A", "B"):
        sdk = study.people.client(study.person(role))
        project_id = out["projects"][role]["project_id"]
        stored = export_tasks(sdk, project_id)
        assert len(stored) == len(pairs)
        for t in stored:
            assert set(t["data"]) == {
                "pair",
                "left",
                "right",
                "question",
                "question_html",
                *SHOWN_PAIR,
            }
            assert t["data"]["question"] == visible(TEXTS[pairs[t["data"]["pair"]].question_id])
        config = sdk.projects.get(id=project_id).label_config
        assert '<HyperText name="question" value="$question_html" inline="true"/>' in config

    # A and B disagree on one pair: its adjudication task shows the question too.
    tasks_a, tasks_b = study.tasks("A"), study.tasks("B")
    first = next(iter(pairs.values()))
    study.label_all("A", {tasks_a[p.id]: "same" for p in pairs.values()})
    study.label_all(
        "B", {tasks_b[p.id]: "different" if p is first else "same" for p in pairs.values()}
    )
    study.sync()
    with session_scope(study.engine) as s:
        adj = adjudicate(
            s,
            s.get(Audit, study.audit_id),
            study.people,
            adjudicator=study.emails["adjudicator"],
            password=PASSWORD,
            actor="test",
        )
    sdk = study.people.client(study.person("adjudicator"))
    adj_tasks = export_tasks(sdk, adj["project_id"])
    assert first.pair_key in {t["data"]["pair"] for t in adj_tasks}
    for t in adj_tasks:
        assert t["data"]["question"] == visible(TEXTS[pairs[t["data"]["pair"]].question_id])
    config = sdk.projects.get(id=adj["project_id"]).label_config
    assert "$question" in config and "$answer_1" in config


def test_a_question_text_with_provenance_is_refused_before_any_project(
    study: Study, tmp_path: Path
) -> None:
    texts = {**TEXTS, "q2": "Problem 2, from t00201: add 4 and 5."}  # a trajectory id
    add_question_texts(study, tmp_path, texts)
    with pytest.raises(BlindingViolation, match="question text of question 'q2'") as err:
        study.push()
    assert "'t00201'" in str(err.value)
    with session_scope(study.engine) as s:
        assert bindings(s, PAIR, study.audit_id) == []  # nothing was created


def test_validity_tasks_show_the_ingested_question(
    labelstudio_pool: list[LabelStudioHandle], tmp_path: Path
) -> None:
    """No `rcea judge problems`: the records' question texts are the problems annotators
    see in the validity calibration tasks."""
    from rcea.pipeline.toy import problem_by_id
    from rcea.study.labelling import ensure_member
    from rcea.study.settings import Settings
    from rcea.study.store import make_engine, upgrade
    from rcea.study.store.models import ValidityCheck
    from rcea.study.validity_audit.checks import sample_calibration
    from rcea.study.validity_audit.labelling import push_check
    from rcea.study.validity_audit.run import run_judge
    from tests.support.judge_study import ORACLE, freeze, toy_records
    from tests.support.labelstudio_fixture import register_people

    engine = make_engine(f"sqlite:///{tmp_path / 'v.db'}")
    upgrade(engine)
    recs = toy_records(n_questions=6, per_question=10)
    texts = {r["question_id"]: f"Evaluate {problem_by_id(r['question_id'])}." for r in recs}
    for r in recs:
        r["question"] = texts[r["question_id"]]
    ingest_file(
        engine, write_jsonl(tmp_path / "toy.jsonl", recs), study="toy",
        artifacts_dir=tmp_path / "art", data_dir=tmp_path,
    )  # fmt: skip
    freeze(engine, "oracle", ORACLE)
    run_judge(engine, study="toy", judge="oracle", settings=Settings(data_dir=tmp_path / "d"),
              actor="r")  # fmt: skip
    with session_scope(engine) as s:
        check = sample_calibration(s, study="toy", judge="oracle", actor="r", size=12,
                                   held_out=8, seed=1, name="cal")  # fmt: skip
        check_id = check.id
    email = f"val-{uuid.uuid4().hex[:8]}@rcea.test"
    people = register_people(tmp_path / "data", labelstudio_pool[:1], [email])
    ensure_member(people, email, PASSWORD)
    with session_scope(engine) as s:
        out = push_check(s, s.get(ValidityCheck, check_id), people, annotators=[email], actor="r")
    stored = export_tasks(
        people.client(people.require(email)), out["projects"]["annotator-1"]["project_id"]
    )
    by_text = {r["text"]: r["question_id"] for r in recs}
    assert len(stored) == 12
    for t in stored:
        qid = by_text[t["data"]["solution"]]
        assert t["data"]["problem"] == visible(texts[qid])
    engine.dispose()
