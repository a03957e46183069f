"""Incremental sync against real Label Studio servers (one per person): after the first
(full) sync, a sync reads only the tasks changed since the previous one — new, changed and
deleted annotations included — and a following full sync finds nothing it missed."""

from __future__ import annotations

import time
from contextlib import closing
from datetime import timedelta

import pytest
from sqlmodel import select

from rcea.study.labelling import sync as sync_module
from rcea.study.pair_audit.push import sync_audit
from rcea.study.store import session_scope
from rcea.study.store.models import Audit, LabellingProject
from tests.support.labelling_study import Study, choice


def _sync(study: Study, *, full: bool = False) -> dict:  # type: ignore[type-arg]
    with session_scope(study.engine) as s:
        return sync_audit(s, s.get(Audit, study.audit_id), study.people, full=full)


def _cursors(study: Study) -> dict[str, object]:
    with session_scope(study.engine) as s:
        rows = s.exec(select(LabellingProject)).all()
        return {r.role: r.synced_until for r in rows}


def test_incremental_sync_reads_only_changed_tasks(
    study: Study, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No overlap, so the count of tasks read is exact; a second between steps, because the
    # cursor is the server's Date header (whole seconds).
    monkeypatch.setattr(sync_module, "OVERLAP", timedelta(0))
    study.push()
    a_tasks, b_tasks = sorted(study.tasks("A").values()), sorted(study.tasks("B").values())
    n = len(a_tasks)
    assert n >= 6
    a_ids = study.label_all("A", {t: "same" for t in a_tasks[: n // 2]})
    time.sleep(1.1)

    first = _sync(study)
    assert first["mode"] == "full"
    assert first["tasks_read"] == 2 * n
    assert first["changed_by_status"] == {"counted": n // 2}
    assert all(c is not None for c in _cursors(study).values())
    time.sleep(1.1)

    # Since then: A labels one more task, changes one label and deletes another; B labels two.
    study.label_all("A", {a_tasks[n // 2]: "different"})
    with closing(study.session_of("A")) as web:
        r = web.patch(f"/api/annotations/{a_ids[0]}/", json={"result": choice("different")})
        assert r.status_code == 200, r.text
        assert web.delete(f"/api/annotations/{a_ids[1]}/").status_code == 204
    study.label_all("B", {t: "same" for t in b_tasks[:2]})
    time.sleep(1.1)

    second = _sync(study)
    assert second["mode"] == "incremental"
    assert second["tasks_read"] == 3 + 2  # A: new, changed, deleted-from; B: two new
    assert second["changed_by_status"] == {"counted": 1 + 1 + 2, "deleted": 1}
    time.sleep(1.1)

    # Nothing changed: an incremental sync reads nothing; a full one finds nothing missed.
    third = _sync(study)
    assert (third["tasks_read"], third["changed"]) == (0, 0)
    full = _sync(study, full=True)
    assert full["mode"] == "full"
    assert full["tasks_read"] == 2 * n
    assert full["changed"] == 0


def test_deleted_task_is_noticed_by_full_sync_only(study: Study) -> None:
    study.push()
    a_tasks = sorted(study.tasks("A").values())
    study.label_all("A", {t: "same" for t in a_tasks})
    assert _sync(study)["missing_tasks"] == {}
    with study.people.http(study.person("A")) as admin:
        assert admin.delete(f"/api/tasks/{a_tasks[0]}/").status_code == 204
    inc = _sync(study)
    assert inc["mode"] == "incremental"
    assert inc["missing_tasks"] == {}
    full = _sync(study, full=True)
    assert full["missing_tasks"] == {"A": 1}
    assert full["changed_by_status"] == {"deleted": 1}
