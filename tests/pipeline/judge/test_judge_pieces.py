"""Pure pieces of the validity judge: boxed extraction, math-verify equivalence (gold
first), the toy verifier against the domain's own oracle, the versioned template and its
hash, judge reply parsing (valid / invalid / unparseable) and the oracle backend."""

from __future__ import annotations

import pytest

from rcea.pipeline.judge import (
    DEFAULT_TEMPLATE,
    JudgeSpec,
    JudgeTemplate,
    OracleJudge,
    extract_boxed,
    math_equivalent,
    parse_judge_reply,
    verify_math,
    verify_toy,
)
from rcea.pipeline.judge.prompts import template_from_dict
from rcea.pipeline.toy import VARIANTS, StepError, generate_questions, render_trajectory, verify


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("x \\boxed{3}", "3"),
        ("\\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{ {a}+{b} }", "{a}+{b}"),
        ("\\fbox{7}", "7"),
        ("no answer", None),
        ("\\boxed{4} and an unclosed \\boxed{5", "4"),
        ("\\boxed{}", ""),
    ],
)
def test_extract_boxed(text: str, expected: str | None) -> None:
    assert extract_boxed(text) == expected


@pytest.mark.parametrize(
    ("gold", "answer", "same"),
    [
        ("\\frac{1}{2}", "0.5", True),
        ("2", "2.0", True),
        ("\\sqrt{2}/2", "\\frac{\\sqrt{2}}{2}", True),
        ("3", "4", False),
        ("x = 2", "2", True),  # gold first: the gold's equation accepts the bare value
        ("1/3", "0.33", False),
    ],
)
def test_math_equivalence_gold_first(gold: str, answer: str, same: bool) -> None:
    assert math_equivalent(gold, answer) is same


def test_verify_math() -> None:
    assert verify_math("so \\boxed{0.5}", "\\frac12").reward == 1
    assert verify_math("so \\boxed{0.6}", "\\frac12").reward == 0
    v = verify_math("0.5, unboxed", "\\frac12")
    assert (v.reward, v.answer) == (0, None)


def test_toy_verifier_matches_the_domain() -> None:
    errors = [None, StepError("slip", 0, 1), StepError("arith", 0, 2), StepError("boxed", 0, 1)]
    for q in generate_questions("probe", 8, 0):
        for k, err in enumerate(errors):
            text = render_trajectory(q, q.strategies[k % 2], VARIANTS[k], err)
            assert verify_toy(q.question_id, text).reward == verify(q, text)
    with pytest.raises(ValueError, match="not a toy question id"):
        verify_toy("q1", "\\boxed{1}")


def test_template_hash_and_validation() -> None:
    h = DEFAULT_TEMPLATE.content_hash()
    same = JudgeTemplate(**DEFAULT_TEMPLATE.to_dict())
    assert same.content_hash() == h
    edited = JudgeTemplate(
        **{**DEFAULT_TEMPLATE.to_dict(), "system": DEFAULT_TEMPLATE.system + "."}
    )
    assert edited.content_hash() != h
    spec = JudgeSpec("openai", "m")
    assert JudgeSpec.from_dict(spec.to_dict()) == spec
    assert JudgeSpec("openai", "m", seed=1).content_hash() != spec.content_hash()
    assert JudgeSpec("openai", "m2").content_hash() != spec.content_hash()
    with pytest.raises(ValueError, match="missing: \\$problem"):
        JudgeTemplate("t", 1, "s", "only $solution")
    with pytest.raises(ValueError, match="unknown: \\$run"):
        JudgeTemplate("t", 1, "s", "$problem $solution $run")
    with pytest.raises(ValueError, match="version"):
        JudgeTemplate("t", 0, "s", "$problem $solution")
    with pytest.raises(ValueError, match="f.toml: unknown key"):
        template_from_dict({"template": {**DEFAULT_TEMPLATE.to_dict(), "x": 1}}, source="f.toml")
    messages = DEFAULT_TEMPLATE.render(problem="(1+2)*3", solution="1+2=3\n3*3=9\n\\boxed{9}")
    assert messages[0]["content"].startswith("Task: judge.validity")
    assert "(1+2)*3" in messages[1]["content"] and "\\boxed{9}" in messages[1]["content"]


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [
        ('{"verdict": "valid", "rationale": "ok"}', "valid"),
        ('```json\n{"verdict": " Invalid ", "rationale": "step 2"}\n```', "invalid"),
        ('Sure: {"verdict": "valid"}', "valid"),
    ],
)
def test_parse_judge_reply(reply: str, verdict: str) -> None:
    assert parse_judge_reply(reply).verdict == verdict


@pytest.mark.parametrize(
    "reply",
    ["", "The solution is valid.", '{"verdict": "maybe"}', '{"rationale": "x"}', "{verdict: valid"],
)
def test_unparseable_replies(reply: str) -> None:
    with pytest.raises(ValueError):
        parse_judge_reply(reply)


def test_oracle_judge() -> None:
    answers = {"a": 1, "b": 0, "c": None}
    judge = OracleJudge(lambda q, text: answers[text], label="t:f")
    assert [judge.judge("q", "", t).verdict for t in "abc"] == ["valid", "invalid", "unparseable"]
    assert judge.usage() == {"completed": 3}
