"""The pair audit end to end against real Label Studio servers, one per person: push
(blinded, idempotent, crash-safe), annotators labelling in their own sessions on their
own servers, live webhooks into the real API (read back, never trusted), sync both ways,
adjudication, the final gate, and a Label Studio restart mid-audit."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from annotation.accounts import login_session
from annotation.people import People
from annotation.projects import export_tasks
from annotation.tasks import scan_for_leaks
from app.api import create_app
from app.audit.labels import gate_status
from app.audit.push import adjudicate, push_audit, sync_audit
from app.audit.sampling import audit_pairs
from app.labelling import PAIR, WebhookTarget, bindings, forbidden_values
from app.settings import Settings
from app.store import list_events, make_engine, session_scope, upgrade
from app.store.models import Audit, AuditLabel, AuditTask, LabellingProject, Trajectory
from tests.helpers import audit_study, draw_test_audit, free_port
from tests.labelstudio_fixture import LabelStudioHandle, register_people

pytestmark = pytest.mark.slow
SECRET = "pair-audit-hook-secret"
PASSWORD = "annot-pass-123"
ROLES = ("A", "B", "adjudicator")


def choice(label: str) -> list[dict]:
    return [
        {
            "from_name": "strategy",
            "to_name": "left",
            "type": "choices",
            "value": {"choices": [label]},
        }
    ]


class Study:
    """An audit in a fresh store, its people on the pool servers, and the real API."""

    def __init__(self, tmp_path: Path, pool: list[LabelStudioHandle]) -> None:
        self.data_dir = tmp_path / "d"
        self.engine = make_engine(f"sqlite:///{tmp_path / 'audit.db'}")
        upgrade(self.engine)
        audit_study(self.engine, tmp_path)
        self.audit_id = draw_test_audit(self.engine, tmp_path)
        tag = uuid.uuid4().hex[:8]
        self.emails = {r: f"{r.lower()}-{tag}@rcea.test" for r in ROLES}
        self.pool = dict(zip(ROLES, pool, strict=True))
        self.people: People = register_people(self.data_dir, pool, [self.emails[r] for r in ROLES])
        self.hook_base = ""

    def person(self, role: str):  # type: ignore[no-untyped-def]
        return self.people.require(self.emails[role])

    def session_of(self, role: str) -> httpx.Client:
        return login_session(self.pool[role].url, self.emails[role], PASSWORD)

    def push(self) -> dict:  # type: ignore[type-arg]
        with session_scope(self.engine) as s:
            return push_audit(
                s,
                s.get(Audit, self.audit_id),
                self.people,
                annotators={r: self.emails[r] for r in ("A", "B")},
                passwords={"A": PASSWORD, "B": PASSWORD},
                webhook=WebhookTarget(self.hook_base, SECRET) if self.hook_base else None,
                actor="test",
            )

    def sync(self) -> dict:  # type: ignore[type-arg]
        with session_scope(self.engine) as s:
            return sync_audit(s, s.get(Audit, self.audit_id), self.people)

    def tasks(self, role: str) -> dict[int, int]:
        with session_scope(self.engine) as s:
            rows = s.exec(
                sa.select(AuditTask).where(
                    AuditTask.audit_id == self.audit_id, AuditTask.role == role
                )
            ).scalars()
            return {r.pair_id: r.task_id for r in rows}

    def label_all(self, role: str, task_labels: dict[int, str]) -> list[int]:
        ids = []
        with closing(self.session_of(role)) as web:
            for task_id, label in task_labels.items():
                r = web.post(
                    f"/api/tasks/{task_id}/annotations/",
                    json={"result": choice(label), "lead_time": 1.0},
                )
                assert r.status_code == 201, r.text
                ids.append(r.json()["id"])
        return ids

    def labels(self) -> list[tuple[str, int, str, str]]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(
                    AuditLabel.role, AuditLabel.annotation_id, AuditLabel.status, AuditLabel.label
                )
            ).all()
        return sorted(tuple(r) for r in rows)

    def gate(self) -> dict:  # type: ignore[type-arg]
        with session_scope(self.engine) as s:
            return gate_status(s, s.get(Audit, self.audit_id), final=False)


@pytest.fixture
def study(tmp_path: Path, labelstudio_pool: list[LabelStudioHandle]) -> Iterator[Study]:
    st = Study(tmp_path, labelstudio_pool)
    yield st
    st.engine.dispose()


@pytest.fixture
def api(study: Study) -> Iterator[str]:
    """The real rcea API (webhook receiver) on a free loopback port, on the study's store
    and people registry."""
    import uvicorn

    settings = Settings(data_dir=study.data_dir, api_token="t", webhook_secret=SECRET)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings, engine=study.engine),
            host="127.0.0.1",
            port=port,
            log_level="warning",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.05)
    study.hook_base = f"http://127.0.0.1:{port}/webhooks/label-studio"
    yield study.hook_base
    server.should_exit = True
    thread.join(timeout=10)


def wait_for(predicate, timeout: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def test_pair_audit_in_label_studio(study: Study, api: str) -> None:
    first = study.push()
    again = study.push()
    with session_scope(study.engine) as s:
        pairs = audit_pairs(s, audit_id=study.audit_id)
        ids = {p.trajectory_a for p in pairs} | {p.trajectory_b for p in pairs}
        forbidden = forbidden_values(s, s.get(Audit, study.audit_id).study_id, ids)
        steps_seeds = {
            str(v) for t in s.exec(sa.select(Trajectory)).scalars() for v in (t.step, t.seed)
        }
        bound = {b.role: b for b in bindings(s, PAIR, study.audit_id)}
    n = len(pairs)
    for role in ("A", "B"):
        info = first["projects"][role]
        assert info["n_tasks"] == n == info["n_new"] and again["projects"][role]["n_new"] == 0
        assert info["url"] == study.pool[role].url  # each person on their own server
        assert bound[role].state == "created" and bound[role].project_id == info["project_id"]
        client = study.people.client(study.person(role))
        assert len(export_tasks(client, info["project_id"])) == n
    assert first["new_accounts"]["A"]["email"] == study.emails["A"]

    # --- leak test: everything Label Studio actually stores for the annotators
    stored = [
        t
        for role in ("A", "B")
        for t in export_tasks(
            study.people.client(study.person(role)), first["projects"][role]["project_id"]
        )
    ]
    assert all(set(t["data"]) == {"pair", "left", "right"} for t in stored)
    assert all(not t.get("predictions") for t in stored)
    sent = [{"data": t["data"], "meta": t.get("meta")} for t in stored]
    assert forbidden.scanner().scan(sent) == []
    assert scan_for_leaks(sent, set(), forbidden_exact=steps_seeds | {"same", "different"}) == []

    # --- annotators label in their own sessions on their own servers; webhooks are live
    tasks_a, tasks_b = study.tasks("A"), study.tasks("B")
    truth = {p.id: p.automatic or "same" for p in pairs}
    flipped = pairs[0].id
    study.label_all("A", {tasks_a[p]: truth[p] for p in truth})
    b_labels = {tasks_b[p]: truth[p] for p in truth}
    b_labels[tasks_b[flipped]] = "different" if truth[flipped] == "same" else "same"
    study.label_all("B", b_labels)
    # rcea's own admin account (not the person) also labels one of A's tasks
    admin = study.people.client(study.person("A"))
    admin_ann = admin.annotations.create(id=tasks_a[pairs[1].id], result=choice("same"))
    assert wait_for(lambda: len(study.labels()) >= 2 * n + 1), "webhooks did not arrive"
    via_webhooks = len(study.labels())

    synced = study.sync()
    assert synced["annotations_seen"] == 2 * n + 1
    assert synced["changed"] == 2 * n + 1 - via_webhooks == 0
    res = study.gate()
    assert res["status"] == "preliminary"
    assert res["progress"]["A"] == n and res["progress"]["B"] == n
    assert res["labels"] == {"counted": 2 * n, "wrong_user": 1}
    assert res["n_needing_adjudication"] == 1
    assert ("A", admin_ann.id, "wrong_user", "same") in study.labels()

    # --- adjudication: only the disagreement; answers shown, automatic label never
    with pytest.raises(Exception, match="different person"), session_scope(study.engine) as s:
        adjudicate(
            s,
            s.get(Audit, study.audit_id),
            study.people,
            adjudicator=study.emails["A"],
            actor="test",
        )
    with session_scope(study.engine) as s:
        adj = adjudicate(
            s,
            s.get(Audit, study.audit_id),
            study.people,
            adjudicator=study.emails["adjudicator"],
            password=PASSWORD,
            actor="test",
            webhook=WebhookTarget(api, SECRET),
        )
    assert adj["n_pairs"] == 1 and adj["url"] == study.pool["adjudicator"].url
    adj_tasks = export_tasks(study.people.client(study.person("adjudicator")), adj["project_id"])
    assert len(adj_tasks) == 1
    data = adj_tasks[0]["data"]
    assert set(data) == {"pair", "left", "right", "answer_1", "answer_2"}
    assert sorted([data["answer_1"], data["answer_2"]]) == ["different", "same"]
    assert forbidden.scanner().scan([data]) == []
    with session_scope(study.engine) as s:
        from app.audit.freeze import FreezeError

        with pytest.raises(FreezeError, match="need adjudication"):
            gate_status(s, s.get(Audit, study.audit_id), final=True)
    study.label_all("adjudicator", {adj_tasks[0]["id"]: truth[flipped]})

    # --- Label Studio of A restarts mid-audit: sync resumes, nothing is duplicated
    study.pool["A"].server.stop()
    study.pool["A"].server.start(timeout=300)
    study.sync()
    assert study.sync()["changed"] == 0
    assert len(study.labels()) == 2 * n + 2
    with session_scope(study.engine) as s:
        res = gate_status(s, s.get(Audit, study.audit_id), final=True)
        from app.audit.labels import record_final_gate

        record_final_gate(s, s.get(Audit, study.audit_id), res, "test")
    assert res["stage"] == "final" and res["status"] == "passed"
    assert res["report"]["automatic_macro_f1"] == pytest.approx(1.0)
    with session_scope(study.engine) as s:
        gates = list_events(s, kind="gate.final")
        assert gates[-1].payload["partition_hash"] == res["partition_hash"]
        assert json.dumps(gates[-1].payload)  # JSON-serialisable record


def _kill(handle: LabelStudioHandle) -> None:
    pid = handle.server.status().pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 20
    while handle.server.status().running and time.monotonic() < deadline:
        time.sleep(0.1)


def test_push_killed_mid_import_resumes_with_one_project(
    study: Study, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Label Studio of B is killed (SIGKILL) after B's first import batch: the push fails;
    after a restart the re-run adopts the half-made project — exactly one project per
    person and round, every task present once — and labels made there are synced."""
    import annotation.projects as projects

    monkeypatch.setattr(projects, "IMPORT_BATCH", 4)
    original = projects.import_tasks
    calls = []

    def import_then_crash(client, project_id, tasks, **kw):  # type: ignore[no-untyped-def]
        calls.append(project_id)
        if len(calls) == 1:  # A's push goes through
            return original(client, project_id, tasks, **kw)

        def progress(n: int) -> None:
            _kill(study.pool["B"])  # dies right after the first batch went in

        return original(client, project_id, tasks, **{**kw, "progress": progress})

    monkeypatch.setattr("app.labelling.push.import_tasks", import_then_crash)
    with pytest.raises(Exception):  # noqa: B017 - whatever the dead server makes httpx raise
        study.push()
    study.pool["B"].server.start(timeout=300)
    with session_scope(study.engine) as s:
        b = s.exec(sa.select(LabellingProject).where(LabellingProject.role == "B")).scalar_one()
        assert b.state == "created" and b.project_id is not None  # committed before tasks
    monkeypatch.setattr("app.labelling.push.import_tasks", original)
    out = study.push()
    with session_scope(study.engine) as s:
        n = len(audit_pairs(s, audit_id=study.audit_id))
    for role in ("A", "B"):
        client = study.people.client(study.person(role))
        tasks = export_tasks(client, out["projects"][role]["project_id"])
        keys = [t["data"]["pair"] for t in tasks]
        assert len(keys) == len(set(keys)) == n  # every task present once
        assert len(study.tasks(role)) == n
    assert out["projects"]["B"]["project_id"] == b.project_id  # adopted, not a second one
    same_title = [
        p
        for p in study.people.client(study.person("B")).projects.list()
        if (p.description or "").endswith(f"[rcea:{b.marker}]")
    ]
    assert len(same_title) == 1
    study.label_all("B", {t: "same" for t in list(study.tasks("B").values())[:3]})
    assert study.sync()["changed_by_status"] == {"counted": 3}


def test_push_adopts_a_project_created_before_a_crash(study: Study) -> None:
    """A crash between creating the project and committing its id: the re-run finds the
    project by its marker and adopts it instead of creating a second one."""
    import app.labelling.push as core_push

    real_create = None

    def create_then_die(client, **kw):  # type: ignore[no-untyped-def]
        real_create(client, **kw)
        raise KeyboardInterrupt("crash after project creation")

    from annotation import projects

    real_create = projects.create_project
    projects.create_project = create_then_die  # type: ignore[assignment]
    try:
        with pytest.raises(KeyboardInterrupt):
            study.push()
    finally:
        projects.create_project = real_create  # type: ignore[assignment]
    with session_scope(study.engine) as s:
        a = s.exec(sa.select(LabellingProject).where(LabellingProject.role == "A")).scalar_one()
        assert a.state == "intent" and a.project_id is None
    out = study.push()
    client = study.people.client(study.person("A"))
    mine = [p for p in client.projects.list() if f"[rcea:{a.marker}]" in (p.description or "")]
    assert [p.id for p in mine] == [out["projects"]["A"]["project_id"]]
    assert core_push.TITLE_MAX == 50
