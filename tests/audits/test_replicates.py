"""Item 17 (several training seeds): the across-seed mean, between-seed SD and
hierarchical bootstrap interval against a plain-numpy loop written here, on generated
data, for each pooling."""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np
import pytest

from rcea.audits.replicates import across_seeds


def _pool(name: str, rows: list[list[float]]) -> float:
    """The seed-level estimate, one question at a time (plain Python)."""
    if name == "macro_mean":
        return sum(r[0] for r in rows) / len(rows)
    if name == "geometric_mean":
        return math.exp(sum(math.log(r[0]) for r in rows) / len(rows))
    if name == "median":
        return statistics.median(r[0] for r in rows)
    sums = [sum(r[j] for r in rows) for j in range(len(rows[0]))]
    if name == "ratio_of_sums":
        return sums[0] / sums[1] if sums[1] else math.nan
    return (sums[0] / sums[1]) / (sums[2] / sums[3]) if sums[1] and sums[3] else math.nan


def _loop_reference(
    per_seed: dict[int, Any], name: str, n_boot: int, seed: int, confidence: float
) -> dict[str, Any]:
    """The documented estimator as nested loops: seeds, then questions within seed."""
    ids = sorted(per_seed)
    rows = {s: np.asarray(per_seed[s], dtype=float).reshape(len(per_seed[s]), -1) for s in ids}
    thetas = [_pool(name, rows[s].tolist()) for s in ids]
    rng = np.random.default_rng(seed)
    drawn = rng.integers(0, len(ids), size=(n_boot, len(ids)))
    # the documented question draws: per seed, its slots in (b, k) order, 256 per draw
    picks: dict[tuple[int, int], Any] = {}
    for j in range(len(ids)):
        slots = [(b, k) for b in range(n_boot) for k in range(len(ids)) if drawn[b, k] == j]
        n_q = len(rows[ids[j]])
        for start in range(0, len(slots), 256):
            block = slots[start : start + 256]
            for slot, idx in zip(block, rng.integers(0, n_q, size=(len(block), n_q)), strict=True):
                picks[slot] = idx
    reps = []
    for b in range(n_boot):
        total = 0.0
        for k in range(len(ids)):
            data = rows[ids[drawn[b, k]]]
            total += _pool(name, [data[i].tolist() for i in picks[(b, k)]])
        reps.append(total / len(ids))
    finite = [r for r in reps if math.isfinite(r)]
    alpha = (1 - confidence) / 2
    return {
        "mean": sum(thetas) / len(thetas),
        "sd": statistics.stdev(thetas),
        "lo": float(np.quantile(finite, alpha)),
        "hi": float(np.quantile(finite, 1 - alpha)),
        "nonfinite": len(reps) - len(finite),
        "thetas": thetas,
    }


def _generated(name: str, gen: np.random.Generator) -> dict[int, Any]:
    """Three or four seeds with different question counts and a seed effect."""
    cols = {"ratio_of_sums": 2, "ratio_of_ratios": 4}.get(name, 1)
    out: dict[int, Any] = {}
    for s in gen.choice(100, size=int(gen.integers(3, 5)), replace=False):
        n = int(gen.integers(5, 15))
        shift = gen.normal(0, 0.3)
        if cols == 1:
            out[int(s)] = np.exp(gen.normal(shift, 0.5, size=n))
        else:
            out[int(s)] = gen.uniform(0.1, 2.0, size=(n, cols)) + abs(shift)
    return out


@pytest.mark.parametrize(
    "name", ["macro_mean", "geometric_mean", "median", "ratio_of_sums", "ratio_of_ratios"]
)
@pytest.mark.parametrize("case", range(3))
def test_matches_the_plain_loop(name: str, case: int) -> None:
    gen = np.random.default_rng(100 + case)
    per_seed = _generated(name, gen)
    got = across_seeds(per_seed, statistic=name, n_boot=300, seed=7 + case, confidence=0.9)
    ref = _loop_reference(per_seed, name, 300, 7 + case, 0.9)
    assert got.n_seeds == len(per_seed) and not got.single_seed
    assert [e.value for e in got.seeds] == pytest.approx(ref["thetas"], rel=1e-12)
    assert [e.train_seed for e in got.seeds] == sorted(per_seed)
    assert got.mean == pytest.approx(ref["mean"], rel=1e-12)
    assert got.between_seed_sd == pytest.approx(ref["sd"], rel=1e-12)
    assert got.ci_low == pytest.approx(ref["lo"], rel=1e-10)
    assert got.ci_high == pytest.approx(ref["hi"], rel=1e-10)
    assert got.n_boot_nonfinite == ref["nonfinite"]


def test_chunks_do_not_change_the_draws() -> None:
    """More replicates than one chunk: the interval is still the loop's."""
    per_seed = {1: [1.0, 2.0, 3.0], 2: [2.0, 5.0], 3: [0.5, 0.7, 0.9, 4.0]}
    got = across_seeds(per_seed, n_boot=700, seed=3)
    ref = _loop_reference(per_seed, "macro_mean", 700, 3, 0.95)
    assert (got.ci_low, got.ci_high) == pytest.approx((ref["lo"], ref["hi"]), rel=1e-12)


def test_the_interval_covers_the_seed_spread_not_only_question_noise() -> None:
    """Seeds far apart with little within-seed noise: the interval spans the seed means
    (a question-only bootstrap would be narrow around the pooled mean)."""
    gen = np.random.default_rng(0)
    per_seed = {s: s + gen.normal(0, 0.01, size=50) for s in range(5)}
    got = across_seeds(per_seed, n_boot=2000, seed=1)
    assert got.mean == pytest.approx(2.0, abs=0.01)
    assert got.between_seed_sd == pytest.approx(np.std(range(5), ddof=1), abs=0.01)
    assert got.ci_low is not None and got.ci_high is not None
    assert got.ci_low < 1.2 and got.ci_high > 2.8


def test_a_ratio_of_sums_is_pooled_not_averaged_and_its_bootstrap_keeps_a_constant_ratio() -> None:
    """Known truth. Seed 1's questions (a, b) = (1, 1), (6, 3): Σa/Σb = 7/4, not the mean
    of the per-question ratios (1.5). Seed 2's and 3's questions all have a/b = 2 and 3:
    every resample of them re-forms exactly 2 and 3, so the replicates are means of
    draws from {7/4 or a resample of seed 1, 2, 3} and stay within [1, 3]; M/T likewise."""
    per_seed = {1: [[1.0, 1.0], [6.0, 3.0]], 2: [[2.0, 1.0], [4.0, 2.0]], 3: [[3.0, 1.0]] * 3}
    got = across_seeds(per_seed, statistic="ratio_of_sums", n_boot=500, seed=2)
    assert [e.value for e in got.seeds] == [1.75, 2.0, 3.0]
    assert got.mean == pytest.approx((1.75 + 2 + 3) / 3)
    assert got.ci_low is not None and got.ci_high is not None
    assert 1.0 <= got.ci_low < got.mean < got.ci_high <= 3.0
    # M/T: (Σ a / Σ b) / (Σ c / Σ d) with the token shares 1/2 in every question
    rr = {s: [r + [1.0, 2.0] for r in rows] for s, rows in per_seed.items()}
    got = across_seeds(rr, statistic="ratio_of_ratios", n_boot=50, seed=2)
    assert [e.value for e in got.seeds] == [3.5, 4.0, 6.0]
    # a seed whose denominators are all zero has no estimate: listed, left out
    got = across_seeds(
        {1: [[1.0, 2.0]], 2: [[0.0, 0.0]], 3: [[3.0, 2.0]]}, statistic="ratio_of_sums"
    )
    assert [e.value for e in got.seeds] == [0.5, None, 1.5] and got.n_seeds == 2
    assert across_seeds({1: [[1.0, 2.0]], 2: []}, statistic="ratio_of_sums").n_seeds == 1


def test_one_seed_has_no_spread_and_no_interval() -> None:
    got = across_seeds({4: [0.2, 0.4]}, n_boot=100)
    assert got.single_seed and got.n_seeds == 1
    assert got.mean == pytest.approx(0.3)
    assert (got.between_seed_sd, got.ci_low, got.ci_high) == (None, None, None)
    assert got.to_dict()["seeds"] == [
        {"train_seed": 4, "value": pytest.approx(0.3), "n_questions": 2}
    ]


def test_a_seed_without_questions_is_listed_and_left_out() -> None:
    got = across_seeds({1: [1.0, 2.0], 2: np.empty(0), 3: [3.0]}, n_boot=50)
    assert [e.value for e in got.seeds] == [1.5, None, 3.0]
    assert got.n_seeds == 2 and got.mean == pytest.approx(2.25)


def test_the_same_seed_gives_the_same_interval() -> None:
    per_seed = {1: [1.0, 2.0, 3.0], 2: [2.0, 5.0]}
    a = across_seeds(per_seed, n_boot=200, seed=5)
    b = across_seeds(per_seed, n_boot=200, seed=5)
    c = across_seeds(per_seed, n_boot=200, seed=6)
    assert (a.ci_low, a.ci_high) == (b.ci_low, b.ci_high)
    assert (a.ci_low, a.ci_high) != (c.ci_low, c.ci_high)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"per_seed": {}}, "at least one"),
        ({"per_seed": {1: [1.0]}, "statistic": "harmonic_mean"}, "statistic must be"),
        ({"per_seed": {1: [[1.0, 2.0]]}, "statistic": "macro_mean"}, "training seed 1: expected 1"),
        ({"per_seed": {1: [1.0]}, "statistic": "ratio_of_sums"}, "expected 2"),
        ({"per_seed": {2: [1.0, math.nan]}}, "training seed 2: .*finite"),
        ({"per_seed": {1: [1.0, 0.0]}, "statistic": "geometric_mean"}, "positive"),
        ({"per_seed": {1: [1.0]}, "n_boot": 0}, "n_boot"),
        ({"per_seed": {1: [1.0]}, "confidence": 1.0}, "confidence"),
    ],
)
def test_bad_input_is_one_clear_error(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        across_seeds(**kwargs)
