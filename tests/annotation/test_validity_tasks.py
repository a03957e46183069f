"""Single-trajectory validity tasks without a server: the label config, the blinding
scan on every kind of leak, and parsing annotations back (valid / fatal error / none)."""

from __future__ import annotations

from xml.etree import ElementTree

import pytest

from rcea.annotation.tasks import BlindingViolation
from rcea.annotation.validity_tasks import (
    build_validity_task,
    choice_result,
    parse_validity_annotation,
    validity_label_config,
)
from rcea.study.labelling import Forbidden
from rcea.study.labelling import check_blinding as scan


def check_blinding(tasks, forbidden, exact):  # type: ignore[no-untyped-def]
    scan(tasks, Forbidden(set(forbidden), set(exact)), what="validity tasks")


def test_adjudication_config_shows_both_answers() -> None:
    root = ElementTree.fromstring(validity_label_config(adjudication=True))
    headers = [h.get("value") for h in root.iter("Header")]
    assert any("$answer_1" in h and "$answer_2" in h for h in headers)
    assert not any("$answer" in (h.get("value") or "") for h in
                   ElementTree.fromstring(validity_label_config()).iter("Header"))  # fmt: skip


def test_label_config() -> None:
    root = ElementTree.fromstring(validity_label_config())
    choices = root.find("Choices")
    assert choices is not None and choices.get("required") == "true"
    assert [c.get("value") for c in choices.findall("Choice")] == ["valid", "fatal error"]
    shown = {t.get("value") for t in root.iter("Text")}
    assert {"$problem", "$solution"} <= shown
    assert root.find("TextArea") is not None


def test_blinding_scan() -> None:
    task = build_validity_task("k1", "(1+2)*3", "1+2=3\n3*3=9\n\\boxed{9}")
    check_blinding([task], {"grpo_main-t7"}, {"st-1-2-3", "valid"})
    leaks = [
        ({**task, "solution": task["solution"] + " grpo_main-t7"}, "grpo_main-t7"),
        ({**task, "verdict": "x"}, "key 'verdict'"),
        ({**task, "note": "st-1-2-3"}, "st-1-2-3"),
        ({**task, "note": "valid"}, "'valid'"),
    ]
    for bad, what in leaks:
        with pytest.raises(BlindingViolation, match=what):
            check_blinding([bad], {"grpo_main-t7"}, {"st-1-2-3", "valid"})


def test_parse_annotation() -> None:
    ann = {"id": 5, "task": 9, "completed_by": 3, "result": choice_result("invalid", "line 1")}
    p = parse_validity_annotation(ann, project_id=2)
    assert (p.annotation_id, p.task_id, p.project_id, p.user_id) == (5, 9, 2, 3)
    assert (p.label, p.note, p.cancelled) == ("invalid", "line 1", False)
    assert parse_validity_annotation({**ann, "result": choice_result("valid")}).label == "valid"
    none = parse_validity_annotation({"id": 6, "task": 9, "result": [], "was_cancelled": True})
    assert none.label is None and none.cancelled
