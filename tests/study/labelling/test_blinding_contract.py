"""The blinding guards' contract pinned exactly, written from the mutants `make mutation`
left alive (docs/mutation.md): what ``rcea.study.labelling.blinding`` forbids for a push (which
study, which trajectories, substring vs whole-value matching, the empty mode), the refusal
messages, and the codebook prompt guard (``rcea.study.codebook.blinding``): run and model names
for every question, trajectory ids only for their own question."""

from __future__ import annotations

import re
from typing import Any

import pytest

from rcea.annotation.tasks import BlindingViolation
from rcea.study.codebook.blinding import PromptBlindingGuard, study_guard
from rcea.study.labelling.blinding import (
    FORBIDDEN_KEYS,
    Forbidden,
    check_blinding,
    forbidden_values,
    study_provenance,
)
from rcea.study.store import Ingest, Trajectory, get_or_create_study, session_scope

# (trajectory_id, question_id, run, model, step, seed, mode)
ROWS_A = [
    ("traj-alpha-001", "q1", "grpo-run-7", "qwen-tiny", 40, 12345, "loops"),
    ("traj-alpha-002", "q2", "grpo-run-7", "qwen-tiny", 80, 777, None),
    ("traj-beta-003", "q1", "base-run-0", "qwen-base", 0, 5, ""),
]
ROWS_B = [("other-traj-9", "q1", "other-run-b", "other-model", 3, 9, "other-mode")]


def _exact(message: str) -> str:
    return f"^{re.escape(message)}$"


@pytest.fixture
def studies(engine) -> tuple[Any, int, int]:  # type: ignore[no-untyped-def]
    ids = []
    with session_scope(engine) as s:
        for name, rows in (("A", ROWS_A), ("B", ROWS_B)):
            st = get_or_create_study(s, name=name)
            ing = Ingest(study_id=st.id, source=name, sha256=name * 64, n_records=len(rows))
            s.add(ing)
            s.flush()
            for tid, qid, run, model, step, seed, mode in rows:
                s.add(
                    Trajectory(
                        study_id=st.id,
                        ingest_id=ing.id,
                        trajectory_id=tid,
                        question_id=qid,
                        text="x",
                        reward=1,
                        run=run,
                        model=model,
                        step=step,
                        seed=seed,
                        mode=mode,
                    )
                )
            ids.append(st.id)
    return engine, ids[0], ids[1]


def _tuples(rows: list[Any]) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in rows)


def test_study_provenance_is_per_study_and_per_trajectory(studies) -> None:  # type: ignore[no-untyped-def]
    engine, a, b = studies
    with session_scope(engine) as s:
        assert _tuples(study_provenance(s, a)) == sorted(ROWS_A)
        assert _tuples(study_provenance(s, b)) == ROWS_B
        assert _tuples(study_provenance(s, a, ["traj-alpha-002", "other-traj-9"])) == [ROWS_A[1]]
        assert _tuples(study_provenance(s, a, iter(["traj-beta-003"]))) == [ROWS_A[2]]
        assert study_provenance(s, a, []) == []


def test_forbidden_values_exactly(studies) -> None:  # type: ignore[no-untyped-def]
    engine, a, _ = studies
    with session_scope(engine) as s:
        got = forbidden_values(s, a, ["traj-alpha-001"], extra_exact=["yes", "", None])
        # Every run and model name of the study (not only of the trajectories pushed),
        # the pushed trajectory's id as a substring; its question id, step, seed and mode
        # as whole values; nothing of study B.
        assert got == Forbidden(
            substrings={"grpo-run-7", "qwen-tiny", "base-run-0", "qwen-base", "traj-alpha-001"},
            exact={"yes", "q1", "40", "12345", "loops"},
        )
        # An empty or missing mode forbids nothing (an empty string would match every
        # empty field).
        got = forbidden_values(s, a, ["traj-beta-003", "traj-alpha-002"])
        assert got.exact == {"q1", "0", "5", "q2", "80", "777"}
        assert got.substrings == {
            "grpo-run-7",
            "qwen-tiny",
            "base-run-0",
            "qwen-base",
            "traj-beta-003",
            "traj-alpha-002",
        }


def test_forbidden_scanner_matches_substrings_values_and_keys() -> None:
    scanner = Forbidden(substrings={"grpo-run-7"}, exact={"q1", "loops"}).scanner()
    assert scanner.keys == set(FORBIDDEN_KEYS)
    assert scanner.scan(
        [
            {"text": "made by grpo-run-7 today", "other": "q1"},
            {"text": "see q1 and loops inside a sentence"},
            {"run": "anything"},
        ]
    ) == ["key 'run'", "value 'grpo-run-7' in 'made by grpo-run-7 today'", "value 'q1'"]
    # exact values are whole values only: the same words inside a text pass
    assert scanner.scan([{"text": "loops in q1"}]) == []
    assert Forbidden().scanner().scan([{"text": "grpo-run-7"}]) == []


def test_check_blinding_refuses_with_the_first_five_leaks() -> None:
    forbidden = Forbidden(exact={f"v{i}" for i in range(7)})
    check_blinding([{"text": "clean"}], forbidden, what="tasks")  # no leak: no error
    tasks = [{"text": f"v{i}"} for i in range(7)]
    leaks = [f"value 'v{i}'" for i in range(5)]
    with pytest.raises(
        BlindingViolation, match=_exact(f"refusing to send tasks that leak: {leaks}")
    ):
        check_blinding(tasks, forbidden, what="tasks")
    with pytest.raises(BlindingViolation, match=r"^refusing to send review tasks that leak: "):
        check_blinding(iter(tasks), forbidden, what="review tasks")


def _msgs(*contents: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": c} for c in contents]


def test_prompt_guard_per_question_ids_and_common_names() -> None:
    guard = PromptBlindingGuard(
        ["grpo-run-7", "", "qwen-tiny"], {"q1": {"traj-alpha-001"}, "q2": {"traj-alpha-002"}}
    )
    assert guard.common == {"grpo-run-7", "qwen-tiny"}
    guard("q2", _msgs("about traj-alpha-001"))  # another question's id may appear
    guard("q3", _msgs("nothing forbidden", "q1 and qwen"))
    with pytest.raises(
        BlindingViolation,
        match=_exact(
            "a prompt for question 'q1' contains provenance or ids: "
            "value 'traj-alpha-001' in 'about traj-alpha-001' — refusing to send it"
        ),
    ):
        guard("q1", _msgs("fine", "about traj-alpha-001"))
    with pytest.raises(
        BlindingViolation,
        match=_exact(
            "a prompt for question 'q3' contains provenance or ids: "
            "value 'qwen-tiny' — refusing to send it"
        ),
    ):
        guard("q3", _msgs("qwen-tiny"))
    # one scanner per question, built once and reused
    assert set(guard._scanners) == {"q1", "q2", "q3"}
    first = guard._scanners["q1"]
    with pytest.raises(BlindingViolation):
        guard("q1", _msgs("traj-alpha-001"))
    assert guard._scanners["q1"] is first


def test_prompt_guard_names_at_most_five_leaks() -> None:
    names = [f"name-{i}-long" for i in range(7)]
    guard = PromptBlindingGuard(names, {})
    leaks = "; ".join(f"value {n!r}" for n in sorted(names)[:5])
    with pytest.raises(
        BlindingViolation,
        match=_exact(
            f"a prompt for question 'q' contains provenance or ids: {leaks} — refusing to send it"
        ),
    ):
        guard("q", _msgs(*names))


def test_study_guard_forbids_the_studys_names_and_per_question_ids(studies) -> None:  # type: ignore[no-untyped-def]
    engine, a, b = studies
    with session_scope(engine) as s:
        guard = study_guard(s, study_id=a)
    assert guard.common == {"grpo-run-7", "qwen-tiny", "base-run-0", "qwen-base"}
    assert guard.per_question == {
        "q1": {"traj-alpha-001", "traj-beta-003"},
        "q2": {"traj-alpha-002"},
    }
    with session_scope(engine) as s:
        assert study_guard(s, study_id=b).per_question == {"q1": {"other-traj-9"}}
