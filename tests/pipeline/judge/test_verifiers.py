"""The pluggable verifier (``[verifier] kind``): math (math-verify on the last ``\\boxed{}``,
gold first), toy, ``python:MODULE:FUNCTION``; its use by probing, training and
``rcea judge verify``. The math table is the one in docs/real-models.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rcea.pipeline.judge.verifier import (
    Verification,
    VerifierError,
    make_verifier,
    verify_math,
)

pytest.importorskip("math_verify", reason="math-verify missing: pip install -e '.[train]'")

# (gold, completion, reward, extracted answer) — docs/real-models.md, "Tested cases".
MATH_CASES = [
    # fractions
    ("\\frac{1}{2}", "The answer is \\boxed{0.5}.", 1, "0.5"),
    ("\\frac{1}{2}", "\\boxed{1/2}", 1, "1/2"),
    ("\\frac{1}{2}", "\\boxed{\\dfrac{1}{2}}", 1, "\\dfrac{1}{2}"),
    ("\\frac{1}{2}", "\\boxed{\\frac12}", 1, "\\frac12"),
    ("\\frac{1}{2}", "\\boxed{2/4}", 1, "2/4"),
    ("\\frac{3}{2}", "\\boxed{1\\frac{1}{2}}", 1, "1\\frac{1}{2}"),
    ("\\frac{1}{3}", "\\boxed{0.33}", 0, "0.33"),
    ("\\frac{1}{3}", "\\boxed{0.3333333}", 1, "0.3333333"),
    # LaTeX
    ("\\sqrt{2}", "\\boxed{2^{1/2}}", 1, "2^{1/2}"),
    ("\\frac{\\sqrt{2}}{2}", "\\boxed{\\frac{1}{\\sqrt{2}}}", 1, "\\frac{1}{\\sqrt{2}}"),
    ("2\\pi", "\\boxed{2 \\pi}", 1, "2 \\pi"),
    ("2\\pi", "\\boxed{6.28}", 0, "6.28"),
    ("x^2+2x+1", "\\boxed{(x+1)^2}", 1, "(x+1)^2"),
    ("\\{1, 2\\}", "\\boxed{\\{2, 1\\}}", 1, "\\{2, 1\\}"),
    ("[0, 1)", "\\boxed{[0,1)}", 1, "[0,1)"),
    ("[0, 1)", "\\boxed{[0,1]}", 0, "[0,1]"),
    ("x = 2", "\\boxed{2}", 1, "2"),
    ("1000", "\\boxed{1{,}000}", 1, "1{,}000"),
    ("\\text{(C)}", "\\boxed{C}", 1, "C"),
    ("A", "\\boxed{B}", 0, "B"),
    # units, degrees, percent, currency
    ("5", "\\boxed{5\\text{ cm}}", 1, "5\\text{ cm}"),
    ("5", "\\boxed{5 \\mathrm{cm}}", 1, "5 \\mathrm{cm}"),
    ("5\\text{ cm}", "\\boxed{5}", 1, "5"),
    ("90^\\circ", "\\boxed{90}", 1, "90"),
    ("50\\%", "\\boxed{50}", 1, "50"),
    ("50\\%", "\\boxed{0.5}", 1, "0.5"),
    ("\\$5", "\\boxed{5}", 1, "5"),
    # multiple boxes: the last one counts
    ("3", "first \\boxed{4}, corrected: \\boxed{3}", 1, "3"),
    ("3", "first \\boxed{3}, then \\boxed{4}", 0, "4"),
    ("3", "\\boxed{3} and an empty \\boxed{}", 0, ""),
    ("\\frac{1}{2}", "\\boxed{\\frac{1}{2}} then \\boxed{unclosed", 1, "\\frac{1}{2}"),
    ("3", "\\fbox{3}", 1, "3"),
    ("3", "no box: 3", 0, None),
]


@pytest.mark.parametrize(("gold", "text", "reward", "answer"), MATH_CASES)
def test_math_verifier_table(gold: str, text: str, reward: int, answer: str | None) -> None:
    v = make_verifier("math")(text, gold, "q")
    assert (v.reward, v.answer) == (reward, answer)


def test_math_verifier_is_gold_first() -> None:
    """math-verify is asymmetric: the gold ``x<2`` accepts the interval, not vice versa."""
    verify = make_verifier("math")
    assert verify("\\boxed{(-\\infty,2)}", "x<2", "q").reward == 1
    assert verify("\\boxed{x<2}", "(-\\infty,2)", "q").reward == 0


def test_math_verifier_needs_a_gold() -> None:
    with pytest.raises(VerifierError, match="'q7'.*needs a gold answer"):
        make_verifier("math")("\\boxed{1}", None, "q7")


def test_unparseable_answers_compare_as_strings() -> None:
    assert verify_math("\\boxed{\\foo}", "\\foo").reward == 1
    assert verify_math("\\boxed{\\foo}", "\\bar").reward == 0


def test_toy_verifier_matches_the_toy_domain() -> None:
    from rcea.pipeline import toy

    q = toy.generate_questions("probe", 1, seed=0)[0]
    good = f"... \\boxed{{{toy.true_answer(q)}}}"
    verify = make_verifier("toy")
    assert verify(good, None, q.question_id) == Verification(1, str(toy.true_answer(q)))
    assert verify("\\boxed{-12345}", None, q.question_id).reward == 0


# -- python:MODULE:FUNCTION verifiers (this module's functions) --------------------------


def exact(text: str, gold: str | None) -> bool:
    return text.strip() == gold


def with_answer(text: str, gold: str | None) -> tuple[int, str]:
    return int(text.endswith(gold or "")), text[-1:]


def graded(text: str, gold: str | None) -> float:
    return 0.5


def returns_verification(text: str, gold: str | None) -> Verification:
    return Verification(1, "v")


NOT_CALLABLE = 3


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("exact", "42", Verification(1, None)),
        ("exact", "41", Verification(0, None)),
        ("with_answer", "x 42", Verification(1, "2")),
        ("returns_verification", "", Verification(1, "v")),
    ],
)
def test_python_verifier(name: str, text: str, expected: Verification) -> None:
    assert make_verifier(f"python:{__name__}:{name}")(text, "42", "q") == expected


def test_python_verifier_rejects_non_binary_rewards() -> None:
    verify = make_verifier(f"python:{__name__}:graded")
    with pytest.raises(VerifierError, match=r"graded: returned 0\.5 for question 'q3'"):
        verify("x", "1", "q3")


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("python:nosuch_module_xyz:f", "cannot import module 'nosuch_module_xyz'"),
        (f"python:{__name__}:missing", "has no 'missing'"),
        (f"python:{__name__}:NOT_CALLABLE", "is not callable"),
        ("python:only_module", "expected python:MODULE:FUNCTION"),
        ("regex", "unknown verifier 'regex'"),
    ],
)
def test_bad_verifier_kinds(kind: str, message: str) -> None:
    with pytest.raises(VerifierError, match=message):
        make_verifier(kind)


# -- where the verifier is configured ------------------------------------------------------


def _bench_file(tmp_path: Path) -> Path:
    path = tmp_path / "qs.jsonl"
    rows = [
        {"id": "a", "problem": "1/2 as a decimal?", "answer": "\\frac{1}{2}"},
        {"id": "b", "problem": "Two plus two?", "answer": "4"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_probe_questions_use_the_configured_verifier(tmp_path: Path) -> None:
    from rcea.pipeline.probe.questions import load_questions

    path = _bench_file(tmp_path)
    default = {q.question_id: q for q in load_questions(str(path))}
    assert default["a"].score("so \\boxed{0.5}").reward == 1  # math by default
    custom = {
        q.question_id: q
        for q in load_questions(str(path), verifier=f"python:{__name__}:with_answer")
    }
    s = custom["b"].score("the answer is 4")
    assert (s.reward, s.answer, s.validity) == (1, "4", None)
    assert custom["a"].score("so \\boxed{0.5}").reward == 0  # not math any more
    # toy questions keep their oracles' validity/strategy under another verifier
    toy_q = load_questions("toy", n=1, seed=0, verifier="math")[0]
    from rcea.pipeline import toy

    q = toy.question_from_id(toy_q.question_id)
    text = toy.render_trajectory(q, q.strategies[0], toy.Variant(), None)
    s = toy_q.score(text)
    assert (s.reward, s.validity, s.strategy) == (1, 1, q.strategies[0])


def test_probe_config_checks_the_verifier(tmp_path: Path) -> None:
    from rcea.pipeline.probe import ConfigError, parse_config

    base = {"checkpoints": {"list": [{"path": "m", "run": "r", "model": "m", "step": 0}]}}
    path = _bench_file(tmp_path)
    with pytest.raises(ConfigError, match=r"\[verifier\] kind: .*toy questions only"):
        parse_config({**base, "questions": {"source": str(path)}, "verifier": {"kind": "toy"}})
    with pytest.raises(ConfigError, match=r"\[verifier\] kind: unknown verifier 'nope'"):
        parse_config({**base, "verifier": {"kind": "nope"}})
    cfg = parse_config({**base, "verifier": {"kind": f"python:{__name__}:exact"}})
    assert cfg.verifier.kind == f"python:{__name__}:exact"


def test_training_config_and_reward_use_the_verifier(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    from rcea.pipeline.training.config import ConfigError, parse_config
    from rcea.pipeline.training.rewards import ToyReward, VerifierReward
    from rcea.pipeline.training.run import build_dataset, reward_function

    path = _bench_file(tmp_path)
    base = {"model": {"path": "m"}, "objective": {"name": "grpo"}}
    with pytest.raises(ConfigError, match=r"\[verifier\] kind: .*toy questions only"):
        parse_config({**base, "data": {"source": str(path)}, "verifier": {"kind": "toy"}})
    with pytest.raises(ConfigError, match=r"\[verifier\] kind: .*cannot import module"):
        parse_config({**base, "verifier": {"kind": "python:no_such_mod_q:f"}})
    assert isinstance(reward_function(parse_config(base)), ToyReward)
    cfg = parse_config({**base, "data": {"source": str(path)}})
    reward = reward_function(cfg)
    assert isinstance(reward, VerifierReward) and reward.kind == "math"
    ds = build_dataset(cfg)
    assert ds["question_id"] == ["a", "b"] and ds["answer"] == ["\\frac{1}{2}", "4"]
    logged: dict[str, float] = {}
    out = reward(
        prompts=ds["prompt"],
        completions=[[{"role": "assistant", "content": "\\boxed{0.5}"}], "4, unboxed"],
        question_id=ds["question_id"],
        answer=ds["answer"],
        log_metric=logged.__setitem__,
    )
    assert out == [1.0, 0.0]
    assert reward.pop_outcomes() == [1.0, 0.0] and reward.pop_outcomes() == []
    assert logged == {"verifier/accuracy": 0.5, "verifier/boxed_rate": 0.5}


def test_judge_verify_accepts_a_python_verifier(tmp_path: Path) -> None:
    from rcea.study.validity_audit.verify import verify_file

    recs = tmp_path / "r.jsonl"
    recs.write_text(
        json.dumps({"trajectory_id": "t1", "question_id": "b", "text": "x 4", "reward": 0}) + "\n"
    )
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps({"question_id": "b", "answer": "4"}) + "\n")
    out = verify_file(recs, gold=gold, domain=f"python:{__name__}:with_answer")
    assert (out["n_disagreements"], out["n_success"]) == (1, 1)
