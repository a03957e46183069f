"""K_min / n_min from the samples per question (rcea/audits/evidence_sizing.py)."""

from __future__ import annotations

from rcea.audits.evidence_sizing import coverage_at, largest_threshold, meets_floor


def test_floor_is_count_and_share() -> None:
    assert meets_floor(10, 40, min_questions=10, min_share=0.25)
    assert not meets_floor(9, 20, min_questions=10, min_share=0.25)
    assert not meets_floor(10, 41, min_questions=10, min_share=0.25)
    assert not meets_floor(0, 0, min_questions=1, min_share=0.0)


def test_largest_threshold_half_the_checkpoints_meet() -> None:
    # 8 samples per question, 40 questions: successes spread 0..8 evenly (5 at each)
    even = [k for k in range(9) for _ in range(5)][:40]
    counts = {"a": even, "b": [min(8, k + 1) for k in even], "c": [0] * 40}
    k, table, ok = largest_threshold(counts, default=8, min_questions=10, min_share=0.25)
    # a: K+ >= 6 holds for 15 questions (6, 7 absent above 7 → 5+5+5), b for 20: both meet
    assert ok and k == 6
    assert [c.threshold for c in table] == [8, 7, 6]
    assert table[-1].n_meeting_floor == 2 and table[-1].n_checkpoints == 3
    assert coverage_at(counts, 8, min_questions=10, min_share=0.25).n_meeting_floor == 0


def test_nothing_meets_the_floor_gives_the_lowest_and_says_so() -> None:
    k, table, ok = largest_threshold({"a": [1] * 40}, default=8, min_questions=10, min_share=0.25)
    assert (k, ok) == (2, False) and len(table) == 7
    assert largest_threshold({}, default=8, min_questions=10, min_share=0.25) == (8, [], True)
