"""Tests for rcea.audits.covariance (docs/estimators.md item 6) against independent references."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import special, stats

from rcea.audits.covariance import (
    DEFAULT_MAX_CHUNK_BYTES,
    FIT_SUMMARY,
    N_WORK_BUFFERS,
    aggregate_transitions,
    covariance_fit,
    covariance_fit_by_group,
    entropy_change_pair,
    observed_entropy_change,
    plan_chunk_rows,
    predicted_entropy_change,
)


def _logits(n: int, vocab: int, seed: int = 0, scale: float = 3.0) -> np.ndarray:
    return np.random.default_rng(seed).normal(scale=scale, size=(n, vocab))


def _reference(z: np.ndarray, z_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row by row: weighted covariance via np.cov(aweights=π) and scipy entropies."""
    pred, obs = [], []
    for row, row_new in zip(z, z_new, strict=True):
        p = special.softmax(row)
        log_p = special.log_softmax(row)
        cov = np.cov(log_p, row_new - row, aweights=p, bias=True)[0, 1]
        pred.append(-cov)
        obs.append(stats.entropy(special.softmax(row_new)) - stats.entropy(p))
    return np.array(pred), np.array(obs)


# ----------------------------------------------------------------------------- kernels


def test_matches_direct_formula_small_vocab() -> None:
    z = _logits(9, 13, seed=1)
    z_new = z + _logits(9, 13, seed=2, scale=0.3)
    ref_pred, ref_obs = _reference(z, z_new)
    np.testing.assert_allclose(predicted_entropy_change(z, z_new), ref_pred, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(observed_entropy_change(z, z_new), ref_obs, rtol=1e-10, atol=1e-13)
    pair = entropy_change_pair(z, z_new)
    np.testing.assert_allclose(pair.predicted, ref_pred, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(pair.observed, ref_obs, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(pair.entropy_old, [stats.entropy(special.softmax(r)) for r in z])


def test_pair_equals_separate_kernels() -> None:
    z = _logits(11, 40, seed=3).astype(np.float32)
    z_new = (z + _logits(11, 40, seed=4, scale=0.1)).astype(np.float32)
    pair = entropy_change_pair(z, z_new, chunk_size=4)
    np.testing.assert_array_equal(pair.predicted, predicted_entropy_change(z, z_new, chunk_size=4))
    np.testing.assert_allclose(
        pair.observed, observed_entropy_change(z, z_new, chunk_size=4), rtol=0, atol=1e-15
    )


def test_finite_difference_first_order() -> None:
    """H(softmax(z + εΔz)) − H(softmax z) ≈ ε · predicted(Δz): ratio → 1 as ε → 0."""
    z = _logits(5, 30, seed=5)
    dz = _logits(5, 30, seed=6, scale=1.0)
    slope = predicted_entropy_change(z, z + dz)  # exactly linear in Δz
    errors = []
    for eps in (1e-1, 1e-2, 1e-3, 1e-4):
        actual = observed_entropy_change(z, z + eps * dz)
        np.testing.assert_allclose(
            predicted_entropy_change(z, z + eps * dz), eps * slope, rtol=1e-8
        )
        errors.append(np.max(np.abs(actual / (eps * slope) - 1.0)))
    assert errors[-1] < 1e-3
    assert all(later < earlier for earlier, later in zip(errors, errors[1:], strict=False))
    # second-order error: shrinking ε by 10 shrinks the relative error roughly 10-fold
    assert errors[-1] < errors[-2] / 5


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("vocab", [1, 7, 37, 64])
def test_chunking_invariance(dtype: type, vocab: int) -> None:
    z = _logits(23, vocab, seed=7).astype(dtype)
    z_new = (z + _logits(23, vocab, seed=8, scale=0.2)).astype(dtype)
    base = entropy_change_pair(z, z_new, chunk_size=23)
    for chunk in (1, 2, 5, 22, 100):
        other = entropy_change_pair(z, z_new, chunk_size=chunk)
        np.testing.assert_array_equal(other.predicted, base.predicted)
        np.testing.assert_array_equal(other.observed, base.observed)
        np.testing.assert_array_equal(
            predicted_entropy_change(z, z_new, chunk_size=chunk), base.predicted
        )
        np.testing.assert_array_equal(
            observed_entropy_change(z, z_new, chunk_size=chunk), base.observed
        )
    by_bytes = entropy_change_pair(z, z_new, max_chunk_bytes=3 * 8 * vocab)
    np.testing.assert_array_equal(by_bytes.predicted, base.predicted)


def test_vocab_one_is_zero() -> None:
    pair = entropy_change_pair(np.zeros((3, 1)), np.ones((3, 1)))
    np.testing.assert_array_equal(pair.predicted, 0.0)
    np.testing.assert_array_equal(pair.observed, 0.0)


def test_numerically_stable_for_large_logits() -> None:
    z = _logits(4, 50, seed=9)
    z_new = z + _logits(4, 50, seed=10, scale=0.1)
    base = entropy_change_pair(z, z_new)
    shifted = entropy_change_pair(z + 5e3, z_new - 7e3)  # per-row constants cancel
    np.testing.assert_allclose(shifted.predicted, base.predicted, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(shifted.observed, base.observed, rtol=1e-9, atol=1e-12)
    wide = np.array([[1000.0, 0.0, -1000.0]])
    out = entropy_change_pair(wide, wide * 0.5)
    assert np.all(np.isfinite(out.predicted)) and np.all(np.isfinite(out.observed))


def test_predicted_sign_convention() -> None:
    """Raising the logit of the most likely token lowers entropy (positive covariance)."""
    z = np.array([[2.0, 1.0, 0.0, -1.0]])
    dz = np.array([[0.1, 0.0, 0.0, 0.0]])
    assert predicted_entropy_change(z, z + dz)[0] < 0
    assert observed_entropy_change(z, z + dz)[0] < 0


def test_torch_input_matches_numpy() -> None:
    torch = pytest.importorskip("torch")
    z = _logits(6, 21, seed=11).astype(np.float32)
    z_new = (z + _logits(6, 21, seed=12, scale=0.2)).astype(np.float32)
    ref = entropy_change_pair(z, z_new, chunk_size=4)
    got = entropy_change_pair(torch.from_numpy(z), torch.from_numpy(z_new), chunk_size=4)
    np.testing.assert_array_equal(got.predicted, ref.predicted)
    np.testing.assert_array_equal(got.observed, ref.observed)
    np.testing.assert_array_equal(
        predicted_entropy_change(torch.from_numpy(z), torch.from_numpy(z_new)), ref.predicted
    )


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("which", ["old", "new"])
def test_non_finite_logits_raise(bad: float, which: str) -> None:
    z = _logits(5, 8, seed=13)
    z_new = z + 0.1
    target = z if which == "old" else z_new
    target[3, 2] = bad
    for kernel in (predicted_entropy_change, observed_entropy_change, entropy_change_pair):
        with pytest.raises(ValueError, match="position 3"):
            kernel(z, z_new, chunk_size=2)


def test_bad_inputs_raise() -> None:
    z = np.zeros((3, 4))
    with pytest.raises(ValueError, match="same shape"):
        entropy_change_pair(z, np.zeros((3, 5)))
    with pytest.raises(ValueError, match="2-D"):
        entropy_change_pair(np.zeros(4), np.zeros(4))
    with pytest.raises(ValueError, match="real numbers"):
        predicted_entropy_change(z.astype(bool), z.astype(bool))
    with pytest.raises(ValueError, match="at least one position"):
        observed_entropy_change(np.zeros((0, 4)), np.zeros((0, 4)))
    with pytest.raises(ValueError, match="chunk_size"):
        entropy_change_pair(z, z, chunk_size=0)
    with pytest.raises(ValueError, match="max_chunk_bytes"):
        entropy_change_pair(z, z, max_chunk_bytes=0)


# ----------------------------------------------------------------------------- memory


def test_chunk_plan_respects_budget() -> None:
    vocab = 152_064
    rows = plan_chunk_rows(vocab)
    assert rows * vocab * 8 <= DEFAULT_MAX_CHUNK_BYTES
    assert N_WORK_BUFFERS * rows * vocab * 8 <= 256 * 1024 * 1024
    assert (rows + 1) * vocab * 8 > DEFAULT_MAX_CHUNK_BYTES - 8 * 8 * rows  # not wastefully small
    assert plan_chunk_rows(vocab, max_chunk_bytes=1) == 1
    assert plan_chunk_rows(vocab, chunk_size=3) == 3
    z = np.zeros((2, 16), dtype=np.float32)
    assert entropy_change_pair(z, z, max_chunk_bytes=8 * 16).chunk_rows == 1
    assert entropy_change_pair(z, z).chunk_rows == 2  # never more rows than positions


def _peak_extra_bytes(kernel, z: np.ndarray, z_new: np.ndarray, **kwargs) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        kernel(z, z_new, **kwargs)
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    ("kernel", "buffers"),
    [(entropy_change_pair, 4), (predicted_entropy_change, 3), (observed_entropy_change, 2)],
)
def test_peak_memory_bounded_and_independent_of_positions(kernel, buffers: int) -> None:
    vocab, rows = 2_000, 4
    budget = rows * vocab * 8
    peaks = []
    for n in (64, 512):
        z = _logits(n, vocab, seed=14).astype(np.float32)
        z_new = z + np.float32(0.01)
        peak = _peak_extra_bytes(kernel, z, z_new, max_chunk_bytes=budget)
        # working buffers + O(positions) outputs + fixed-size temporaries (numpy's
        # 8192-element casting buffers)
        assert peak <= buffers * budget + 6 * 8 * n + 128 * 1024, (n, peak)
        peaks.append(peak)
    # 8x the positions: the float64 copy of the inputs alone would be 8 MB; growth must
    # stay at the O(positions) output level
    assert peaks[1] - peaks[0] <= 6 * 8 * 512 + 16 * 1024


# ----------------------------------------------------------------------------- fit


def _fit_data(n: int = 30, seed: int = 15) -> tuple[list[str], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    pred = rng.normal(scale=0.01, size=n)
    obs = 0.95 * pred + rng.normal(scale=0.002, size=n)
    return [f"t{i}" for i in range(n)], pred, obs


def test_fit_matches_scipy() -> None:
    labels, pred, obs = _fit_data()
    obs[4] = 0.0
    fit = covariance_fit(labels, pred, obs)
    sp = stats.spearmanr(pred, obs)
    pe = stats.pearsonr(pred, obs)
    lr = stats.linregress(pred, obs)
    assert fit.n == 30
    assert fit.spearman_rho == pytest.approx(sp.statistic, rel=1e-12)
    assert fit.spearman_p == pytest.approx(sp.pvalue, rel=1e-8)
    assert fit.pearson_r == pytest.approx(pe.statistic, rel=1e-12)
    assert fit.pearson_p == pytest.approx(pe.pvalue, rel=1e-6)
    assert fit.slope == pytest.approx(lr.slope, rel=1e-12)
    assert fit.intercept == pytest.approx(lr.intercept, rel=1e-9, abs=1e-15)
    assert fit.r_squared == pytest.approx(lr.rvalue**2, rel=1e-12)
    assert fit.sign_agreement == pytest.approx(np.mean(np.sign(pred) == np.sign(obs)))
    assert fit.median_abs_error == pytest.approx(np.median(np.abs(pred - obs)))
    keep = np.arange(30) != 4
    rel = np.abs(pred[keep] - obs[keep]) / np.abs(obs[keep])
    assert fit.median_relative_error == pytest.approx(np.median(rel))
    assert (fit.n_relative_error, fit.n_zero_observed) == (29, 1)
    d = fit.to_dict()
    assert d["slope"] == fit.slope and d["transitions"][0] == "t0"


def test_fit_excludes_failed_runs_and_lists_them() -> None:
    labels, pred, obs = _fit_data(12)
    runs = ["grpo"] * 6 + ["clipcov"] * 6
    pred[6:] = -pred[6:]  # the failed run would wreck the fit
    fit = covariance_fit(labels, pred, obs, runs=runs, excluded_runs=["clipcov"])
    ref = covariance_fit(labels[:6], pred[:6], obs[:6])
    assert fit.n == 6
    assert fit.excluded_runs == ("clipcov",)
    assert fit.excluded_transitions == tuple(labels[6:])
    assert fit.slope == ref.slope and fit.pearson_r == ref.pearson_r
    with pytest.raises(ValueError, match="runs is None"):
        covariance_fit(labels, pred, obs, excluded_runs=["clipcov"])


def test_fit_undefined_cases() -> None:
    one = covariance_fit(["t0"], [0.01], [0.02])
    assert one.n == 1 and one.sign_agreement == 1.0
    assert one.spearman_rho is None and one.pearson_r is None and one.slope is None
    assert one.median_relative_error == pytest.approx(0.5)
    const = covariance_fit(["a", "b", "c"], [0.01, 0.01, 0.01], [0.0, 0.0, 0.0])
    assert const.pearson_r is None and const.spearman_rho is None and const.slope is None
    assert const.median_relative_error is None and const.n_zero_observed == 3
    empty = covariance_fit(["a"], [1.0], [1.0], runs=["x"], excluded_runs=["x"])
    assert empty.n == 0 and empty.sign_agreement is None and empty.median_abs_error is None
    with pytest.raises(ValueError, match="duplicated"):
        covariance_fit(["a", "a"], [1.0, 2.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="length mismatch"):
        covariance_fit(["a", "b"], [1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="non-finite"):
        covariance_fit(["a", "b"], [1.0, np.nan], [1.0, 2.0])


def test_aggregate_transitions() -> None:
    rng = np.random.default_rng(16)
    labels = rng.choice(["b", "a", "c"], size=50)
    pred, obs = rng.normal(size=50), rng.normal(size=50)
    table = aggregate_transitions(labels, pred, obs)
    first_seen = list(dict.fromkeys(labels.tolist()))
    assert table.transitions == tuple(first_seen)
    for t, p, o, n in zip(
        table.transitions, table.predicted, table.observed, table.n_positions, strict=True
    ):
        mask = labels == t
        assert n == mask.sum()
        assert p == pytest.approx(pred[mask].mean())
        assert o == pytest.approx(obs[mask].mean())
    fit = covariance_fit(table.transitions, table.predicted, table.observed)
    assert fit.n == 3


def test_fit_by_group_pooled_and_per_group() -> None:
    labels, pred, obs = _fit_data(20)
    groups = ["3B"] * 12 + ["7B"] * 8
    runs = ["grpo"] * 6 + ["dapo"] * 6 + ["grpo7"] * 4 + ["clipcov7"] * 4
    res = covariance_fit_by_group(groups, labels, pred, obs, runs=runs, excluded_runs=["clipcov7"])
    keep = np.array([r != "clipcov7" for r in runs])
    pooled_ref = covariance_fit(np.array(labels)[keep].tolist(), pred[keep], obs[keep])
    assert res.pooled.n == 16 and res.pooled.slope == pytest.approx(pooled_ref.slope)
    assert list(res.groups) == ["3B", "7B"]
    assert res.groups["3B"].n == 12 and res.groups["3B"].excluded_transitions == ()
    assert res.groups["7B"].n == 4 and len(res.groups["7B"].excluded_transitions) == 4
    ref_7b = covariance_fit(labels[12:16], pred[12:16], obs[12:16])
    assert res.groups["7B"].pearson_r == pytest.approx(ref_7b.pearson_r)
    assert set(res.to_dict()) == {"pooled", "groups"}


@settings(max_examples=40, deadline=None)
@given(
    hnp.arrays(np.float64, st.integers(1, 12), elements=st.floats(-1, 1, allow_subnormal=False)),
    st.randoms(use_true_random=False),
)
def test_fit_permutation_invariant(pred: np.ndarray, rnd) -> None:
    obs = 0.5 * pred + 0.01 * np.cos(np.arange(pred.size))
    labels = [f"t{i}" for i in range(pred.size)]
    order = list(range(pred.size))
    rnd.shuffle(order)
    a = covariance_fit(labels, pred, obs)
    b = covariance_fit([labels[i] for i in order], pred[order], obs[order])
    for key in ("sign_agreement", "median_abs_error", "median_relative_error", "spearman_rho"):
        va, vb = getattr(a, key), getattr(b, key)
        assert (va is None and vb is None) or va == pytest.approx(vb, abs=1e-12)


def test_fit_summary_names_statistics_of_the_fit() -> None:
    """The one list of summary statistics the report, its HTML page and ``rcea stats
    covfit`` show: each is a statistic of the fit (a number on a fitted sample)."""
    rng = np.random.default_rng(0)
    pred = rng.normal(size=12)
    fit = covariance_fit([f"t{i}" for i in range(12)], pred, pred + rng.normal(size=12)).to_dict()
    assert len(set(FIT_SUMMARY)) == len(FIT_SUMMARY)
    assert all(isinstance(fit[name], float) for name in FIT_SUMMARY)
