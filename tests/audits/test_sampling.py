from __future__ import annotations

import itertools
from math import comb

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcea.audits.partition import partition_hash
from rcea.audits.sampling import (
    _rank_pair,
    attempt_seed,
    automatic_pair_label,
    sample_pairs,
    unrank_pair,
)


def _pool(n_questions: int = 6, m: int = 8) -> dict[str, list[str]]:
    return {f"q{q}": [f"q{q}-t{i}" for i in range(m)] for q in range(n_questions)}


@given(st.integers(2, 30))
def test_unrank_is_the_lexicographic_enumeration(m: int) -> None:
    expected = list(itertools.combinations(range(m), 2))
    assert [unrank_pair(k, m) for k in range(comb(m, 2))] == expected


def test_sampling_is_reproducible_and_order_free() -> None:
    pool = _pool()
    a = sample_pairs(pool, pairs_per_question=5, n_questions=3, seed=7)
    shuffled = {q: list(reversed(ts)) for q, ts in reversed(list(pool.items()))}
    b = sample_pairs(shuffled, pairs_per_question=5, n_questions=3, seed=7)
    assert a == b
    c = sample_pairs(pool, pairs_per_question=5, n_questions=3, seed=8)
    assert [(p.trajectory_a, p.trajectory_b) for p in a] != [
        (p.trajectory_a, p.trajectory_b) for p in c
    ]


def test_pairs_are_distinct_within_question_and_keys_opaque() -> None:
    pairs = sample_pairs(_pool(), pairs_per_question=28, n_questions=2, seed=1)
    assert len(pairs) == 56
    for p in pairs:
        assert p.question_id in p.trajectory_a and p.question_id in p.trajectory_b
        assert p.trajectory_a < p.trajectory_b
        assert p.question_id not in p.pair_key and p.trajectory_a not in p.pair_key
    assert len({(p.trajectory_a, p.trajectory_b) for p in pairs}) == 56
    assert len({p.pair_key for p in pairs}) == 56


def test_excluded_questions_never_drawn() -> None:
    pool = _pool(n_questions=4)
    for seed in range(20):
        pairs = sample_pairs(
            pool, pairs_per_question=3, n_questions=2, seed=seed, excluded_questions=["q0", "q1"]
        )
        assert {p.question_id for p in pairs} == {"q2", "q3"}


@given(st.integers(2, 30))
def test_rank_inverts_unrank(m: int) -> None:
    for k in range(comb(m, 2)):
        i, j = unrank_pair(k, m)
        assert _rank_pair(i, j, m) == _rank_pair(j, i, m) == k


def test_excluded_pairs_are_never_drawn_again() -> None:
    """A re-draw excluding an earlier draw's pairs: disjoint, and a question with too few
    pairs left no longer qualifies; without exclusions the draw is unchanged."""
    pool = _pool(n_questions=3, m=6)  # 15 pairs per question
    first = sample_pairs(pool, pairs_per_question=10, n_questions=3, seed=2)
    same = sample_pairs(pool, pairs_per_question=10, n_questions=3, seed=2, excluded_pairs=[])
    assert same == first
    taken = [(p.trajectory_b, p.trajectory_a) for p in first]  # order does not matter
    again = sample_pairs(
        pool, pairs_per_question=5, n_questions=3, seed=attempt_seed(2, 2), excluded_pairs=taken
    )
    pairs = {frozenset((p.trajectory_a, p.trajectory_b)) for p in again}
    assert len(pairs) == 15 and not pairs & {frozenset(t) for t in taken}
    with pytest.raises(ValueError, match="only 0 of"):
        sample_pairs(pool, pairs_per_question=6, n_questions=1, seed=0, excluded_pairs=taken)


def test_attempt_seed() -> None:
    assert attempt_seed(7, 1) == 7
    seeds = {attempt_seed(7, k) for k in range(2, 12)}
    assert len(seeds) == 10 and 7 not in seeds
    assert attempt_seed(7, 2) == attempt_seed(7, 2) != attempt_seed(8, 2)


def test_plan_asking_for_too_much_is_refused() -> None:
    with pytest.raises(ValueError, match="asks for 7 question"):
        sample_pairs(_pool(), pairs_per_question=3, n_questions=7, seed=0)
    with pytest.raises(ValueError, match="at least 29 pairs"):
        sample_pairs(_pool(m=8), pairs_per_question=29, n_questions=1, seed=0)


def test_max_pairs_caps_the_total() -> None:
    pairs = sample_pairs(_pool(), pairs_per_question=10, n_questions=4, seed=3, max_pairs=15)
    assert len(pairs) == 15


def test_automatic_label() -> None:
    assert automatic_pair_label("m1", "m1") == "same"
    assert automatic_pair_label("m1", "m2") == "different"
    assert automatic_pair_label("m1", None) is None
    assert automatic_pair_label("uncertain", "m1") is None


@settings(max_examples=50)
@given(
    st.lists(
        st.tuples(
            st.sampled_from("abc"),
            st.text(min_size=1, max_size=5),
            st.one_of(st.none(), st.sampled_from(["x", "y"])),
        ),
        unique_by=lambda r: r[1],
        min_size=1,
        max_size=20,
    ),
    st.randoms(),
)
def test_partition_hash_ignores_order(rows, rnd) -> None:  # type: ignore[no-untyped-def]
    shuffled = list(rows)
    rnd.shuffle(shuffled)
    assert partition_hash(rows) == partition_hash(shuffled)
    changed = [(q, t, "z") if i == 0 else (q, t, m) for i, (q, t, m) in enumerate(rows)]
    assert partition_hash(changed) != partition_hash(rows)


def test_partition_hash_rejects_double_assignment() -> None:
    with pytest.raises(ValueError, match="assigned twice"):
        partition_hash([("q", "t", "a"), ("q", "t", "b")])


def test_floor_takes_from_each_question_what_it_can_give() -> None:
    """With ``min_pairs_per_question`` a question qualifies at the floor and gives all its
    pairs up to the cap; at most ``n_questions`` questions; fixed plans are unchanged."""
    pool = {f"q{m}": [f"q{m}-t{i}" for i in range(m)] for m in (1, 2, 3, 4, 6, 9)}
    pairs = sample_pairs(pool, pairs_per_question=10, n_questions=29, seed=3,
                         min_pairs_per_question=3)  # fmt: skip
    per_q = {q: sum(p.question_id == q for p in pairs) for q in pool}
    # C(m, 2): 0, 1, 3, 6, 15, 36 → q1 and q2 below the floor of 3, q6 and q9 capped at 10
    assert per_q == {"q1": 0, "q2": 0, "q3": 3, "q4": 6, "q6": 10, "q9": 10}
    two = sample_pairs(pool, pairs_per_question=10, n_questions=2, seed=3,
                       min_pairs_per_question=3)  # fmt: skip
    assert len({p.question_id for p in two}) == 2
    with pytest.raises(ValueError, match="no question has the floor of 40 pair"):
        sample_pairs(pool, pairs_per_question=50, n_questions=2, seed=3, min_pairs_per_question=40)
    with pytest.raises(ValueError, match="only 2 of 6 non-excluded question"):
        sample_pairs(pool, pairs_per_question=10, n_questions=3, seed=3)
