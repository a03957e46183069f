"""The hash of what an annotator saw is recorded with each task: pushing pair and validity
tasks to real Label Studio servers stores each task's ``shown_sha256`` in its task row
(``render_sha256``), a second push computes the same hash, and a push whose render
differs (a changed renderer) is reported task by task while the stored hash and the
task in Label Studio stay as they were (docs/labelstudio.md "What a task shows")."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlmodel import select
from typer.testing import CliRunner

import rcea.annotation.tasks
from rcea.annotation.projects import export_tasks
from rcea.annotation.tasks import SHOWN_KEY
from rcea.app.cli import app
from rcea.study import events
from rcea.study.labelling import ensure_member
from rcea.study.records.ingest import ingest_file
from rcea.study.settings import Settings
from rcea.study.store import list_events, make_engine, session_scope, upgrade
from rcea.study.store.models import AuditTask, ValidityCheck, ValidityTask
from rcea.study.validity_audit.checks import sample_calibration
from rcea.study.validity_audit.labelling import push_check
from rcea.study.validity_audit.problems import load_problems
from rcea.study.validity_audit.run import run_judge
from tests.support.helpers import write_jsonl
from tests.support.judge_study import ORACLE, freeze, toy_records
from tests.support.labelling_study import PASSWORD, Study
from tests.support.labelstudio_fixture import LabelStudioHandle, register_people

pytestmark = pytest.mark.slow


def changed_renderer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every text now renders to other HTML (what a changed renderer or sanitizer does)."""
    monkeypatch.setattr(rcea.annotation.tasks, "render", lambda text: "<p>another render</p>")


def stored_hashes(engine: sa.Engine, model: type, role: str) -> dict[int, str | None]:
    """task id → the task row's recorded render hash."""
    with session_scope(engine) as s:
        rows = s.exec(select(model).where(model.role == role)).all()
        return {r.task_id: r.render_sha256 for r in rows}


def shown_in_label_studio(client, project_id: int) -> dict[int, str]:  # type: ignore[no-untyped-def]
    """task id → the ``shown_sha256`` the task's data holds in Label Studio."""
    return {int(t["id"]): t["data"][SHOWN_KEY] for t in export_tasks(client, project_id)}


def test_pair_tasks_record_the_render_hash(study: Study, monkeypatch: pytest.MonkeyPatch) -> None:
    first = study.push()
    recorded = {}
    for role in ("A", "B"):
        client = study.people.client(study.person(role))
        in_ls = shown_in_label_studio(client, first["projects"][role]["project_id"])
        recorded[role] = stored_hashes(study.engine, AuditTask, role)
        # every task row holds the hash of exactly what its task shows
        assert recorded[role] == in_ls and len(in_ls) == first["projects"][role]["n_tasks"]
        assert len(set(in_ls.values())) == len(in_ls)  # one per task, not one per project
        assert first["projects"][role]["render_changed"] == []

    again = study.push()  # deterministic: the same hashes, nothing reported
    for role in ("A", "B"):
        assert again["projects"][role]["render_changed"] == []
        assert stored_hashes(study.engine, AuditTask, role) == recorded[role]

    changed_renderer(monkeypatch)
    third = study.push()
    for role in ("A", "B"):
        info = third["projects"][role]
        assert info["n_new"] == 0
        reported = {c["task_id"]: (c["stored"], c["now"]) for c in info["render_changed"]}
        assert set(reported) == set(recorded[role])  # every task, each by its id
        assert all(stored == recorded[role][t] != now for t, (stored, now) in reported.items())
        # never silently overwritten: neither the store nor Label Studio changed
        assert stored_hashes(study.engine, AuditTask, role) == recorded[role]
        client = study.people.client(study.person(role))
        assert shown_in_label_studio(client, info["project_id"]) == recorded[role]
    with session_scope(study.engine) as s:  # the push's event says so too
        last = list_events(s, kind=events.AUDIT_PUSH)[-1]
        assert len(last.payload["projects"]["A"]["render_changed"]) == len(recorded["A"])

    # `rcea audit push` says so, one warning per task, and still changes nothing
    monkeypatch.setenv("RCEA_DATABASE_URL", str(study.engine.url))
    out = CliRunner().invoke(
        app,
        ["audit", "push", "--annotator-a", study.emails["A"],
         "--annotator-b", study.emails["B"], "--no-webhook"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    warned = [ln for ln in out.output.splitlines() if "would now show another render" in ln]
    assert len(warned) == len(recorded["A"]) + len(recorded["B"])
    assert all(f"task {t} of annotator A" in out.output for t in recorded["A"])
    assert stored_hashes(study.engine, AuditTask, "A") == recorded["A"]


def test_validity_tasks_record_the_render_hash(
    labelstudio_pool: list[LabelStudioHandle], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'v.db'}")
    upgrade(engine)
    ingest_file(
        engine, write_jsonl(tmp_path / "toy.jsonl", toy_records(n_questions=4, per_question=8)),
        study="toy", artifacts_dir=tmp_path / "art", data_dir=tmp_path,
    )  # fmt: skip
    with session_scope(engine) as s:
        load_problems(s, study="toy", source="rcea.pipeline.toy:problem_by_id")
    freeze(engine, "oracle", ORACLE)
    run_judge(engine, study="toy", judge="oracle", settings=Settings(data_dir=tmp_path / "d"),
              actor="r")  # fmt: skip
    with session_scope(engine) as s:
        check_id = sample_calibration(s, study="toy", judge="oracle", actor="r", size=8,
                                      held_out=4, seed=1, name="cal").id  # fmt: skip
    email = f"val-{uuid.uuid4().hex[:8]}@rcea.test"
    people = register_people(tmp_path / "data", labelstudio_pool[:1], [email])
    ensure_member(people, email, PASSWORD)
    client = people.client(people.require(email))

    def push() -> dict:  # type: ignore[type-arg]
        with session_scope(engine) as s:
            out = push_check(s, s.get(ValidityCheck, check_id), people, annotators=[email],
                             actor="r")  # fmt: skip
        return out["projects"]["annotator-1"]

    first = push()
    recorded = stored_hashes(engine, ValidityTask, "annotator-1")
    assert recorded == shown_in_label_studio(client, first["project_id"])
    assert len(recorded) == 8 and None not in recorded.values()
    assert first["render_changed"] == [] and push()["render_changed"] == []
    assert stored_hashes(engine, ValidityTask, "annotator-1") == recorded

    changed_renderer(monkeypatch)
    third = push()
    assert sorted(c["task_id"] for c in third["render_changed"]) == sorted(recorded)
    assert stored_hashes(engine, ValidityTask, "annotator-1") == recorded
    assert shown_in_label_studio(client, third["project_id"]) == recorded

    # `rcea judge calibrate push` warns once per task too
    monkeypatch.setenv("RCEA_DATABASE_URL", str(engine.url))
    out = CliRunner().invoke(
        app, ["judge", "calibrate", "push", "--annotator", email, "--no-webhook"]
    )
    assert out.exit_code == 0, out.output
    warned = [ln for ln in out.output.splitlines() if "would now show another render" in ln]
    assert sorted(int(ln.split()[2]) for ln in warned) == sorted(recorded)
    assert stored_hashes(engine, ValidityTask, "annotator-1") == recorded
    engine.dispose()
