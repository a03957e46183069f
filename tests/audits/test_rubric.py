"""Tests for rcea.audits.rubric: parsing, validation, defaults and content hashing."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from rcea.audits.rubric import (
    DEFAULT_RUBRIC_PATH,
    PairPlan,
    load_rubric,
    parse_rubric,
)
from rcea.audits.thresholds import GateThresholds

MINIMAL = """
[rubric]
name = "r"
version = "1"
"""

FULL = """
[rubric]
name = "r"
version = "1"
description = ""

[gate]
human_human_macro_f1_min = 0.85
automatic_macro_f1_min = 0.85
gap_max = 0.05
different_precision_min = 0.8
different_recall_min = 0.8
automatic_coverage_min = 0.95

[estimators]
k_min = 8
n_min = 8
n_draws = 20
n_boot = 10000
confidence = 0.95
seed = 0

[pairs]
seed = 0
pairs_per_question = 156
n_questions = 29
"""

REORDERED = """
[pairs]
n_questions = 29
seed = 0
pairs_per_question = 156

[estimators]
seed = 0
confidence = 0.95
n_boot = 10000
n_draws = 20
n_min = 8
k_min = 8

[gate]
automatic_coverage_min = 0.95
different_recall_min = 0.80
different_precision_min = 0.80
gap_max = 0.05
automatic_macro_f1_min = 0.85
human_human_macro_f1_min = 0.85

[rubric]
description = ""
version = 1
name = "r"
"""


def test_default_rubric_file_has_paper_defaults(tmp_path):
    r = load_rubric(DEFAULT_RUBRIC_PATH)
    assert r.gate == GateThresholds()
    assert isinstance(r.gate, GateThresholds)
    assert r.estimators.k_min == 8 and r.estimators.n_min == 8 and r.estimators.n_draws == 20
    assert r.estimators.n_boot == 10_000 and r.estimators.confidence == 0.95
    assert r.calibration is not None
    assert (r.calibration.size, r.calibration.held_out) == (600, 300)
    assert r.source == str(DEFAULT_RUBRIC_PATH)


def test_defaults_fill_and_hash_ignores_key_order_and_spelled_out_defaults():
    a, b, c = parse_rubric(MINIMAL), parse_rubric(FULL), parse_rubric(REORDERED)
    assert a == b == c
    assert a.content_hash() == b.content_hash() == c.content_hash()
    assert a.canonical_json() == c.canonical_json()


def test_hash_is_sha256_of_sorted_compact_json():
    r = parse_rubric(FULL)
    doc = r.to_dict()
    expected = hashlib.sha256(
        json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    assert r.content_hash() == expected
    assert len(expected) == 64
    assert json.loads(r.canonical_json()) == doc


def test_content_changes_change_the_hash_but_source_does_not():
    base = parse_rubric(FULL, source="a.toml")
    other_source = parse_rubric(FULL, source="b.toml")
    assert base == other_source and base.content_hash() == other_source.content_hash()
    changed = parse_rubric(FULL.replace("gap_max = 0.05", "gap_max = 0.06"))
    assert changed.content_hash() != base.content_hash()
    with_cal = parse_rubric(FULL + "\n[calibration]\n")
    assert with_cal.calibration is not None and with_cal.calibration.size == 600
    assert with_cal.content_hash() != base.content_hash()


def test_integer_valued_thresholds_hash_like_floats():
    a = parse_rubric(MINIMAL + "[gate]\ngap_max = 0\n")
    b = parse_rubric(MINIMAL + "[gate]\ngap_max = 0.0\n")
    assert a.content_hash() == b.content_hash()


def test_frozen():
    r = parse_rubric(MINIMAL)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.name = "x"  # type: ignore[misc]


def test_toml_round_trip():
    r = load_rubric(DEFAULT_RUBRIC_PATH)
    again = parse_rubric(r.to_toml())
    assert again == r and again.content_hash() == r.content_hash()
    capped = parse_rubric(MINIMAL + "[pairs]\nmax_pairs = 5000\n")
    assert parse_rubric(capped.to_toml()).pairs.max_pairs == 5000


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ("[gate]\nbogus = 1\n", r"unknown key 'bogus' in section \[gate\]"),
        ("[estimators]\nK_min = 8\n", r"unknown key 'K_min' in section \[estimators\]"),
        ("[pairs]\nsize = 3\n", r"unknown key 'size' in section \[pairs\]"),
        ("[extras]\nx = 1\n", r"unknown section \[extras\]"),
        ("[gate]\ngap_max = 1.5\n", r"\[gate\] gap_max"),
        ("[gate]\ndifferent_recall_min = -0.1\n", r"\[gate\] different_recall_min"),
        ('[gate]\nautomatic_macro_f1_min = "high"\n', r"\[gate\] automatic_macro_f1_min"),
        ("[gate]\nhuman_human_macro_f1_min = true\n", r"human_human_macro_f1_min"),
        ("[estimators]\nconfidence = 1.0\n", r"\[estimators\] confidence"),
        ("[estimators]\nconfidence = 0\n", r"\[estimators\] confidence"),
        ("[estimators]\nk_min = 0\n", r"\[estimators\] k_min"),
        ("[estimators]\nn_min = 0\n", r"\[estimators\] n_min"),
        ("[estimators]\nn_draws = 0\n", r"\[estimators\] n_draws"),
        ("[estimators]\nn_boot = 99\n", r"\[estimators\] n_boot"),
        ("[estimators]\nn_boot = 1000.0\n", r"\[estimators\] n_boot must be an integer"),
        ("[estimators]\nseed = -1\n", r"\[estimators\] seed"),
        ("[pairs]\npairs_per_question = 0\n", r"\[pairs\] pairs_per_question"),
        ("[pairs]\nn_questions = 0\n", r"\[pairs\] n_questions"),
        ("[pairs]\nmax_pairs = 0\n", r"\[pairs\] max_pairs"),
        ("[calibration]\nheld_out = 700\n", r"\[calibration\] held_out"),
        ("[calibration]\nsize = 0\n", r"\[calibration\] size"),
        ("[calibration]\nfoo = 1\n", r"unknown key 'foo' in section \[calibration\]"),
        ("gate = 3\n", r"\[gate\] must be a table"),
    ],
)
def test_validation_errors_name_the_key(extra, match):
    text = MINIMAL + extra if not extra.startswith("gate =") else extra + MINIMAL
    with pytest.raises(ValueError, match=match):
        parse_rubric(text)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[gate]\ngap_max = 0.05\n", r"missing section \[rubric\]"),
        ('[rubric]\nversion = "1"\n', r"\[rubric\] name"),
        ('[rubric]\nname = ""\nversion = "1"\n', r"\[rubric\] name"),
        ('[rubric]\nname = "r"\n', r"\[rubric\] version"),
        (
            '[rubric]\nname = "r"\nversion = "1"\nauthor = "x"\n',
            r"unknown key 'author' in section \[rubric\]",
        ),
        ("[rubric\nname = 1", "invalid TOML"),
    ],
)
def test_header_errors(text, match):
    with pytest.raises(ValueError, match=match):
        parse_rubric(text)


def test_load_missing_file(tmp_path):
    with pytest.raises(ValueError, match="cannot read rubric"):
        load_rubric(tmp_path / "nope.toml")


def test_load_from_file(tmp_path):
    p = tmp_path / "r.toml"
    p.write_text(FULL, encoding="utf-8")
    r = load_rubric(p)
    assert r.source == str(p) and r == parse_rubric(FULL)


def test_adjudication_scope_setting() -> None:
    from rcea.audits.rubric import parse_rubric

    head = '[rubric]\nname = "r"\nversion = 1\n'
    plain = parse_rubric(head)
    explicit_default = parse_rubric(
        head + '[adjudication]\nscope = "disagreements_and_automatic"\n'
    )
    narrow = parse_rubric(head + '[adjudication]\nscope = "disagreements"\n')
    assert plain.adjudication.scope == "disagreements_and_automatic"
    # the default is not part of the content: rubrics frozen before the setting keep hashes
    assert "adjudication" not in plain.to_dict()
    assert explicit_default.content_hash() == plain.content_hash()
    assert narrow.adjudication.scope == "disagreements"
    assert narrow.content_hash() != plain.content_hash()
    assert parse_rubric(narrow.to_toml()) == narrow
    with pytest.raises(ValueError, match=r"\[adjudication\] scope must be one of"):
        parse_rubric(head + '[adjudication]\nscope = "everything"\n')


def test_pair_floor_and_scope_enter_the_hash_only_when_set() -> None:
    """Rubrics frozen before the floor and the checkpoint scope keep their hashes; set,
    they change it, round-trip through TOML, and are validated."""
    base = load_rubric(DEFAULT_RUBRIC_PATH)
    assert set(base.to_dict()["pairs"]) == {
        "seed", "pairs_per_question", "n_questions", "max_pairs", "strategy_definition"
    }  # fmt: skip
    sized = parse_rubric(
        '[rubric]\nname = "x"\nversion = "1"\n[pairs]\npairs_per_question = 28\n'
        'n_questions = 40\nmin_pairs_per_question = 3\nruns = ["grpo"]\nsteps = [40, 0]\n'
    )
    assert sized.pairs.steps == (0, 40) and sized.pairs.runs == ("grpo",)
    assert sized.pairs.scope() == {"runs": ["grpo"], "steps": [0, 40]}
    assert parse_rubric(sized.to_toml()) == sized
    assert (
        sized.content_hash()
        != parse_rubric(
            '[rubric]\nname = "x"\nversion = "1"\n[pairs]\npairs_per_question = 28\n'
            "n_questions = 40\n"
        ).content_hash()
    )
    with pytest.raises(ValueError, match="min_pairs_per_question .* must not exceed"):
        PairPlan(pairs_per_question=3, min_pairs_per_question=5)
    with pytest.raises(ValueError, match=r"\[pairs\] steps must be >= 0"):
        PairPlan(steps=(-1,))
    with pytest.raises(ValueError, match=r"\[pairs\] runs must be a non-empty list"):
        PairPlan(runs=())
