"""Content safety of what annotators see: the display sanitiser, XML-escaped label
configs, and the blinding scan across soft breaks (no Label Studio needed)."""

from __future__ import annotations

import random
import sys
import unicodedata
from xml.etree import ElementTree

import pytest

from rcea.annotation.display import (
    SOFT_BREAK,
    WRAP_WIDTH,
    storable,
    strip_display_marks,
    visible,
    xml_attr,
)
from rcea.annotation.tasks import build_pair_task, pair_label_config
from rcea.annotation.validity_tasks import build_validity_task, validity_label_config
from tests.support.product_helpers import scan_for_leaks

HOSTILE = "A \"quoted\" & <b>bold</b> 'method' > 2"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        # bidi: the override no longer turns "evil" into "live"
        ("\u202eevil\u202c", "⟨U+202E⟩evil⟨U+202C⟩"),
        ("a\u2066b\u2067c\u2068d\u2069e", "a⟨U+2066⟩b⟨U+2067⟩c⟨U+2068⟩d⟨U+2069⟩e"),
        ("x\u200ey\u200fz\u061c", "x⟨U+200E⟩y⟨U+200F⟩z⟨U+061C⟩"),
        ("\u202a\u202b\u202d", "⟨U+202A⟩⟨U+202B⟩⟨U+202D⟩"),
        # zero-width and other invisible characters
        ("pa\u200bss\u200cw\u200dord", "pa⟨U+200B⟩ss⟨U+200C⟩w⟨U+200D⟩ord"),
        ("\ufeffbom\u2060join\u00adsoft", "⟨U+FEFF⟩bom⟨U+2060⟩join⟨U+00AD⟩soft"),
        ("tag\U000e0041\U000e007f", "tag⟨U+E0041⟩⟨U+E007F⟩"),  # Cf tag characters
        ("h\u3164i\u034fj", "h⟨U+3164⟩i⟨U+034F⟩j"),
        # control characters: NUL, ESC, a lone CR, DEL, C1; tab and line feed stay
        ("a\x00b", "a⟨U+0000⟩b"),
        ("\x1b[31mred\x7f\x85", "⟨U+001B⟩[31mred⟨U+007F⟩⟨U+0085⟩"),
        ("one\r\ntwo\rthree\tfour\n", "one\ntwo⟨U+000D⟩three\tfour\n"),
        ("lone \ud800 surrogate", "lone ⟨U+D800⟩ surrogate"),
        # ordinary text is untouched, non-ASCII included
        ("2+3 = 5\n\\boxed{5} — é ü 中文 ∑", "2+3 = 5\n\\boxed{5} — é ü 中文 ∑"),
    ],
)
def test_visible_shows_hidden_characters(raw: str, shown: str) -> None:
    assert visible(raw) == shown
    assert visible(shown) == shown  # idempotent


def test_long_lines_are_cut_every_120_characters() -> None:
    assert WRAP_WIDTH == 120 and SOFT_BREAK == "↩\n"
    assert visible("x" * 120) == "x" * 120
    assert visible("x" * 121) == "x" * 119 + "↩\n" + "xx"
    assert visible("a" * 300 + " tail") == (
        "a" * 119 + "↩\n" + "a" * 119 + "↩\n" + "a" * 62 + " tail"
    )
    # A space resets the count; a no-break space does not (browsers cannot break there).
    assert visible("y" * 100 + " " + "y" * 100) == "y" * 100 + " " + "y" * 100
    assert visible("y" * 100 + "\u00a0" + "y" * 100) == (
        "y" * 100 + "\u00a0" + "y" * 18 + "↩\n" + "y" * 82
    )
    # A marker is never cut in two: 114 + 10 > 119, so the marker starts the next line.
    assert visible("z" * 114 + "\u200b" + "z" * 10) == "z" * 114 + "↩\n" + "⟨U+200B⟩" + "z" * 10


def test_a_one_megabyte_line_becomes_short_lines() -> None:
    shown = visible("7" * 1_000_000)
    lines = shown.split("\n")
    assert max(map(len, lines)) == WRAP_WIDTH
    assert len(lines) == 8404  # ceil(1e6 / 119): every cut line holds 119 digits + arrow
    assert strip_display_marks(shown) == "7" * 1_000_000
    assert visible(shown) == shown


def test_every_hidden_code_point_is_covered() -> None:
    """The pattern scans planes 0, 1 and 14 only: no Cf/Cc/Cs character lives elsewhere
    in this Python's Unicode database, and every one inside is shown."""
    missed = []
    for cp in range(sys.maxunicode + 1):
        ch = chr(cp)
        hidden = unicodedata.category(ch) in ("Cf", "Cc", "Cs") and ch not in "\n\t"
        if hidden and visible(ch) != f"⟨U+{cp:04X}⟩":
            missed.append(hex(cp))
    assert missed == []


def test_storable_replaces_only_what_the_stores_refuse() -> None:
    assert storable("a\x00b\x07c\x1fd\x7f\x9fe") == (
        "a⟨U+0000⟩b⟨U+0007⟩c⟨U+001F⟩d⟨U+007F⟩⟨U+009F⟩e"
    )
    assert storable("tab\tlf\ncr\r \u202e kept") == "tab\tlf\ncr\r \u202e kept"
    assert storable("\udfff") == "⟨U+DFFF⟩"


@pytest.mark.parametrize(
    "value", [HOSTILE, "line 1\nline 2\ttab\r", "&amp; is not unescaped twice", "'\"'\"", ""]
)
def test_xml_attr_round_trips(value: str) -> None:
    root = ElementTree.fromstring(f'<T value="{xml_attr(value)}"/>')
    assert root.get("value") == value


def test_xml_attr_shows_characters_xml_cannot_hold() -> None:
    escaped = xml_attr("a\x00b\x01")
    root = ElementTree.fromstring(f'<T value="{escaped}"/>')
    assert root.get("value") == "a⟨U+0000⟩b⟨U+0001⟩"


@pytest.mark.parametrize("adjudication", [False, True])
def test_pair_config_with_quotes_is_well_formed_and_round_trips(adjudication: bool) -> None:
    root = ElementTree.fromstring(pair_label_config(HOSTILE, adjudication=adjudication))
    texts = {t.get("name"): t.get("value") for t in root.iter("Text")}
    assert texts == {"definition": HOSTILE, "left_source": "$left", "right_source": "$right"}
    shown = {t.get("name"): t.get("value") for t in root.iter("HyperText")}
    assert shown == {"left": "$left_html", "right": "$right_html"}
    assert [c.get("value") for c in root.iter("Choice")] == ["same", "different"]
    assert root.find("Choices").get("name") == "strategy"  # type: ignore[union-attr]


def test_pair_config_shows_bidi_in_the_definition() -> None:
    root = ElementTree.fromstring(pair_label_config("same \u202eidea\u202c"))
    definition = next(t for t in root.iter("Text") if t.get("name") == "definition")
    assert definition.get("value") == "same ⟨U+202E⟩idea⟨U+202C⟩"


def test_validity_config_is_well_formed() -> None:
    root = ElementTree.fromstring(validity_label_config())
    instructions = next(t for t in root.iter("Text") if t.get("name") == "instructions")
    assert "Choose 'fatal error' if any step" in (instructions.get("value") or "")
    assert [c.get("value") for c in root.iter("Choice")] == ["valid", "fatal error"]


def test_tasks_show_texts_through_the_sanitiser() -> None:
    rng = random.Random(3)
    task = build_pair_task(
        "p1", "\u202eevil\u202c", "ok\x00" + "9" * 130, rng=rng, answers=("same", "diff\u200b")
    )
    texts = {task.data["left"], task.data["right"]}
    assert texts == {"⟨U+202E⟩evil⟨U+202C⟩", "ok⟨U+0000⟩" + "9" * 109 + "↩\n" + "9" * 21}
    assert {task.data["answer_1"], task.data["answer_2"]} == {"same", "diff⟨U+200B⟩"}
    assert task.data["pair"] == "p1"
    validity = build_validity_task("k", "what is\u2066 2+2?", "\ufeff4")
    assert {k: validity[k] for k in ("item", "problem", "solution")} == {
        "item": "k",
        "problem": "what is⟨U+2066⟩ 2+2?",
        "solution": "⟨U+FEFF⟩4",
    }
    assert "what is⟨U+2066⟩ 2+2?" in validity["problem_html"]
    assert "⟨U+FEFF⟩4" in validity["solution_html"]


def test_scanner_sees_ids_across_soft_breaks_and_markers() -> None:
    tid = "grpo-s100-q003-k07"
    cut = build_pair_task("p", "x" * 110 + tid, "y", rng=random.Random(0)).data
    assert tid not in cut["left"] + cut["right"]  # the soft break split it ...
    assert scan_for_leaks([cut], {tid}) != []  # ... and the scan still finds it
    hidden = build_pair_task("p", "grpo-s100\u200b-q003-k07", "y", rng=random.Random(0)).data
    assert scan_for_leaks([hidden], {tid}) != []


def test_notes_are_storable_in_both_rounds() -> None:
    from rcea.annotation.payloads import parse_annotation
    from rcea.annotation.validity_tasks import choice_result, parse_validity_annotation

    ann = {"id": 5, "task": 9, "completed_by": 3, "result": choice_result("invalid", "l\x00 1")}
    assert parse_validity_annotation(ann).note == "l⟨U+0000⟩ 1"
    pair = {
        "id": 6,
        "task": 9,
        "result": [
            {"from_name": "strategy", "value": {"choices": ["same"]}},
            {"from_name": "note", "value": {"text": ["a\x00", "b\ud800"]}},
            {"type": "relation", "from_id": "x", "to_id": "y"},  # no from_name, no value
        ],
    }
    parsed = parse_annotation(pair)
    assert (parsed.label, parsed.note) == ("same", "a⟨U+0000⟩\nb⟨U+D800⟩")
