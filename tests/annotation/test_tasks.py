"""Blinded task building and the leak scanner (no Label Studio needed)."""

from __future__ import annotations

import random

from rcea.annotation.notifications import parse_notification
from rcea.annotation.payloads import parse_annotation
from rcea.annotation.tasks import build_pair_task, pair_label_config
from tests.support.product_helpers import scan_for_leaks


def test_task_holds_only_key_and_texts_and_order_is_randomised() -> None:
    rng = random.Random(0)
    tasks = [build_pair_task(f"p{i}", "text A", "text B", rng=rng) for i in range(40)]
    keys = {"pair", "left", "right", "left_html", "right_html", "shown_sha256"}
    assert all(set(t.data) == keys for t in tasks)
    lefts = {t.left_is_a for t in tasks}
    assert lefts == {True, False}
    for t in tasks:
        assert (t.data["left"] == "text A") == t.left_is_a


def test_adjudication_task_shows_answers_in_random_order() -> None:
    rng = random.Random(1)
    tasks = [
        build_pair_task("p", "a", "b", rng=rng, answers=("same", "different")) for _ in range(30)
    ]
    orders = {(t.data["answer_1"], t.data["answer_2"]) for t in tasks}
    assert orders == {("same", "different"), ("different", "same")}


def test_label_config_has_required_choice_and_escapes_definition() -> None:
    xml = pair_label_config('A & B <decisive> "method"')
    assert 'required="true"' in xml and "&amp;" in xml and "&lt;decisive&gt;" in xml
    assert "$answer_1" not in xml
    assert "$answer_1" in pair_label_config("d", adjudication=True)


def test_adjudication_header_says_order_is_random_and_sources_hidden() -> None:
    from xml.etree import ElementTree

    root = ElementTree.fromstring(pair_label_config("d", adjudication=True))
    headers = [h.get("value") for h in root.iter("Header")]
    assert (
        "The two annotators answered: $answer_1 / $answer_2 (in random order; who gave "
        "which answer is hidden, and so is the automatic label)"
    ) in headers
    assert not any("Annotator answers" in (h or "") for h in headers)  # not read as A / B


def test_scanner_finds_ids_and_exact_values_but_not_natural_words() -> None:
    sent = [{"pair": "p1", "left": "grpo-s100-q003-k07 wrote this", "right": "factor it"}]
    leaks = scan_for_leaks(sent, {"grpo-s100-q003-k07"}, forbidden_exact={"factor"})
    assert leaks == ["value 'grpo-s100-q003-k07' in 'grpo-s100-q003-k07 wrote this'"]
    assert scan_for_leaks([{"x": "factor"}], set(), forbidden_exact={"factor"}) == [
        "value 'factor'"
    ]
    assert scan_for_leaks([{"step": 3}], set(), forbidden_keys={"step"}) == ["key 'step'"]
    assert scan_for_leaks([{"n": 100}], set(), forbidden_exact={"100"}) == ["value '100'"]


def test_parse_annotation_and_webhook() -> None:
    ann = {
        "id": 9,
        "task": 4,
        "project": 2,
        "completed_by": {"id": 7},
        "was_cancelled": False,
        "result": [
            {"from_name": "strategy", "value": {"choices": ["different"]}},
            {"from_name": "note", "value": {"text": ["hm"]}},
        ],
    }
    p = parse_annotation(ann)
    assert (p.annotation_id, p.task_id, p.project_id, p.user_id, p.label, p.note) == (
        9,
        4,
        2,
        7,
        "different",
        "hm",
    )
    assert parse_notification({"action": "TASKS_CREATED"}).annotation_ids == []
    note = parse_notification(
        {"action": "ANNOTATION_UPDATED", "project": {"id": 2}, "annotation": {**ann, "id": 9}}
    )
    assert (note.project_id, note.annotation_ids, note.deleted) == (2, [9], False)
    gone = parse_notification(
        {"action": "ANNOTATIONS_DELETED", "annotations": [{"id": 3}, {"id": 1}]}
    )
    assert gone.annotation_ids == [1, 3] and gone.deleted


def test_scanner_prefix_tree_finds_overlapping_ids() -> None:
    ids = {f"run-s100-q{q:03d}-k{k:02d}" for q in range(50) for k in range(20)} | {
        "abcdef",
        "abcdefgh",
    }
    clean = [{"left": "solution text " * 50, "right": "nothing to see"}]
    assert scan_for_leaks(clean, ids) == []
    leaky = [{"left": "x run-s100-q049-k19 y", "right": "zzabcdefghzz"}]
    assert scan_for_leaks(leaky, ids) == [
        "value 'abcdef' in 'zzabcdefghzz'",
        "value 'abcdefgh' in 'zzabcdefghzz'",
        "value 'run-s100-q049-k19' in 'x run-s100-q049-k19 y'",
    ]
