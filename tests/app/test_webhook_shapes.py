"""The webhook receiver against hostile bodies, through the real FastAPI app on SQLite
and PostgreSQL: every malformed shape gets 422 (never 500), stores nothing and, replayed,
adds no events; bodies over the size limit get 413; a note with NUL is stored safely."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from app.api import create_app
from app.api.webhooks import MAX_BODY_BYTES
from app.audit.labels import current_labels
from app.settings import Settings
from app.store import session_scope
from app.store.models import Audit, AuditLabel, Event
from tests.helpers import audit_study, draw_test_audit, fake_tasks

SECRET = "hook-secret"
HEADER = {"X-RCEA-Webhook-Secret": SECRET}
URL = "/webhooks/label-studio"
TASK = 0  # placeholder: replaced by a real task id of role A


def _body(task: int, *, annotation_id: int = 5, note: str | None = None) -> dict[str, Any]:
    result: list[dict[str, Any]] = [
        {
            "from_name": "strategy",
            "to_name": "left",
            "type": "choices",
            "value": {"choices": ["same"]},
        }
    ]
    if note is not None:
        result.append(
            {"from_name": "note", "to_name": "left", "type": "textarea", "value": {"text": [note]}}
        )
    return {
        "action": "ANNOTATION_CREATED",
        "project": {"id": 1},
        "annotation": {
            "id": annotation_id,
            "task": task,
            "completed_by": 11,
            "was_cancelled": False,
            "result": result,
        },
    }


def _nested(depth: int) -> Any:
    node: Any = "leaf"
    for _ in range(depth):
        node = [node]
    return node


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], Any]:
    """A shape: the valid body with the value at ``path`` (dots; digits index lists)
    replaced, or deleted when ``value`` is ``DELETE``."""

    def apply(body: dict[str, Any]) -> Any:
        *parents, last = path.split(".")
        node: Any = body
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        if value is DELETE:
            del node[last]
        else:
            node[int(last) if last.isdigit() else last] = copy.deepcopy(value)
        return body

    return apply


DELETE = object()
CHOICE = "annotation.result.0"

SHAPES: dict[str, Callable[[dict[str, Any]], Any]] = {
    # result and its items
    "result: 5": _set("annotation.result", 5),
    "result: 'x'": _set("annotation.result", "x"),
    "result: {..}": _set("annotation.result", {"from_name": "strategy"}),
    "result: [[..]] nested list": lambda b: _set("annotation.result", [b["annotation"]["result"]])(
        b
    ),
    "result item 'x'": _set(CHOICE, "x"),
    "result item 5": _set(CHOICE, 5),
    "from_name: [..]": _set(f"{CHOICE}.from_name", ["strategy"]),
    "value: 'x'": _set(f"{CHOICE}.value", "x"),
    "value: [..]": _set(f"{CHOICE}.value", ["same"]),
    "value: 5": _set(f"{CHOICE}.value", 5),
    "choices: {..}": _set(f"{CHOICE}.value.choices", {"0": "same"}),
    "choices: 'same'": _set(f"{CHOICE}.value.choices", "same"),
    "choices: [['same']]": _set(f"{CHOICE}.value.choices", [["same"]]),
    "choices: [1]": _set(f"{CHOICE}.value.choices", [1]),
    "choices: [{..}]": _set(f"{CHOICE}.value.choices", [{"x": "same"}]),
    "note text: 'x'": _set(
        "annotation.result", [{"from_name": "note", "value": {"text": "not a list"}}]
    ),
    "note text: [['x']]": _set(
        "annotation.result", [{"from_name": "note", "value": {"text": [["x"]]}}]
    ),
    # ids
    "id: '5'": _set("annotation.id", "5"),
    "id: 5.0": _set("annotation.id", 5.0),
    "id: true": _set("annotation.id", True),
    "id: null": _set("annotation.id", None),
    "id missing": _set("annotation.id", DELETE),
    "id: -5": _set("annotation.id", -5),
    "id: 0": _set("annotation.id", 0),
    "id: 2**31": _set("annotation.id", 2**31),
    "id: 2**63": _set("annotation.id", 2**63),
    "id: [5]": _set("annotation.id", [5]),
    "id: {'id': {'id': 5}}": _set("annotation.id", {"id": {"id": 5}}),
    "task: 2**31": _set("annotation.task", 2**31),
    "task: -1": _set("annotation.task", -1),
    "task: 'x'": _set("annotation.task", "x"),
    "task missing": _set("annotation.task", DELETE),
    "completed_by: 2**31": _set("annotation.completed_by", 2**31),
    "completed_by: 'u'": _set("annotation.completed_by", "u"),
    "completed_by: {'id': '11'}": _set("annotation.completed_by", {"id": "11"}),
    "completed_by: false": _set("annotation.completed_by", False),
    "project: 2**31": _set("project", {"id": 2**31}),
    "project: 'p'": _set("project", "p"),
    "was_cancelled: 'no'": _set("annotation.was_cancelled", "no"),
    "was_cancelled: 0": _set("annotation.was_cancelled", 0),
    # the annotation and the body
    "annotation: 'x'": _set("annotation", "x"),
    "annotation: [..]": lambda b: _set("annotation", [b["annotation"]])(b),
    "annotation missing": _set("annotation", DELETE),
    "annotations: {..}": lambda b: {**b, "action": "ANNOTATIONS_CREATED", "annotations": {}},
    "annotations: []": lambda b: {**b, "action": "ANNOTATIONS_CREATED", "annotations": []},
    "annotations: [5]": lambda b: {**b, "action": "ANNOTATIONS_CREATED", "annotations": [5]},
    "action: [..]": _set("action", ["ANNOTATION_CREATED"]),
    "action missing": _set("action", DELETE),
    "body: [..]": lambda b: [b],
    "body: 'x'": lambda b: "x",
    "body: null": lambda b: None,
    "body: 5": lambda b: 5,
    # nesting: inside what is parsed, and in a field nobody reads
    "choices nested 40 deep": _set(f"{CHOICE}.value.choices", _nested(40)),
    "extra field nested 200 deep": _set("annotation.extra", _nested(200)),
}

RAW: dict[str, bytes] = {
    "not JSON": b"{not json",
    "not UTF-8": b'{"action": "\xff\xfe"}',
    "empty": b"",
    "nested 100000 deep": b"[" * 100_000 + b"]" * 100_000,
    "id with 5000 digits": b'{"action": "ANNOTATION_CREATED", "annotation": {"id": 1'
    + b"0" * 5000
    + b', "task": 1}}',
    "id NaN": b'{"action": "ANNOTATION_CREATED", "annotation": {"id": NaN, "task": 1}}',
    "id Infinity": b'{"action": "ANNOTATION_CREATED", "annotation": {"id": Infinity, "task": 1}}',
}


@pytest.fixture
def setup(engine, tmp_path: Path):  # type: ignore[no-untyped-def]
    audit_study(engine, tmp_path)
    audit_id = draw_test_audit(engine, tmp_path)
    tasks = fake_tasks(engine, audit_id)
    settings = Settings(data_dir=tmp_path / "d", api_token="t", webhook_secret=SECRET)
    client = TestClient(create_app(settings, engine=engine), raise_server_exceptions=False)
    return engine, client, tasks, audit_id


def _count(engine, table) -> int:  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(table)).scalar()


def _assert_refused(engine, client: TestClient, content: bytes) -> None:  # type: ignore[no-untyped-def]
    events = _count(engine, Event)
    for _ in range(2):  # the post, then its replay
        r = client.post(
            URL, content=content, headers={**HEADER, "Content-Type": "application/json"}
        )
        assert r.status_code == 422, r.text
        assert len(r.text) < 400  # a short reason, never the body echoed back
    assert _count(engine, AuditLabel) == 0
    assert _count(engine, Event) == events


@pytest.mark.parametrize("shape", list(SHAPES))
def test_malformed_shape_is_422_stores_nothing(setup, shape: str) -> None:  # type: ignore[no-untyped-def]
    engine, client, tasks, _ = setup
    body = SHAPES[shape](_body(next(iter(tasks["A"].values()))))
    _assert_refused(engine, client, json.dumps(body).encode())


@pytest.mark.parametrize("name", list(RAW))
def test_malformed_raw_body_is_422_stores_nothing(setup, name: str) -> None:  # type: ignore[no-untyped-def]
    engine, client, _, _ = setup
    _assert_refused(engine, client, RAW[name])


def test_the_valid_body_the_shapes_start_from_is_counted(setup) -> None:  # type: ignore[no-untyped-def]
    """Guards the shape tests: without the damage, the same body is stored and counted."""
    engine, client, tasks, _ = setup
    r = client.post(URL, json=_body(next(iter(tasks["A"].values()))), headers=HEADER)
    assert r.status_code == 200 and r.json()["stored"] == 1
    with session_scope(engine) as s:
        assert [(x.label, x.status) for x in s.exec(sa.select(AuditLabel)).scalars()] == [
            ("same", "counted")
        ]


def test_body_over_the_limit_is_413(setup) -> None:  # type: ignore[no-untyped-def]
    engine, client, tasks, _ = setup
    task = next(iter(tasks["A"].values()))
    assert MAX_BODY_BYTES == 1 << 20
    body = _body(task)
    # Label Studio sends the task (with both texts) along: just under the limit is fine ...
    body["task"] = {"id": task, "data": {"left": "x" * (MAX_BODY_BYTES - 1000), "right": "y"}}
    content = json.dumps(body).encode()
    assert len(content) <= MAX_BODY_BYTES
    r = client.post(URL, content=content, headers=HEADER)
    assert r.status_code == 200 and r.json()["stored"] == 1
    # ... one byte over is refused, announced by Content-Length or streamed without it.
    body["task"]["data"]["left"] += "x" * (MAX_BODY_BYTES - len(content) + 1)
    big = json.dumps(body).encode()
    assert len(big) == MAX_BODY_BYTES + 1
    events = _count(engine, Event)
    assert client.post(URL, content=big, headers=HEADER).status_code == 413

    def chunks():  # type: ignore[no-untyped-def]
        for i in range(0, len(big), 65536):
            yield big[i : i + 65536]

    r = client.post(URL, content=chunks(), headers=HEADER)
    assert r.status_code == 413 and "content-length" not in r.request.headers
    # Without the secret the body is not even read.
    assert client.post(URL, content=big).status_code == 401
    assert _count(engine, AuditLabel) == 1 and _count(engine, Event) == events


def test_note_with_nul_is_stored_on_both_stores(setup) -> None:  # type: ignore[no-untyped-def]
    """PostgreSQL refuses NUL in text and JSON: the note keeps it visibly, the same way on
    both stores, and later labels are still stored and counted."""
    engine, client, tasks, audit_id = setup
    first, second = list(tasks["A"].values())[:2]
    note = "bad\x00note \x07 ok\ttab\nline"
    r = client.post(URL, json=_body(first, annotation_id=5, note=note), headers=HEADER)
    assert r.status_code == 200 and r.json()["stored"] == 1
    r = client.post(URL, json=_body(second, annotation_id=6), headers=HEADER)
    assert r.status_code == 200 and r.json()["stored"] == 1
    # The replay changes nothing: the stored note equals the parsed one.
    r = client.post(URL, json=_body(first, annotation_id=5, note=note), headers=HEADER)
    assert r.status_code == 200 and r.json()["stored"] == 0
    shown = "bad⟨U+0000⟩note ⟨U+0007⟩ ok\ttab\nline"
    with session_scope(engine) as s:
        rows = s.exec(sa.select(AuditLabel).order_by(AuditLabel.annotation_id)).scalars().all()
        assert [(x.annotation_id, x.note, x.status) for x in rows] == [
            (5, shown, "counted"),
            (6, None, "counted"),
        ]
        notes = [
            e.payload.get("note")
            for e in s.exec(sa.select(Event).order_by(Event.id)).scalars()
            if e.kind == "annotation.created"
        ]
        assert notes == [shown, None]
        labels = current_labels(s, s.get(Audit, audit_id))
        assert sorted(labels["A"].values()) == ["same", "same"]
