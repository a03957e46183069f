"""Seeded, reproducible within-question pair sampling for the partition audit, and the
automatic pair label of docs/estimators.md item 10."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from math import comb
from typing import Any

import numpy as np

SAME = "same"
DIFFERENT = "different"
UNCERTAIN_MODES = (None, "uncertain")


@dataclass(frozen=True)
class SampledPair:
    """One within-question pair; ``pair_key`` is opaque (random, not derived from ids)."""

    pair_key: str
    question_id: str
    trajectory_a: str
    trajectory_b: str


def automatic_pair_label(mode_a: str | None, mode_b: str | None) -> str | None:
    """``same`` iff both trajectories carry the same mode of the locked partition;
    ``None`` (no automatic label) when either is uncertain."""
    if mode_a in UNCERTAIN_MODES or mode_b in UNCERTAIN_MODES:
        return None
    return SAME if mode_a == mode_b else DIFFERENT


def unrank_pair(index: int, m: int) -> tuple[int, int]:
    """Map 0 <= index < C(m, 2) to the pair (i, j), i < j, in lexicographic order."""
    i = 0
    remaining = index
    while remaining >= m - 1 - i:
        remaining -= m - 1 - i
        i += 1
    return i, i + 1 + remaining


def attempt_seed(seed: int, attempt: int) -> int:
    """The sampling seed of attempt ``attempt``: the rubric's seed for the first, else a
    hash of seed and attempt (a re-draw never repeats the first draw's order): the first
    8 hex digits of SHA-256("rcea-attempt\\0SEED\\0ATTEMPT") modulo 2³¹ − 1."""
    if attempt <= 1:
        return int(seed)
    digest = hashlib.sha256(f"rcea-attempt\x00{seed}\x00{attempt}".encode()).hexdigest()
    return int(digest[:8], 16) % (2**31 - 1)


#: trajectories an accepted-set check draws unless told otherwise: the one value the CLI's
#: ``--size``, ``rcea status``, the rubric's sizing (which leaves this many judge-accepted
#: successes outside the calibration) and docs/how-to-verl.md use (at 0.93 precision its
#: lower 95% Clopper-Pearson bound is about 0.86, above the 0.80 default threshold)
ACCEPTED_CHECK_SIZE = 100


def balanced_split(n: int, n_accepted: int, n_not_accepted: int) -> tuple[int, int]:
    """How many judge-accepted and not-accepted items a calibration of ``n`` items draws
    from strata of these sizes: half each, the other stratum filling in when one is short
    (docs/validity-audit.md; ``rcea judge calibrate sample`` and the rubric's sizing)."""
    take_acc = min(n_accepted, n // 2)
    take_rej = min(n_not_accepted, n - take_acc)
    return min(n_accepted, n - take_rej), take_rej


def _rank_pair(i: int, j: int, m: int) -> int:
    """The inverse of :func:`unrank_pair` (i ≠ j in any order)."""
    i, j = min(i, j), max(i, j)
    return i * (m - 1) - i * (i - 1) // 2 + (j - i - 1)


def sample_pairs(
    trajectories_by_question: Mapping[str, Sequence[str]],
    *,
    pairs_per_question: int,
    n_questions: int,
    seed: int,
    excluded_questions: Sequence[str] = (),
    max_pairs: int | None = None,
    min_pairs_per_question: int | None = None,
    excluded_pairs: Collection[tuple[str, str]] = (),
) -> list[SampledPair]:
    """Draw ``n_questions`` questions, then ``pairs_per_question`` distinct unordered pairs
    of trajectories within each, without replacement; optionally cap the total.

    Questions in ``excluded_questions`` (those used to develop codebook prompts) are never
    drawn. Only questions with at least C(m, 2) >= ``pairs_per_question`` pairs qualify;
    asking for more qualifying questions than exist raises ``ValueError`` naming the
    shortfall. With ``min_pairs_per_question`` (a floor) a question qualifies with at
    least the floor's pairs and gives min(its pairs, ``pairs_per_question``) pairs, and at
    most ``n_questions`` qualifying questions are drawn (all of them when fewer; none
    qualifying raises ``ValueError``). Same inputs and seed → same pairs and keys (order
    of the mapping and of trajectories inside it does not matter: both are sorted first).

    ``excluded_pairs`` (unordered trajectory pairs, e.g. an earlier audit's) are never
    drawn again: a question's pairs are C(m, 2) minus its excluded pairs, it qualifies
    when those still meet the plan (or the floor), and its pairs are drawn from the rest
    (without exclusions the draw is exactly the one above).
    """
    if pairs_per_question < 1 or n_questions < 1:
        raise ValueError("pairs_per_question and n_questions must be >= 1")
    if max_pairs is not None and max_pairs < 1:
        raise ValueError(f"max_pairs must be >= 1, got {max_pairs}")
    if min_pairs_per_question is not None and min_pairs_per_question < 1:
        raise ValueError(f"min_pairs_per_question must be >= 1, got {min_pairs_per_question}")
    excluded = set(excluded_questions)
    pool = {q: sorted(set(ts)) for q, ts in trajectories_by_question.items() if q not in excluded}
    seen = {tuple(sorted(p)) for p in excluded_pairs}
    taken: dict[str, np.ndarray[Any, Any]] = {}
    for q, ts in pool.items():
        where = {t: k for k, t in enumerate(ts)}
        ranks = [
            _rank_pair(where[a], where[b], len(ts))
            for a, b in seen
            if a in where and b in where and a != b
        ]
        if ranks:
            taken[q] = np.unique(np.array(ranks, dtype=np.int64))

    def available(q: str) -> int:
        return comb(len(pool[q]), 2) - len(taken.get(q, ()))

    floor = pairs_per_question if min_pairs_per_question is None else min_pairs_per_question
    qualifying = sorted(q for q in pool if available(q) >= floor)
    if min_pairs_per_question is not None:
        if not qualifying:
            raise ValueError(
                f"no question has the floor of {floor} pair(s) (of {len(pool)} "
                f"non-excluded question(s), {len(excluded)} excluded); lower "
                "min_pairs_per_question in the rubric"
            )
        n_questions = min(n_questions, len(qualifying))
    if len(qualifying) < n_questions:
        raise ValueError(
            f"the pair plan asks for {n_questions} question(s) with at least "
            f"{pairs_per_question} pairs each, but only {len(qualifying)} of "
            f"{len(pool)} non-excluded question(s) qualify ({len(excluded)} excluded); "
            "lower pairs_per_question or n_questions in the rubric, or write a plan that "
            "takes from each question what it can give (`rcea audit rubric init`)"
        )
    rng = np.random.default_rng(seed)
    chosen = sorted(
        rng.choice(np.array(qualifying, dtype=object), size=n_questions, replace=False).tolist()
    )
    pairs: list[tuple[str, str, str]] = []
    for q in chosen:
        ts = pool[q]
        total = comb(len(ts), 2)
        size = min(available(q), pairs_per_question)
        if q in taken:  # only pairs no earlier draw holds
            rest = np.setdiff1d(np.arange(total, dtype=np.int64), taken[q])
            picks = np.sort(rng.choice(rest, size=size, replace=False))
        else:
            picks = np.sort(rng.choice(total, size=size, replace=False))
        for idx in picks.tolist():
            i, j = unrank_pair(int(idx), len(ts))
            pairs.append((q, ts[i], ts[j]))
    if max_pairs is not None and len(pairs) > max_pairs:
        keep = np.sort(rng.choice(len(pairs), size=max_pairs, replace=False))
        pairs = [pairs[k] for k in keep.tolist()]
    keys: set[str] = set()
    out: list[SampledPair] = []
    for q, a, b in pairs:
        key = f"p{int(rng.integers(0, 2**62)):016x}"
        while key in keys:
            key = f"p{int(rng.integers(0, 2**62)):016x}"
        keys.add(key)
        out.append(SampledPair(key, q, a, b))
    return out
