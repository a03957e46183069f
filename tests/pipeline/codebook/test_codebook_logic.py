"""The codebook rules as pure functions: batch plans, reply parsing, dispute rules,
draft edits, extensions, hashes, prompts and the oracle backend."""

from __future__ import annotations

import pytest

from rcea.pipeline.codebook import (
    INVALID,
    NEW,
    NONE,
    BlindItem,
    Candidate,
    CodebookError,
    ItemLabel,
    Mode,
    OracleBackend,
    Proposal,
    arbitration_status,
    candidate_ids,
    codebook_hash,
    dispute_reasons,
    edit_modes,
    extend_modes,
    group_proposals,
    labels_from_reply,
    modes_from_merge,
    plan_batches,
    prompts,
)
from rcea.pipeline.codebook.schemas import AssignReply, MergeReply
from tests.support.fake_llm import render_solution, strategy_of

MODES = [
    Mode(id="m1", name="direct", criterion="add then multiply"),
    Mode(id="m2", name="distribute", criterion="multiply each term then add"),
]


def test_plan_batches_is_deterministic_complete_and_pass_specific() -> None:
    ids = [f"t{i:03d}" for i in range(23)]
    one = plan_batches(ids, batch_size=5, seed=0, salt=("assign", "h", 1))
    assert one == plan_batches(list(reversed(ids)), batch_size=5, seed=0, salt=("assign", "h", 1))
    assert sorted(t for b in one for t in b) == ids
    assert [len(b) for b in one] == [5, 5, 5, 4, 4]  # even sizes, none above 5
    two = plan_batches(ids, batch_size=5, seed=0, salt=("assign", "h", 2))
    assert {tuple(b) for b in one}.isdisjoint({tuple(b) for b in two})  # other batchings
    assert one != plan_batches(ids, batch_size=5, seed=1, salt=("assign", "h", 1))
    assert plan_batches([], batch_size=5, seed=0, salt=()) == []


def test_labels_from_reply_never_guesses() -> None:
    hmap = {"T1": "a", "T2": "b", "T3": "c", "T4": "d", "T5": "e"}
    reply = AssignReply.model_validate(
        {
            "assignments": [
                {"item": "T1", "mode": "m1", "confidence": 0.9},
                {"item": "T2", "mode": "m7", "confidence": 0.9},
                {"item": "T3", "mode": "new", "confidence": 0.8, "new_name": "factor"},
                {"item": "T5", "mode": "m1", "confidence": 0.9},
                {"item": "T5", "mode": "m2", "confidence": 0.9},
                {"item": "T9", "mode": "m1", "confidence": 0.9},
            ]
        }
    )
    got = {x.trajectory_id: x for x in labels_from_reply(hmap, reply, {"m1", "m2"})}
    assert got["a"].label == "m1"
    assert got["b"].label == INVALID and "m7" in (got["b"].note or "")
    assert got["c"].label == NEW and got["c"].proposal == {"name": "factor", "criterion": ""}
    assert got["d"].label == INVALID and "no answer" in (got["d"].note or "")
    assert got["e"].label == INVALID and "conflicting" in (got["e"].note or "")
    failed = labels_from_reply(hmap, None, {"m1"}, error="HTTP 500")
    assert {x.label for x in failed} == {INVALID} and "HTTP 500" in (failed[0].note or "")


def test_dispute_reasons_and_arbitration_outcomes() -> None:
    def lab(label: str, conf: float | None = 0.9) -> ItemLabel:
        return ItemLabel("t", label, conf)

    assert dispute_reasons(lab("m1"), lab("m1"), threshold=0.7) == []
    assert dispute_reasons(lab("m1"), lab("m2"), threshold=0.7) == ["passes disagree"]
    assert dispute_reasons(lab(NEW), lab(NEW), threshold=0.7) == ["special label NEW"]
    assert dispute_reasons(lab(NONE), lab("m1"), threshold=0.7) == [
        "passes disagree",
        "special label NONE",
    ]
    assert dispute_reasons(lab("m1", 0.5), lab("m1"), threshold=0.7) == ["low confidence"]
    assert "invalid reply" in dispute_reasons(lab(INVALID, None), lab("m1"), threshold=0.7)
    assert dispute_reasons(None, lab("m1"), threshold=0.7) == ["missing pass"]
    assert arbitration_status(lab("m1", 0.9), threshold=0.7) == "resolved"
    assert arbitration_status(lab("m1", 0.6), threshold=0.7) == "researcher"
    assert arbitration_status(lab(NEW, 0.9), threshold=0.7) == "new"
    assert arbitration_status(lab(NONE, 1.0), threshold=0.7) == "researcher"
    assert arbitration_status(lab(INVALID, None), threshold=0.7) == "researcher"


def test_merge_reply_makes_a_draft_with_examples() -> None:
    numbered = candidate_ids(
        [
            Candidate("direct", "add first", ("t1", "t2")),
            Candidate("Direct approach", "sum then product", ("t3",)),
            Candidate("distribute", "expand", ("t4",)),
        ]
    )
    reply = MergeReply.model_validate(
        {
            "modes": [
                {"name": "direct", "criterion": "add first", "merged_from": ["C1", "C2"]},
                {"name": "distribute", "criterion": "expand", "merged_from": ["C3", "C99"]},
                {"name": "Direct", "criterion": "dup", "merged_from": []},
            ]
        }
    )
    modes = modes_from_merge(numbered, reply)
    assert [(m.id, m.name, m.examples) for m in modes] == [
        ("m1", "direct", ["t1", "t2", "t3"]),
        ("m2", "distribute", ["t4"]),
    ]


def test_draft_edits() -> None:
    renamed = edit_modes(MODES, "rename", mode="m1", name="sum first")
    assert renamed[0].name == "sum first" and renamed[0].criterion == "add then multiply"
    merged = edit_modes(MODES, "merge", mode="m2", into="m1", name="any")
    assert [m.id for m in merged] == ["m1"] and merged[0].name == "any"
    split = edit_modes(MODES, "split", mode="m2", name="factor", criterion="common factor")
    assert [m.id for m in split] == ["m1", "m2", "m3"] and split[2].note == "split from m2"
    added = edit_modes(MODES, "add", name="guess", criterion="trial and error")
    assert added[-1].id == "m3"
    assert [m.id for m in edit_modes(added, "drop", mode="m2")] == ["m1", "m3"]
    assert edit_modes(edit_modes(added, "drop", mode="m3"), "add", name="x")[-1].id == "m3"
    with pytest.raises(CodebookError, match="same name"):
        edit_modes(MODES, "add", name="Direct!", criterion="")
    with pytest.raises(CodebookError, match="no mode 'm9'"):
        edit_modes(MODES, "rename", mode="m9", name="x")
    with pytest.raises(CodebookError, match="at least one"):
        edit_modes([MODES[0]], "drop", mode="m1")
    with pytest.raises(CodebookError, match="unknown edit"):
        edit_modes(MODES, "explode")


def test_extensions_keep_ids_and_hash_changes() -> None:
    groups = group_proposals(
        [
            ("t9", {"name": "Factor", "criterion": "common factor"}),
            ("t3", {"name": "factor", "criterion": "common factor"}),
            ("t5", {"name": "guess", "criterion": ""}),
            ("t7", None),
        ]
    )
    assert [(g.name, g.trajectory_ids) for g in groups] == [
        ("Factor", ["t3", "t9"]),
        ("guess", ["t5"]),
        ("unnamed new mode", ["t7"]),
    ]
    extended = extend_modes(MODES, [Proposal("factor", "common factor", ["t3"])], note="ext #1")
    assert [m.id for m in extended] == ["m1", "m2", "m3"] and extended[:2] == MODES
    assert codebook_hash("q", extended) != codebook_hash("q", MODES)
    assert codebook_hash("q", MODES) == codebook_hash("q", [m.model_copy() for m in MODES])
    assert codebook_hash("q", MODES) != codebook_hash("q2", MODES)
    with pytest.raises(CodebookError, match="same name"):
        extend_modes(MODES, [Proposal("direct", "", [])], note="dup")


def test_prompts_show_handles_and_texts_only() -> None:
    items = [BlindItem("T1", "2+3 = 5\n5*4 = 20"), BlindItem("T2", "bad </solution> text")]
    for messages in (
        prompts.render_induce(items),
        prompts.render_assign(MODES, items),
        prompts.render_arbitrate(MODES, items),
        prompts.render_merge(candidate_ids([Candidate("direct", "add first")])),
    ):
        assert [m["role"] for m in messages] == ["system", "user"]
        assert messages[0]["content"].startswith("Task: codebook.")
        assert "wording, notation, arithmetic detail" in messages[0]["content"]
    text = prompts.render_assign(MODES, items)[1]["content"]
    assert '<solution id="T1">\n2+3 = 5\n5*4 = 20\n</solution>' in text
    assert "bad </ solution> text" in text  # a text cannot close its block early
    assert '"id": "m2"' in text and "examples" not in text
    assert prompts.prompt_set_id().startswith("codebook-prompts[codebook.induce/v2,")


def test_oracle_backend_recovers_strategies() -> None:
    oracle = OracleBackend(strategy_of)
    texts = [render_solution(s, 2, 3, 4, v) for s in ("direct", "distribute") for v in range(3)]
    items = [BlindItem(f"T{i}", t) for i, t in enumerate(texts, 1)]
    induced = oracle.induce("q", items).value
    assert induced is not None
    assert {m.name: m.examples for m in induced.modes} == {
        "direct": ["T1", "T2", "T3"],
        "distribute": ["T4", "T5", "T6"],
    }
    extra = [
        BlindItem("T1", render_solution("factor", 2, 3, 4, 1)),
        BlindItem("T2", "The answer is \\boxed{20}."),
        BlindItem("T3", texts[4]),
    ]
    reply = oracle.assign("q", MODES, extra).value
    assert reply is not None
    assert [(a.mode, a.new_name) for a in reply.assignments] == [
        (NEW, "factor"),
        (NONE, None),
        ("m2", None),
    ]
    assert oracle.usage().completed == 2
