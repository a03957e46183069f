"""Every text an annotator sees is rendered (``<HyperText>``), its source one toggle
away, the choice unchanged; the render is frozen task content (deterministic, hashed)
and the blinding scan reads the rendered HTML too."""

from __future__ import annotations

import random
from xml.etree import ElementTree

from rcea.annotation.render import render, shown_hash
from rcea.annotation.tasks import (
    HTML_SUFFIX,
    PAIR_CHOICE,
    SHOWN_KEY,
    build_pair_task,
    pair_label_config,
)
from rcea.annotation.validity_tasks import (
    VALIDITY_CHOICE,
    build_validity_task,
    validity_label_config,
)
from tests.support.product_helpers import scan_for_leaks

TEX = r"We get $\frac{n}{2}(a+l)$ and \[\sqrt{2}\] so $$\boxed{5050}$$"


def shown_names(xml: str) -> dict[str, str]:
    root = ElementTree.fromstring(xml)
    return {el.get("name"): el.get("value") for el in root.iter("HyperText")}


def test_pair_config_renders_each_text_with_source_one_toggle_away() -> None:
    for adjudication in (False, True):
        xml = pair_label_config("d", adjudication=adjudication, question=True)
        root = ElementTree.fromstring(xml)
        assert shown_names(xml) == {
            "left": "$left_html",
            "right": "$right_html",
            "question": "$question_html",
        }
        assert all(h.get("inline") == "true" for h in root.iter("HyperText"))
        panels = {p.get("value"): p for p in root.iter("Panel")}
        assert set(panels) == {
            "Source of solution 1",
            "Source of solution 2",
            "Source of the problem",
        }
        sources = {t.get("name"): t.get("value") for p in panels.values() for t in p.iter("Text")}
        assert sources == {
            "left_source": "$left",
            "right_source": "$right",
            "question_source": "$question",
        }
        (choices,) = root.iter("Choices")
        assert (choices.get("name"), choices.get("toName")) == (PAIR_CHOICE, "left")
        assert [(c.get("value"), c.get("alias")) for c in choices.iter("Choice")] == [
            ("same", "same"),
            ("different", "different"),
        ]
        assert root.find("Style") is not None
    assert "question" not in shown_names(pair_label_config("d"))


def test_columns_scroll_on_their_own() -> None:
    root = ElementTree.fromstring(pair_label_config("d"))
    columns = [v.get("style") for v in root.iter("View") if "flex: 1 1 0" in (v.get("style") or "")]
    assert len(columns) == 2
    assert all("max-height: 70vh" in c and "overflow-y: auto" in c for c in columns)


def test_validity_config_renders_problem_and_solution() -> None:
    for adjudication in (False, True):
        xml = validity_label_config(adjudication=adjudication)
        assert shown_names(xml) == {"problem": "$problem_html", "solution": "$solution_html"}
        (choices,) = ElementTree.fromstring(xml).iter("Choices")
        assert (choices.get("name"), choices.get("toName")) == (VALIDITY_CHOICE, "solution")


def test_pair_task_carries_render_and_hash_deterministically() -> None:
    a = build_pair_task("p1", TEX, "plain \u202eB", rng=random.Random(3), question="Q $x^2$")
    b = build_pair_task("p1", TEX, "plain \u202eB", rng=random.Random(3), question="Q $x^2$")
    assert a == b  # pushing twice gives the same task, HTML included
    data = a.data
    left_raw = TEX if a.left_is_a else "plain \u202eB"
    assert data["left" + HTML_SUFFIX] == render(left_raw)
    assert data["question_html"] == render("Q $x^2$")
    assert "<mfrac>" in data["left_html"] + data["right_html"]
    assert "⟨U+202E⟩" in data["left"] + data["right"]
    assert "⟨U+202E⟩" in data["left_html"] + data["right_html"]
    rest = {k: v for k, v in data.items() if k != SHOWN_KEY}
    assert data[SHOWN_KEY] == shown_hash(rest)
    other = build_pair_task("p1", TEX + " ", "plain \u202eB", rng=random.Random(3))
    assert other.data[SHOWN_KEY] != data[SHOWN_KEY]


def test_validity_task_carries_render_and_hash() -> None:
    data = build_validity_task("v1", "Find $x$.", TEX)
    assert set(data) == {
        "item",
        "problem",
        "solution",
        "problem_html",
        "solution_html",
        SHOWN_KEY,
    }
    assert data["solution_html"] == render(TEX)
    assert data == build_validity_task("v1", "Find $x$.", TEX)
    assert data[SHOWN_KEY] == shown_hash({k: v for k, v in data.items() if k != SHOWN_KEY})


def test_scan_reads_the_rendered_html() -> None:
    tid = "grpo-s100-q003-k07"
    # an id only a reader of the rendered page pieces together (split by markup)
    sent = [{"left_html": "<p>grpo-s100-<em>q003</em>-k07</p>"}]
    assert scan_for_leaks(sent, {tid}) == [f"value {tid!r}"]
    sent = [{"left_html": "<p>grpo-s100-q&#48;03-k07</p>"}]  # or by an entity
    assert scan_for_leaks(sent, {tid})
    task = build_pair_task("p", f"text {tid}", "b", rng=random.Random(0))
    assert len(scan_for_leaks([task.data], {tid})) >= 2  # source and HTML
