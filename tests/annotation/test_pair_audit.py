"""The pair audit end to end against real Label Studio servers, one per person: push
(blinded, idempotent, crash-safe), annotators labelling in their own sessions on their
own servers, live webhooks into the real API (read back, never trusted), sync both ways,
adjudication, the final gate, and a Label Studio restart mid-audit."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import sqlalchemy as sa
from sklearn.metrics import f1_score

from rcea.annotation.projects import export_tasks
from rcea.study.labelling import PAIR, WebhookTarget, bindings, forbidden_values
from rcea.study.pair_audit.gate import gate_status
from rcea.study.pair_audit.push import adjudicate
from rcea.study.pair_audit.sampling import audit_pairs
from rcea.study.store import list_events, session_scope
from rcea.study.store.models import Audit, LabellingProject, Trajectory
from tests.support.labelling_study import PASSWORD, SECRET, Study, choice, wait_for
from tests.support.labelstudio_fixture import LabelStudioHandle
from tests.support.product_helpers import scan_for_leaks
from tests.support.rendered import SHOWN_PAIR

pytestmark = pytest.mark.slow


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
        # the render is frozen: pushing again sends the same content (same manifest hash)
        assert info["shown_sha256"] == again["projects"][role]["shown_sha256"]
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
    assert all(set(t["data"]) == {"pair", "left", "right", *SHOWN_PAIR} for t in stored)
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
    assert set(data) == {"pair", "left", "right", "answer_1", "answer_2", *SHOWN_PAIR}
    assert sorted([data["answer_1"], data["answer_2"]]) == ["different", "same"]
    assert forbidden.scanner().scan([data]) == []
    with session_scope(study.engine) as s:
        from rcea.study.pair_audit.freeze import FreezeError

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
        from rcea.study.pair_audit.gate import record_final_gate

        record_final_gate(s, s.get(Audit, study.audit_id), res, "test")
    # deterministic: B disagrees with A (= the automatic labels) on one pair, adjudicated
    # to A's label; F1_HH (every pair both labelled) checked against scikit-learn
    b_truth = {p: truth[p] if p != flipped else _other(truth[p]) for p in truth}
    hh = f1_score(list(truth.values()), [b_truth[p] for p in truth], average="macro")
    rep = res["report"]
    assert (res["stage"], res["status"], rep["passed"]) == ("final", "passed", True)
    assert rep["automatic_macro_f1"] == pytest.approx(1.0)
    assert rep["human_human_macro_f1"] == pytest.approx(hh, abs=1e-12)
    assert rep["gap"] == pytest.approx(hh - rep["automatic_macro_f1"], abs=1e-12)
    assert [r["name"] for r in rep["requirements"] if not r["passed"]] == []
    with session_scope(study.engine) as s:
        gates = list_events(s, kind="gate.final")
        assert gates[-1].payload["partition_hash"] == res["partition_hash"]
        assert json.dumps(gates[-1].payload)  # JSON-serialisable record


def _other(label: str) -> str:
    return "different" if label == "same" else "same"


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
    import rcea.annotation.projects as projects

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

    monkeypatch.setattr("rcea.study.labelling.push.import_tasks", import_then_crash)
    with pytest.raises(Exception):  # noqa: B017 - whatever the dead server makes httpx raise
        study.push()
    study.pool["B"].server.start(timeout=300)
    with session_scope(study.engine) as s:
        b = s.exec(sa.select(LabellingProject).where(LabellingProject.role == "B")).scalar_one()
        assert b.state == "created" and b.project_id is not None  # committed before tasks
    monkeypatch.setattr("rcea.study.labelling.push.import_tasks", original)
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


def test_push_adopts_a_project_created_before_a_crash(
    study: Study, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash between creating the project and committing its id: the re-run finds the
    project by its marker and adopts it instead of creating a second one."""
    import rcea.study.labelling.push as core_push

    real_create = core_push.create_project

    def create_then_die(client, **kw):  # type: ignore[no-untyped-def]
        real_create(client, **kw)
        raise KeyboardInterrupt("crash after project creation")

    # patched where the push looks it up (rcea.study.labelling.push imports it by name)
    with monkeypatch.context() as m:
        m.setattr(core_push, "create_project", create_then_die)
        with pytest.raises(KeyboardInterrupt):
            study.push()
    with session_scope(study.engine) as s:
        a = s.exec(sa.select(LabellingProject).where(LabellingProject.role == "A")).scalar_one()
        assert a.state == "intent" and a.project_id is None
    out = study.push()
    client = study.people.client(study.person("A"))
    mine = [p for p in client.projects.list() if f"[rcea:{a.marker}]" in (p.description or "")]
    assert [p.id for p in mine] == [out["projects"]["A"]["project_id"]]
    assert core_push.TITLE_MAX == 50
