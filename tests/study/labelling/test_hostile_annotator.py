"""Annotator A, with only A's own browser session on A's own server, tries to bend what
counts: moving an annotation to another task, annotating one task twice,
huge notes. Against real Label Studio servers; the store must follow what Label Studio
holds, one label per person and task, and notes and events stay bounded."""

from __future__ import annotations

import json
from contextlib import closing

import pytest
import sqlalchemy as sa

from rcea.annotation.payloads import MAX_NOTE, NOTE_TRUNCATED
from rcea.annotation.tasks import NOTE_FIELD
from rcea.study.pair_audit.labels import status_counts
from rcea.study.pair_audit.push import sync_audit
from rcea.study.store import list_events, session_scope
from rcea.study.store.models import Audit, AuditLabel
from tests.support.labelling_study import Study, choice

pytestmark = pytest.mark.slow


def rows(study: Study) -> dict[int, tuple[int, int | None, str, str | None]]:
    """annotation id → (task, pair, status, label) of A's labels."""
    with study.engine.connect() as conn:
        got = conn.execute(
            sa.select(
                AuditLabel.annotation_id,
                AuditLabel.task_id,
                AuditLabel.pair_id,
                AuditLabel.status,
                AuditLabel.label,
            ).where(AuditLabel.role == "A")
        ).all()
    return {r[0]: tuple(r[1:]) for r in got}  # type: ignore[misc]


def full_sync(study: Study) -> dict:  # type: ignore[type-arg]
    with session_scope(study.engine) as s:
        return sync_audit(s, s.get(Audit, study.audit_id), study.people, full=True)


def counts(study: Study) -> dict[str, int]:
    with session_scope(study.engine) as s:
        return status_counts(s, s.get(Audit, study.audit_id))


def events(study: Study, kind: str) -> list[dict]:  # type: ignore[type-arg]
    with session_scope(study.engine) as s:
        return [e.payload for e in list_events(s, kind=kind)]


def with_note(label: str, note: str) -> list[dict]:  # type: ignore[type-arg]
    return [
        *choice(label),
        {
            "from_name": NOTE_FIELD,
            "to_name": "left",
            "type": "textarea",
            "value": {"text": [note]},
        },
    ]


def test_moved_annotation_follows_its_task(study: Study) -> None:
    """A moves a counted annotation from task P to task Q of A's project and changes
    its choice there: the label is re-keyed to Q's pair (an ``annotation.moved`` event),
    by an incremental sync and by ``sync --full`` alike; P no longer holds it."""
    study.push()
    tasks = study.tasks("A")  # pair → task
    (p_pair, p_task), (q_pair, q_task) = list(tasks.items())[:2]
    [ann] = study.label_all("A", {p_task: "same"})
    study.sync()
    assert rows(study)[ann] == (p_task, p_pair, "counted", "same")
    with closing(study.session_of("A")) as web:
        r = web.patch(f"/api/annotations/{ann}/", json={"task": q_task})
        assert r.status_code == 200, r.text
        assert r.json()["task"] == q_task
        r = web.patch(f"/api/annotations/{ann}/", json={"result": choice("different")})
        assert r.status_code == 200, r.text
    res = full_sync(study)
    assert res["changed"] == 1
    assert rows(study)[ann] == (q_task, q_pair, "counted", "different")
    [moved] = events(study, "annotation.moved")
    assert (moved["previous_task_id"], moved["task_id"]) == (p_task, q_task)
    assert full_sync(study)["changed"] == 0  # settled: nothing more to repair
    # A now labels P afresh: it counts there, next to the moved one on Q
    [again] = study.label_all("A", {p_task: "same"})
    study.sync()
    assert rows(study)[again] == (p_task, p_pair, "counted", "same")
    assert study.gate()["progress"]["A"] == 2


def test_moved_annotation_follows_its_task_by_webhook(study: Study, api: str) -> None:
    """The same move seen through the webhook's read-back (A's server notifies)."""
    from tests.support.labelling_study import wait_for

    study.push()
    tasks = study.tasks("A")
    (p_pair, p_task), (q_pair, q_task) = list(tasks.items())[:2]
    [ann] = study.label_all("A", {p_task: "same"})
    assert wait_for(lambda: rows(study).get(ann) == (p_task, p_pair, "counted", "same"))
    with closing(study.session_of("A")) as web:
        r = web.patch(
            f"/api/annotations/{ann}/", json={"task": q_task, "result": choice("different")}
        )
        assert r.status_code == 200, r.text
    # A's server notifies; the read-back names the new task
    assert wait_for(lambda: rows(study)[ann] == (q_task, q_pair, "counted", "different"))
    assert [e["previous_task_id"] for e in events(study, "annotation.moved")] == [p_task]
    assert study.sync()["changed"] == 0


def test_second_annotation_on_one_task_is_duplicate(study: Study) -> None:
    """Label Studio accepts a second annotation by A on one task: only the first counts,
    the second is ``duplicate``; deleting the first lets the second count."""
    study.push()
    tasks = study.tasks("A")
    (p_pair, p_task), (q_pair, q_task) = list(tasks.items())[:2]
    first = study.label_all("A", {p_task: "same", q_task: "same"})[0]
    [second] = study.label_all("A", {p_task: "different"})
    study.sync()
    got = rows(study)
    assert got[first] == (p_task, p_pair, "counted", "same")
    assert got[second] == (p_task, p_pair, "duplicate", "different")
    assert counts(study) == {"counted": 2, "duplicate": 1}  # person–pair labels
    assert study.gate()["progress"]["A"] == 2
    assert full_sync(study)["changed"] == 0
    with closing(study.session_of("A")) as web:
        assert web.delete(f"/api/annotations/{first}/").status_code == 204
    study.sync()
    got = rows(study)
    assert got[first][2] == "deleted"
    assert got[second] == (p_task, p_pair, "counted", "different")
    # moving Q's (earlier) annotation onto P: the earliest on P counts, the other is
    # the duplicate
    q_ann = next(a for a, r in got.items() if r[0] == q_task)
    assert q_ann < second
    with closing(study.session_of("A")) as web:
        assert web.patch(f"/api/annotations/{q_ann}/", json={"task": p_task}).status_code == 200
    full_sync(study)
    got = rows(study)
    assert got[q_ann] == (p_task, p_pair, "counted", "same")
    assert got[second] == (p_task, p_pair, "duplicate", "different")
    assert counts(study) == {"counted": 1, "duplicate": 1, "deleted": 1}


def test_huge_notes_are_bounded_and_not_copied_into_every_event(study: Study) -> None:
    """A saves a 1 MB note, then changes only the choice many times: the stored note is
    at most MAX_NOTE characters and a marker with the full length; only the event that
    brought the note carries it."""
    study.push()
    p_task = next(iter(study.tasks("A").values()))
    note = "x" * 1_000_000
    with closing(study.session_of("A")) as web:
        r = web.post(f"/api/tasks/{p_task}/annotations/", json={"result": with_note("same", note)})
        assert r.status_code == 201, r.text
        ann = r.json()["id"]
        study.sync()
        for n in range(4):
            label = "different" if n % 2 == 0 else "same"
            r = web.patch(f"/api/annotations/{ann}/", json={"result": with_note(label, note)})
            assert r.status_code == 200
            study.sync()
    with session_scope(study.engine) as s:
        stored = s.exec(sa.select(AuditLabel.note).where(AuditLabel.annotation_id == ann)).one()[0]
        payloads = [e.payload for e in list_events(s) if e.payload.get("annotation_id") == ann]
    assert stored == "x" * MAX_NOTE + NOTE_TRUNCATED.format(n=len(note))
    assert len(payloads) == 5
    assert [("note" in p) for p in payloads] == [True, False, False, False, False]
    assert sum(len(json.dumps(p)) for p in payloads) < 3 * MAX_NOTE


def test_lead_time_is_a_claim_bounded_by_server_times(study: Study) -> None:
    """A posts labels in quick succession claiming 30 s each, one claiming 10**12 s (and
    an old ``created_at``): active hours stay within the server's wall clock, and the
    contradictions are counted."""
    from datetime import UTC, datetime, timedelta

    from rcea.study.pair_audit.annotators import IDLE_CAP_S, annotator_quality

    study.push()
    tasks = list(study.tasks("A").values())[:4]
    claims = [30.0, 1e12, 30.0, 30.0]
    began = datetime.now(UTC)
    with closing(study.session_of("A")) as web:
        for task, lead in zip(tasks, claims, strict=True):
            r = web.post(
                f"/api/tasks/{task}/annotations/",
                json={
                    "result": choice("same"),
                    "lead_time": lead,
                    "created_at": "2020-01-01T00:00:00Z",
                },
            )
            assert r.status_code == 201, r.text
    span = (datetime.now(UTC) - began).total_seconds()
    assert span < 20  # quick succession: every claim after the first is contradicted
    study.sync()
    with session_scope(study.engine) as s:
        out = annotator_quality(s, s.get(Audit, study.audit_id))
        stamps = s.exec(sa.select(AuditLabel.annotated_at).where(AuditLabel.role == "A")).all()
    # created_at is the server's clock, whatever A sent
    assert all(abs(_utc(t[0]) - began) < timedelta(minutes=5) for t in stamps)
    [a] = [p for p in out["annotators"] if p["round"] == "A"]
    assert a["lead_time_median_s"] == pytest.approx(statistics_median(claims))  # the claims
    assert a["lead_time_contradictions"] == 3
    assert a["active_hours"] <= (IDLE_CAP_S + span + 1) / 3600
    assert a["server_gap_median_s"] < 20


def statistics_median(values: list[float]) -> float:
    import statistics

    return statistics.median(values)


def _utc(t):  # type: ignore[no-untyped-def]
    from datetime import UTC

    return t.replace(tzinfo=UTC) if t.tzinfo is None else t


def test_repush_after_edited_task_keys_rekeys_and_never_duplicates(study: Study) -> None:
    """A edits the key of A's task P to Q's key (and another to a made-up key): a re-push
    reports both, sets their data back from the store and imports nothing."""
    first = study.push()
    project = first["projects"]["A"]["project_id"]
    tasks = list(study.tasks("A").values())
    p_task, q_task, r_task = tasks[:3]
    with closing(study.session_of("A")) as web:
        datas = {t: web.get(f"/api/tasks/{t}/").json()["data"] for t in (p_task, q_task, r_task)}
        n_before = len(web.get("/api/tasks/", params={"project": project}).json()["tasks"])
        for task, new_key in ((p_task, datas[q_task]["pair"]), (r_task, "made-up")):
            r = web.patch(f"/api/tasks/{task}/", json={"data": {**datas[task], "pair": new_key}})
            assert r.status_code == 200, r.text
            assert web.get(f"/api/tasks/{task}/").json()["data"]["pair"] == new_key
    again = study.push()["projects"]["A"]
    assert again["n_new"] == 0
    assert sorted(x["task_id"] for x in again["rekeyed"]) == sorted([p_task, r_task])
    with closing(study.session_of("A")) as web:
        listed = web.get("/api/tasks/", params={"project": project, "page_size": 1000}).json()
        assert len(listed["tasks"]) == n_before  # nothing imported twice
        for task in (p_task, r_task):
            assert web.get(f"/api/tasks/{task}/").json()["data"] == datas[task]
    assert study.push()["projects"]["A"]["rekeyed"] == []  # settled
