"""``rcea.annotation.notifications.parse_notification`` pinned exactly, written from the
mutants `make mutation` left alive (docs/mutation.md): each refusal's wording, the id
range's both edges, project ids given as a number or an object, the bulk limit, and
which actions are single, bulk, deleting or id-less."""

from __future__ import annotations

import re
from typing import Any

import pytest

from rcea.annotation.notifications import (
    ID_MAX,
    MAX_IDS,
    Notification,
    parse_notification,
)
from rcea.annotation.payloads import PayloadError


def _exact(message: str) -> str:
    return f"^{re.escape(message)}$"


def test_limits_are_label_studios() -> None:
    assert ID_MAX == 2**31 - 1
    assert MAX_IDS == 10_000


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            {"action": "ANNOTATION_CREATED", "annotation": {"id": 1}},
            ("ANNOTATION_CREATED", None, [1]),
        ),
        (
            {"action": "ANNOTATION_UPDATED", "project": 7, "annotation": {"id": ID_MAX}},
            ("ANNOTATION_UPDATED", 7, [ID_MAX]),
        ),
        (
            {"action": "ANNOTATION_CREATED", "project": {"id": 3}, "annotation": {"id": 5}},
            ("ANNOTATION_CREATED", 3, [5]),
        ),
        (
            {
                "action": "ANNOTATIONS_CREATED",
                "project": None,
                "annotations": [{"id": 9}, {"id": 2}, {"id": 9}],
            },
            ("ANNOTATIONS_CREATED", None, [2, 9]),
        ),
        (
            {"action": "ANNOTATIONS_DELETED", "project": ID_MAX, "annotations": [{"id": 4}]},
            ("ANNOTATIONS_DELETED", ID_MAX, [4]),
        ),
        # other actions: no ids, even when the body names annotations; the project kept
        ({"action": "PROJECT_UPDATED", "project": {"id": 4}}, ("PROJECT_UPDATED", 4, [])),
        ({"action": "PROJECT_UPDATED", "annotation": {"id": 3}}, ("PROJECT_UPDATED", None, [])),
        (
            {"action": "ANNOTATION_DELETED", "annotations": [{"id": 3}]},
            ("ANNOTATION_DELETED", None, []),
        ),
        (
            {"action": "annotation_created", "annotation": {"id": 3}},
            ("annotation_created", None, []),
        ),
    ],
)
def test_parsed_exactly(body: dict[str, Any], expected: tuple[Any, ...]) -> None:
    note = parse_notification(body)
    assert note == Notification(*expected)
    assert note.deleted is (expected[0] == "ANNOTATIONS_DELETED")


def test_the_bulk_limit_is_inclusive() -> None:
    many = [{"id": i} for i in range(1, MAX_IDS + 1)]
    note = parse_notification({"action": "ANNOTATIONS_CREATED", "annotations": many})
    assert note.annotation_ids == list(range(1, MAX_IDS + 1))
    with pytest.raises(
        PayloadError, match=_exact("ANNOTATIONS_CREATED needs a non-empty 'annotations' list")
    ):
        parse_notification(
            {"action": "ANNOTATIONS_CREATED", "annotations": [*many, {"id": MAX_IDS + 1}]}
        )


RANGE = f"must be an id between 1 and {ID_MAX}"

REFUSED: list[tuple[Any, str]] = [
    ([], "webhook body must be a JSON object"),
    ("x", "webhook body must be a JSON object"),
    ({}, "webhook body needs an 'action' string"),
    ({"action": None}, "webhook body needs an 'action' string"),
    ({"action": 1}, "webhook body needs an 'action' string"),
    ({"action": "ANNOTATION_CREATED"}, "ANNOTATION_CREATED needs an 'annotation' object"),
    (
        {"action": "ANNOTATION_UPDATED", "annotation": [1]},
        "ANNOTATION_UPDATED needs an 'annotation' object",
    ),
    ({"action": "ANNOTATION_CREATED", "annotation": {}}, f"annotation.id {RANGE}"),
    ({"action": "ANNOTATION_CREATED", "annotation": {"id": 0}}, f"annotation.id {RANGE}"),
    ({"action": "ANNOTATION_CREATED", "annotation": {"id": ID_MAX + 1}}, f"annotation.id {RANGE}"),
    ({"action": "ANNOTATION_CREATED", "annotation": {"id": True}}, f"annotation.id {RANGE}"),
    ({"action": "ANNOTATION_CREATED", "annotation": {"id": 2.0}}, f"annotation.id {RANGE}"),
    ({"action": "ANNOTATION_CREATED", "annotation": {"id": "3"}}, f"annotation.id {RANGE}"),
    (
        {"action": "ANNOTATION_CREATED", "annotation": {"id": {"id": {"id": 3}}}},
        f"annotation.id {RANGE}",
    ),
    ({"action": "X", "project": 0}, f"project {RANGE}"),
    ({"action": "X", "project": {"id": ID_MAX + 1}}, f"project {RANGE}"),
    ({"action": "X", "project": {}}, f"project {RANGE}"),
    ({"action": "X", "project": False}, f"project {RANGE}"),
    ({"action": "ANNOTATIONS_DELETED"}, "ANNOTATIONS_DELETED needs a non-empty 'annotations' list"),
    (
        {"action": "ANNOTATIONS_DELETED", "annotations": []},
        "ANNOTATIONS_DELETED needs a non-empty 'annotations' list",
    ),
    (
        {"action": "ANNOTATIONS_CREATED", "annotations": {"id": 1}},
        "ANNOTATIONS_CREATED needs a non-empty 'annotations' list",
    ),
    (
        {"action": "ANNOTATIONS_CREATED", "annotations": [{"id": 1}, 2]},
        "annotations[1] must be an object",
    ),
    (
        {"action": "ANNOTATIONS_CREATED", "annotations": [{"id": 1}, {"id": 2}, {"id": -1}]},
        f"annotations[2].id {RANGE}",
    ),
]


@pytest.mark.parametrize(("body", "message"), REFUSED)
def test_refused_with_the_exact_message(body: Any, message: str) -> None:
    with pytest.raises(PayloadError, match=_exact(message)):
        parse_notification(body)
