"""Contract tests for rcea.audits.rubric (mutation testing): frozen means frozen.

Exact refusals (section, key, range, value), each bound at its edge, the canonical JSON
pinned as text and the content hash against ``hashlib`` over that text.
"""

from __future__ import annotations

import hashlib

import pytest

from rcea.audits.rubric import (
    DEFAULT_RUBRIC_PATH,
    AdjudicationPolicy,
    AnnotatorPlan,
    CalibrationPlan,
    EstimatorSettings,
    PairPlan,
    Rubric,
    default_rubric,
    load_rubric,
    parse_rubric,
    rubric_from_dict,
)

HEAD = '[rubric]\nname = "r"\nversion = "1"\n'


def _err(text: str) -> str:
    with pytest.raises(ValueError) as e:
        parse_rubric(text)
    return str(e.value)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("[estimators]\nk_min = 0", "[estimators] k_min must be >= 1, got 0"),
        ("[estimators]\nn_min = 0", "[estimators] n_min must be >= 1, got 0"),
        ("[estimators]\nn_draws = 0", "[estimators] n_draws must be >= 1, got 0"),
        ("[estimators]\nn_boot = 99", "[estimators] n_boot must be >= 100, got 99"),
        ("[estimators]\nk_min = 1.5", "[estimators] k_min must be an integer, got 1.5"),
        ("[estimators]\nk_min = true", "[estimators] k_min must be an integer, got True"),
        (
            "[estimators]\nseed = -1",
            "[estimators] seed must be in [0, 9223372036854775807], got -1",
        ),
        (
            "[estimators]\nconfidence = 1.0",
            "[estimators] confidence must be strictly between 0 and 1, got 1.0",
        ),
        (
            "[estimators]\nconfidence = 0.0",
            "[estimators] confidence must be strictly between 0 and 1, got 0.0",
        ),
        ("[estimators]\nconfidence = true", "[estimators] confidence must be a number, got True"),
        (
            "[estimators]\nconfidence = nan",
            "[estimators] confidence must be strictly between 0 and 1, got nan",
        ),
        ("[gate]\ngap_max = 1.5", "[gate] gap_max must be in [0, 1], got 1.5"),
        ("[gate]\ngap_max = -0.1", "[gate] gap_max must be in [0, 1], got -0.1"),
        ("[gate]\ngap_max = inf", "[gate] gap_max must be in [0, 1], got inf"),
        ('[gate]\ngap_max = "x"', "[gate] gap_max must be a number, got 'x'"),
        ("[pairs]\nseed = -1", "[pairs] seed must be in [0, 9223372036854775807], got -1"),
        ("[pairs]\npairs_per_question = 0", "[pairs] pairs_per_question must be >= 1, got 0"),
        ("[pairs]\nn_questions = 0", "[pairs] n_questions must be >= 1, got 0"),
        ("[pairs]\nmax_pairs = 0", "[pairs] max_pairs must be >= 1, got 0"),
        (
            '[pairs]\nstrategy_definition = "  "',
            "[pairs] strategy_definition must be a non-empty string",
        ),
        (
            "[pairs]\nstrategy_definition = 3",
            "[pairs] strategy_definition must be a non-empty string",
        ),
        ("[calibration]\nsize = 0", "[calibration] size must be >= 1, got 0"),
        (
            "[calibration]\nsize = 10\nheld_out = 11",
            "[calibration] held_out must be in [1, 10], got 11",
        ),
        (
            "[calibration]\nsize = 10\nheld_out = 0",
            "[calibration] held_out must be in [1, 10], got 0",
        ),
        (
            "[calibration]\nseed = -1",
            "[calibration] seed must be in [0, 9223372036854775807], got -1",
        ),
        (
            "[calibration]\nannotators_per_item = 3",
            "[calibration] annotators_per_item must be in [1, 2], got 3",
        ),
        (
            "[calibration]\nannotators_per_item = 0",
            "[calibration] annotators_per_item must be in [1, 2], got 0",
        ),
        (
            '[adjudication]\nscope = "all"',
            "[adjudication] scope must be one of disagreements, "
            "disagreements_and_automatic, got 'all'",
        ),
        (
            "[annotators]\nrepeat_share = 0.51",
            "[annotators] repeat_share must be in [0, 0.5], got 0.51",
        ),
        (
            "[annotators]\nrepeat_share = -0.01",
            "[annotators] repeat_share must be in [0, 0.5], got -0.01",
        ),
        (
            "[annotators]\nrepeat_share = true",
            "[annotators] repeat_share must be a number, got True",
        ),
        ('[annotators]\nrepeat_share = "x"', "[annotators] repeat_share must be a number, got 'x'"),
        ("[annotators]\nrepeat_share = inf", "[annotators] repeat_share must be a number, got inf"),
        (
            "[gate]\nfoo = 1",
            "unknown key 'foo' in section [gate] (allowed: human_human_macro_f1_min, "
            "automatic_macro_f1_min, gap_max, different_precision_min, different_recall_min, "
            "automatic_coverage_min)",
        ),
        (
            "[annotators]\nfoo = 1",
            "unknown key 'foo' in section [annotators] (allowed: repeat_share)",
        ),
        (
            "[extra]\nfoo = 1",
            "unknown section [extra] (allowed: rubric, gate, estimators, pairs, "
            "calibration, adjudication, sequential, annotators, reaudit, acceptance, "
            "recalibration)",
        ),
    ],
)
def test_refusals_exact(body: str, message: str) -> None:
    assert _err(HEAD + body + "\n") == message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[gate]\ngap_max = 0.1\n", "missing section [rubric] (needs name and version)"),
        ('[rubric]\nversion = "1"\n', "[rubric] name must be a non-empty string, got None"),
        (
            '[rubric]\nname = " "\nversion = "1"\n',
            "[rubric] name must be a non-empty string, got ' '",
        ),
        (
            '[rubric]\nname = "r"\n',
            "[rubric] version must be a non-empty string or integer, got None",
        ),
        (
            '[rubric]\nname = "r"\nversion = ""\n',
            "[rubric] version must be a non-empty string or integer, got ''",
        ),
        (
            '[rubric]\nname = "r"\nversion = true\n',
            "[rubric] version must be a non-empty string or integer, got True",
        ),
        (
            '[rubric]\nname = "r"\nversion = "1"\ndescription = 2\n',
            "[rubric] description must be a string, got 2",
        ),
        (
            '[rubric]\nname = "r"\nversion = "1"\nx = 2\n',
            "unknown key 'x' in section [rubric] (allowed: name, version, description)",
        ),
        ("rubric = 1\n", "[rubric] must be a table, got int"),
        ("gate = 3\n" + HEAD, "[gate] must be a table, got int"),
    ],
)
def test_header_refusals_exact(text: str, message: str) -> None:
    assert _err(text) == message


def test_not_a_table_and_bad_toml() -> None:
    with pytest.raises(ValueError) as e:
        rubric_from_dict([])  # type: ignore[arg-type]
    assert str(e.value) == "a rubric must be a table of sections"
    with pytest.raises(ValueError) as e:
        parse_rubric("[rubric", source="x.toml")
    assert str(e.value).startswith("x.toml: invalid TOML: ")


def test_bounds_accepted_at_their_edges() -> None:
    r = parse_rubric(
        HEAD
        + "[estimators]\nk_min = 1\nn_min = 1\nn_draws = 1\nn_boot = 100\n"
        + "seed = 9223372036854775807\n"
        + "[pairs]\nseed = 0\npairs_per_question = 1\nn_questions = 1\nmax_pairs = 1\n"
        + "[calibration]\nsize = 1\nheld_out = 1\nseed = 0\nannotators_per_item = 2\n"
        + "[annotators]\nrepeat_share = 0.5\n"
        + "[gate]\ngap_max = 1\nautomatic_coverage_min = 0\n"
    )
    assert r.estimators == EstimatorSettings(1, 1, 1, 100, 0.95, 2**63 - 1)
    assert r.pairs.max_pairs == 1
    assert r.calibration == CalibrationPlan(1, 1, 0, 2)
    assert r.annotators == AnnotatorPlan(0.5)
    assert r.gate.gap_max == 1.0
    assert r.annotators.repeat_share == 0.5 and isinstance(AnnotatorPlan(0).repeat_share, float)
    assert isinstance(EstimatorSettings(confidence=0.5).confidence, float)


def test_integer_version_is_stored_as_string() -> None:
    r = parse_rubric('[rubric]\nname = "r"\nversion = 3\n')
    assert r.version == "3"
    assert r.description == ""
    assert r.source == "<string>"


def test_canonical_json_and_hash_pinned() -> None:
    r = parse_rubric(HEAD + 'description = "é"\n')
    d = r.to_dict()
    assert list(d) == ["rubric", "gate", "estimators", "pairs", "calibration"]
    assert d["rubric"] == {"name": "r", "version": "1", "description": "é"}
    assert d["calibration"] is None
    text = r.canonical_json()
    assert text.startswith('{"calibration":null,"estimators":{"confidence":0.95,"k_min":8,')
    assert '"rubric":{"description":"é","name":"r","version":"1"}' in text
    assert " " not in text.replace("Two solutions use", "").split('"strategy_definition"')[0]
    assert r.content_hash() == hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_optional_sections_enter_the_content_only_when_not_default() -> None:
    base = parse_rubric(HEAD)
    assert parse_rubric(HEAD + '[adjudication]\nscope = "disagreements_and_automatic"\n') == base
    assert (
        parse_rubric(
            HEAD + '[adjudication]\nscope = "disagreements_and_automatic"\n'
        ).content_hash()
        == base.content_hash()
    )
    adj = parse_rubric(HEAD + '[adjudication]\nscope = "disagreements"\n')
    assert adj.to_dict()["adjudication"] == {"scope": "disagreements"}
    assert adj.content_hash() != base.content_hash()
    ann = parse_rubric(HEAD + "[annotators]\nrepeat_share = 0.1\n")
    assert ann.to_dict()["annotators"] == {"repeat_share": 0.1}
    assert "annotators" not in parse_rubric(HEAD + "[annotators]\nrepeat_share = 0\n").to_dict()
    cal1 = parse_rubric(HEAD + "[calibration]\nsize = 10\nheld_out = 2\n")
    assert cal1.to_dict()["calibration"] == {"size": 10, "held_out": 2, "seed": 0}
    cal2 = parse_rubric(HEAD + "[calibration]\nsize = 10\nheld_out = 2\nannotators_per_item = 2\n")
    assert cal2.to_dict()["calibration"] == {
        "size": 10,
        "held_out": 2,
        "seed": 0,
        "annotators_per_item": 2,
    }
    seq = parse_rubric(HEAD + "[sequential]\nlooks = [0.5, 1.0]\n")
    assert seq.to_dict()["sequential"] == seq.sequential.to_dict()
    assert "sequential" not in base.to_dict()
    assert parse_rubric(seq.to_toml()) == seq


def test_defaults_of_each_section() -> None:
    assert PairPlan().to_dict()["pairs_per_question"] == 156
    assert PairPlan().n_questions == 29
    assert PairPlan().max_pairs is None
    assert AdjudicationPolicy().scope == "disagreements_and_automatic"
    assert CalibrationPlan() == CalibrationPlan(600, 300, 0, 1)
    assert EstimatorSettings() == EstimatorSettings(8, 8, 20, 10_000, 0.95, 0)
    r = Rubric(name="r", version="1")
    assert r.calibration is None and r.sequential is None and r.source is None


def test_load_rubric_errors_and_source(tmp_path) -> None:
    p = tmp_path / "r.toml"
    p.write_text(HEAD + 'description = "ü"\n', encoding="utf-8")
    r = load_rubric(p)
    assert r.source == str(p)
    assert r.description == "ü"
    missing = tmp_path / "nope.toml"
    with pytest.raises(ValueError) as e:
        load_rubric(missing)
    assert str(e.value).startswith(f"cannot read rubric {missing}: ")


def test_sequential_section_without_looks_takes_the_default_looks() -> None:
    r = parse_rubric(HEAD + "[sequential]\nalpha = 0.05\n")
    assert r.sequential is not None
    assert r.sequential.looks == (0.25, 0.5, 0.75, 1.0)


def test_confidence_is_stored_as_a_builtin_float() -> None:
    np = pytest.importorskip("numpy")
    es = EstimatorSettings(confidence=np.float64(0.9))
    assert type(es.confidence) is float
    assert es.confidence == 0.9


def test_default_rubric_is_the_shipped_file() -> None:
    r = default_rubric()
    assert r == load_rubric(DEFAULT_RUBRIC_PATH)
    assert r.source == str(DEFAULT_RUBRIC_PATH)
    assert r.name == "rcea-default"
