"""rcea.audits.realization (docs/estimators.md item 15) against a plain-numpy computation
written here, property tests of the chain rule and the mixture identity, and a constructed
study whose within-mode entropies are known."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rcea.audits.realization import realization_retention, within_mode_entropy


def _reference(qids, in_c, modes, ell, h, k_min):  # type: ignore[no-untyped-def]
    """Item 15 by its definition, question by question (no shared code)."""
    out = {}
    for q in sorted(set(qids)):
        rows = [i for i, x in enumerate(qids) if x == q]
        c = [i for i in rows if in_c[i] and modes[i] != "uncertain"]
        if not c:
            continue
        k, kc = len(rows), len(c)
        by = {}
        for i in c:
            by.setdefault(modes[i], []).append(i)
        qz = {z: len(v) / kc for z, v in by.items()}
        hz = {z: -np.mean([ell[i] for i in v]) + math.log(len(v) / k) for z, v in by.items()}
        out[q] = {
            "eligible": kc >= k_min,
            "H_YC": -np.mean([ell[i] for i in c]) + math.log(kc / k),
            "H_Z": -sum(p * math.log(p) for p in qz.values()),
            "W": sum(qz[z] * hz[z] for z in by),
            "tok": np.mean([h[i] for i in c]),
            "W_tok": sum(qz[z] * np.mean([h[i] for i in by[z]]) for z in by),
        }
    return out


def _random_checkpoint(rng: np.random.Generator, n_q: int = 12, k: int = 16):  # type: ignore[no-untyped-def]
    qids = np.repeat(np.arange(n_q), k).tolist()
    in_c = (rng.random(n_q * k) < 0.6).astype(int).tolist()
    modes = rng.choice(["a", "b", "c", "uncertain"], size=n_q * k, p=[0.5, 0.3, 0.15, 0.05])
    ell = (-rng.gamma(4.0, 6.0, size=n_q * k)).tolist()
    h = rng.gamma(2.0, 0.3, size=n_q * k).tolist()
    return qids, in_c, modes.tolist(), ell, h


def test_matches_the_definition_question_by_question() -> None:
    rng = np.random.default_rng(7)
    qids, in_c, modes, ell, h = _random_checkpoint(rng)
    rep = within_mode_entropy(qids, in_c, modes, ell, h, k_min=6)
    ref = _reference(qids, in_c, modes, ell, h, 6)
    rows = {r.question_id: r for r in rep.questions if r.k_c}
    assert set(rows) == set(ref)
    for q, r in rows.items():
        e = ref[q]
        assert r.eligible == e["eligible"]
        assert r.sequence_entropy == pytest.approx(e["H_YC"], rel=1e-12)
        assert r.mode_entropy == pytest.approx(e["H_Z"], rel=1e-12, abs=1e-15)
        assert r.within_mode_entropy == pytest.approx(e["W"], rel=1e-12)
        assert r.token_entropy == pytest.approx(e["tok"], rel=1e-12)
        assert r.within_mode_token_entropy == pytest.approx(e["W_tok"], rel=1e-12)
    eligible = [e for e in ref.values() if e["eligible"]]
    assert rep.n_eligible == len(eligible) and rep.coverage == len(eligible) / len(ref)
    assert rep.within_mode_entropy == pytest.approx(np.mean([e["W"] for e in eligible]))
    assert rep.mode_entropy == pytest.approx(np.mean([e["H_Z"] for e in eligible]))
    assert rep.decomposition_residual < 1e-9 and rep.token_mixture_residual < 1e-12


@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(2, 24))
def test_chain_rule_and_mixture_hold_for_any_sample(seed: int, n_q: int, k: int) -> None:
    qids, in_c, modes, ell, h = _random_checkpoint(np.random.default_rng(seed), n_q, k)
    rep = within_mode_entropy(qids, in_c, modes, ell, h, k_min=1)
    for r in rep.questions:
        if r.k_c:
            scale = max(1.0, abs(r.sequence_entropy))
            assert abs(r.decomposition_residual) <= 1e-12 * scale
            assert abs(r.token_mixture_residual) <= 1e-12 * max(1.0, r.token_entropy)
            assert r.mode_entropy <= math.log(r.n_modes) + 1e-12


def _constructed(wordings: dict[str, int], k: int = 32):  # type: ignore[no-untyped-def]
    """k samples of one question, all accepted successes, modes of equal share; mode z is
    worded in ``wordings[z]`` equally likely ways, so π(y) = q(z)/m_z and the true
    within-mode realization entropy is Σ_z q(z) log m_z."""
    n_modes = len(wordings)
    modes = [z for z in wordings for _ in range(k // n_modes)]
    ell = [math.log((1 / n_modes) / wordings[z]) for z in modes]
    return [0] * k, [1] * k, modes, ell, [0.5] * k


def test_a_constructed_study_recovers_its_wording_entropies() -> None:
    base = within_mode_entropy(*_constructed({"a": 4, "b": 16}), k_min=8)
    (q,) = base.questions
    assert q.mode_entropy == pytest.approx(math.log(2))
    assert q.modes["a"].entropy == pytest.approx(math.log(4))
    assert q.modes["b"].entropy == pytest.approx(math.log(16))
    assert q.within_mode_entropy == pytest.approx(0.5 * math.log(4) + 0.5 * math.log(16))
    # RLVR that removes wording but keeps both strategies: W falls, the mode entropy stays
    trained = within_mode_entropy(*_constructed({"a": 1, "b": 4}), k_min=8)
    assert trained.mode_entropy == pytest.approx(base.mode_entropy)
    ret = realization_retention(trained, base)
    assert ret.retention == pytest.approx(
        (0.5 * math.log(4)) / (0.5 * math.log(4) + 0.5 * math.log(16))
    )
    assert ret.n_eligible == 1 and ret.excluded_zero_base == []


def test_gate_share_in_repeated_modes_and_zero_base() -> None:
    # question 0: 3 accepted in modes a, a, b (k_min 3 → eligible; 2 of 3 in a repeated mode)
    # question 1: 2 accepted (not eligible); question 2: no success
    qids = [0, 0, 0, 0, 1, 1, 1, 2, 2]
    in_c = [1, 1, 1, 0, 1, 1, 0, 0, 0]
    modes = ["a", "a", "b", None, "a", "uncertain", None, None, None]
    ell = [-3.0, -3.0, -2.0, -9.0, -1.0, -1.0, -5.0, -4.0, -4.0]
    h = [0.2] * 9
    rep = within_mode_entropy(qids, in_c, modes, ell, h, k_min=3)
    assert (rep.n_questions, rep.n_with_successes, rep.n_eligible) == (3, 2, 1)
    assert rep.coverage == 0.5 and rep.share_in_repeated_modes == pytest.approx(2 / 3)
    assert rep.questions[1].k_c == 1  # the uncertain one is left out of C
    zero = realization_retention({0: 1.0, 1: 2.0}, {0: 0.0, 1: 1.0})
    assert zero.excluded_zero_base == [0] and zero.retention == 2.0


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"seq_logprobs": [0.5]}, "must be ≤ 0"),
        ({"in_c": [2]}, "only 0 and 1"),
        ({"modes": [None]}, r"modes\[0\]"),
        ({"mean_token_entropy": [0.1, 0.2]}, "length mismatch"),
    ],
)
def test_bad_inputs_say_what_is_wrong(kw: dict, match: str) -> None:  # type: ignore[type-arg]
    args = {
        "question_ids": [0],
        "in_c": [1],
        "modes": ["a"],
        "seq_logprobs": [-1.0],
        "mean_token_entropy": [0.1],
    }
    with pytest.raises(ValueError, match=match):
        within_mode_entropy(**{**args, **kw})
