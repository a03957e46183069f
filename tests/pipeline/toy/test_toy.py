"""The toy domain: generators, renderings and the three oracles, on hand-written cases."""

from __future__ import annotations

import itertools

import pytest

from rcea.pipeline import toy
from rcea.pipeline.toy import Question, StepError, Variant


def test_true_answers_and_prompts() -> None:
    assert toy.true_answer(Question("sum_times", 3, 4, 5)) == 35
    assert toy.true_answer(Question("diff_products", 3, 6, 2)) == 12
    assert toy.true_answer(Question("sum_products", 2, 5, 4)) == 18
    assert Question("sum_times", 3, 4, 5).prompt == "(3+4)*5\n"
    assert Question("diff_products", 3, 6, 2).expression == "3*6-3*2"
    q = Question("sum_products", 2, 5, 4)
    assert toy.question_from_id(q.question_id) == q
    with pytest.raises(ValueError, match="not a toy question id"):
        toy.question_from_id("xx-1-2-3")


def test_renderings_by_hand() -> None:
    q = Question("sum_times", 3, 4, 5)
    assert toy.render_trajectory(q, "add_first") == "3+4=7\n7*5=35\n\\boxed{35}"
    assert toy.render_trajectory(q, "distribute") == "3*5=15\n4*5=20\n15+20=35\n\\boxed{35}"
    assert (
        toy.render_trajectory(q, "distribute", Variant(commute=True, reorder=True, spaced=True))
        == "5 * 4 = 20\n5 * 3 = 15\n20 + 15 = 35\n\\boxed{35}"
    )
    d = Question("diff_products", 3, 6, 2)
    assert toy.render_trajectory(d, "factor") == "6-2=4\n4*3=12\n\\boxed{12}"
    # reordering the two products keeps a*b - a*c (never a*c - a*b)
    assert toy.render_trajectory(d, "direct", Variant(reorder=True)) == (
        "3*2=6\n3*6=18\n18-6=12\n\\boxed{12}"
    )
    with pytest.raises(ValueError, match="does not apply"):
        toy.render_trajectory(d, "distribute")


@pytest.mark.parametrize("kind", toy.KINDS)
def test_every_strategy_variant_is_correct_valid_and_keeps_its_mode(kind: str) -> None:
    for q in [x for x in toy.question_pool("probe") if x.kind == kind][:5]:
        texts = {}
        for strat, variant in itertools.product(q.strategies, toy.VARIANTS):
            text = toy.render_trajectory(q, strat, variant)
            assert toy.verify(q, text) == 1, text
            assert toy.process_valid(q, text) == 1, text
            assert toy.strategy(q, text) == strat, text
            texts.setdefault(strat, set()).add(text)
        # realisation variety inside each strategy, and the two strategies differ
        assert all(len(v) >= 2 for v in texts.values())
        assert not (texts[q.strategies[0]] & texts[q.strategies[1]])


def test_injected_errors_have_the_documented_outcomes() -> None:
    q = Question("sum_times", 3, 4, 5)
    arith = toy.render_trajectory(q, "add_first", error=StepError("arith", 0, 1))
    assert arith == "3+4=8\n8*5=40\n\\boxed{40}"
    assert (toy.verify(q, arith), toy.process_valid(q, arith)) == (0, 0)
    slip = toy.render_trajectory(q, "add_first", error=StepError("slip", 0, 2))
    assert slip == "3+4=9\n7*5=35\n\\boxed{35}"  # wrong step, right answer
    assert (toy.verify(q, slip), toy.process_valid(q, slip)) == (1, 0)
    operand = toy.render_trajectory(q, "distribute", error=StepError("operand", 0, 4))
    assert operand == "7*5=35\n4*5=20\n35+20=55\n\\boxed{55}"
    assert (toy.verify(q, operand), toy.process_valid(q, operand)) == (0, 0)
    boxed = toy.render_trajectory(q, "distribute", error=StepError("boxed", 0, -1))
    assert boxed.endswith("15+20=35\n\\boxed{34}")
    assert (toy.verify(q, boxed), toy.process_valid(q, boxed)) == (0, 0)
    for text in (arith, slip, boxed):
        assert toy.strategy(q, text) in ("add_first", "distribute")
    with pytest.raises(ValueError, match="slip must not be on the last step"):
        toy.render_trajectory(q, "add_first", error=StepError("slip", 1, 1))


def test_oracles_on_hand_written_texts() -> None:
    q = Question("diff_products", 3, 6, 2)
    assert toy.verify(q, "whatever \\boxed{ 12 }") == 1
    assert toy.verify(q, "\\boxed{11}\n\\boxed{12}") == 1  # the last box counts
    assert toy.verify(q, "no box 12") == 0
    assert toy.verify(q, "\\boxed{12.0}") == 0
    # a foreign operand makes the process invalid even when the step is true
    assert toy.process_valid(q, "7*3=21\n21-9=12\n\\boxed{12}") == 0
    # a garbage line, a missing box, a box that does not repeat the last result
    assert toy.process_valid(q, "6-2=4\nhmm\n4*3=12\n\\boxed{12}") == 0
    assert toy.process_valid(q, "6-2=4\n4*3=12") == 0
    assert toy.process_valid(q, "6-2=4\n4*3=12\n\\boxed{4}") == 0
    assert toy.process_valid(q, "6 - 2 = 4\n3 * 4 = 12\n\\boxed{12}") == 1
    assert toy.strategy(q, "6-2=4\n3*4=12\n\\boxed{12}") == "factor"
    assert toy.strategy(q, "2*3=6\n6*3=18\n18-6=12\n\\boxed{12}") == "direct"
    assert toy.strategy(q, "\\boxed{12}") == toy.UNKNOWN
    assert toy.strategy(q, "6+2=8\n\\boxed{8}") == toy.UNKNOWN
    assert toy.strategy_by_id(q.question_id, "6-2=4\n3*4=12\n\\boxed{12}") == "factor"
    assert toy.strategy_by_id(q.question_id, "\\boxed{12}") is None


def test_splits_are_disjoint_seeded_and_sized() -> None:
    pools = {s: {q.question_id for q in toy.question_pool(s)} for s in toy.SPLITS}
    assert not (pools["train"] & pools["probe"]) and not (pools["train"] & pools["eval"])
    assert not (pools["probe"] & pools["eval"])
    assert sum(len(p) for p in pools.values()) == 216 + 90 + 216
    a = toy.generate_questions("probe", 20, seed=2027)
    assert a == toy.generate_questions("probe", 20, seed=2027)
    assert a != toy.generate_questions("probe", 20, seed=1)
    assert len({q.question_id for q in a}) == 20
    with pytest.raises(ValueError, match="asked for n"):
        toy.generate_questions("eval", 10_000)
    with pytest.raises(ValueError, match="unknown split"):
        toy.generate_questions("dev", 3)
