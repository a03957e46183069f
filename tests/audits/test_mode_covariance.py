"""Item 6's covariance fit by mode group (rcea.audits.mode_covariance, docs/estimators.md
item 16) against a plain-numpy computation written here, and on a constructed set of
transitions where the majority mode carries all of the entropy change."""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pytest
from scipy import stats

from rcea.audits.mode_covariance import (
    MODE_GROUPS,
    majority_modes,
    mode_covariance_fit,
    trajectory_groups,
)
from rcea.audits.mode_tail import mode_stratified_tail


def _plain_majority(questions, in_c, modes):  # type: ignore[no-untyped-def]
    """maj(x): the most frequent mode among C's trajectories, ties by sorted label."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for q, c, z in zip(questions, in_c, modes, strict=True):
        if c and z not in (None, "uncertain"):
            counts[q][z] += 1
    return {
        q: sorted(cnt.items(), key=lambda kv: (-kv[1], kv[0]))[0][0] for q, cnt in counts.items()
    }


def _rows(seed: int = 0, n_transitions: int = 7):  # type: ignore[no-untyped-def]
    """Random (transition, trajectory) rows: 2 runs, 2 models, 3 questions × 6 trajectories."""
    rng = np.random.default_rng(seed)
    rows = []
    for t in range(n_transitions):
        run, model = f"r{t % 2}", f"m{t % 3 == 0}"
        for q in range(3):
            for _k in range(6):
                reward = int(rng.random() < 0.6)
                in_c = int(reward and rng.random() < 0.9)
                mode = str(rng.choice(["a", "b", "c", "uncertain"], p=[0.5, 0.3, 0.15, 0.05]))
                n_pos = int(rng.integers(0, 5))
                pred = rng.normal(0.01 * (t - 3), 0.01, size=n_pos)
                rows.append(
                    {
                        "transition": f"T{t}",
                        "run": run,
                        "model": model,
                        "question": f"q{t}-{q}",
                        "in_c": in_c,
                        "mode": mode,
                        "n": n_pos,
                        "pred": float(pred.sum()),
                        "obs": float((0.7 * pred + rng.normal(0, 0.003, size=n_pos)).sum()),
                    }
                )
    return rows


def test_majority_modes_is_item_16s_rule() -> None:
    rows = _rows(1)
    qs = [r["question"] for r in rows]
    c = [r["in_c"] for r in rows]
    z = [r["mode"] for r in rows]
    got = majority_modes(qs, c, z)
    assert got == _plain_majority(qs, c, z)
    # the same rule as the tail's (mode_tail._majority_membership)
    tail = mode_stratified_tail(
        qs, [1] * len(rows), c, z, np.arange(len(rows)), -np.ones(len(rows))
    )
    assert got == tail.majority_modes


def test_fit_by_group_equals_a_plain_numpy_computation() -> None:
    rows = _rows(2)
    maj = _plain_majority([r["question"] for r in rows], [r["in_c"] for r in rows],
                          [r["mode"] for r in rows])  # fmt: skip
    groups = trajectory_groups(
        [r["question"] for r in rows], [r["in_c"] for r in rows], [r["mode"] for r in rows], maj
    )
    res = mode_covariance_fit(
        [r["transition"] for r in rows],
        groups,
        [r["n"] for r in rows],
        [r["pred"] for r in rows],
        [r["obs"] for r in rows],
        runs=[r["run"] for r in rows],
        models=[r["model"] for r in rows],
        excluded_runs=["r1"],
    )
    for g in MODE_GROUPS:
        # the plain computation: group of each row, then position-weighted means
        sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        for r in rows:
            inside = r["in_c"] and r["mode"] != "uncertain"
            mine = (
                "outside_c"
                if not inside
                else ("majority" if maj[r["question"]] == r["mode"] else "other")
            )
            if mine == g and r["n"] > 0:
                s = sums[r["transition"]]
                s[0] += r["n"]
                s[1] += r["pred"]
                s[2] += r["obs"]
        table = res.tables[g]
        assert list(table.transitions) == list(sums)
        assert table.n_positions == tuple(int(v[0]) for v in sums.values())
        assert table.predicted == pytest.approx([v[1] / v[0] for v in sums.values()], rel=1e-12)
        assert table.observed == pytest.approx([v[2] / v[0] for v in sums.values()], rel=1e-12)
        assert res.n_positions[g] == sum(int(v[0]) for v in sums.values())
        # the fit over the transitions of run r0 (r1 excluded as failed)
        run_of = {r["transition"]: r["run"] for r in rows}
        kept = [t for t in sums if run_of[t] == "r0"]
        x = np.array([sums[t][1] / sums[t][0] for t in kept])
        y = np.array([sums[t][2] / sums[t][0] for t in kept])
        fit = res.fits[g]
        assert fit.n == len(kept) and list(fit.transitions) == kept
        assert set(fit.excluded_transitions) == {t for t in sums if run_of[t] == "r1"}
        assert fit.sign_agreement == pytest.approx(float(np.mean(np.sign(x) == np.sign(y))))
        if len(kept) >= 3:
            slope, intercept = np.polyfit(x, y, 1)
            assert fit.slope == pytest.approx(slope, rel=1e-9)
            assert fit.intercept == pytest.approx(intercept, rel=1e-9, abs=1e-12)
            assert fit.spearman_rho == pytest.approx(stats.spearmanr(x, y).statistic, rel=1e-9)
    # per model: the same fit over that model's transitions
    for model, fits in res.by_model.items():
        for g, fit in fits.items():
            assert set(fit.transitions) <= set(res.fits[g].transitions)
            assert all(t in {r["transition"] for r in rows if r["model"] == model}
                       for t in fit.transitions)  # fmt: skip


def test_a_study_where_the_majority_mode_carries_all_the_change() -> None:
    """Majority prefixes: observed = 0.9 × predicted, varying across transitions; every
    other prefix predicted and observed 0. The majority fit finds slope 0.9 and perfect
    agreement; the others' Δh is flat: no slope, no correlation, zero error."""
    transitions, groups, n, pred, obs = [], [], [], [], []
    for t, x in enumerate([-0.03, -0.01, 0.004, 0.02, -0.05]):
        for g, k in (("majority", 4), ("other", 3), ("outside_c", 5)):
            transitions.append(f"T{t}")
            groups.append(g)
            n.append(k)
            pred.append(k * x if g == "majority" else 0.0)
            obs.append(k * 0.9 * x if g == "majority" else 0.0)
    res = mode_covariance_fit(transitions, groups, n, pred, obs)
    maj = res.fits["majority"]
    assert maj.n == 5 and maj.slope == pytest.approx(0.9) and maj.intercept == pytest.approx(0)
    assert maj.sign_agreement == 1.0 and maj.spearman_rho == pytest.approx(1.0)
    assert maj.r_squared == pytest.approx(1.0)
    for g in ("other", "outside_c"):
        f = res.fits[g]
        assert f.n == 5 and f.slope is None and f.spearman_rho is None
        assert f.sign_agreement == 1.0 and f.median_abs_error == 0.0
    assert res.n_positions == {"majority": 20, "other": 15, "outside_c": 25}


def test_groups_and_refusals() -> None:
    assert trajectory_groups(
        ["q", "q", "q", "q", "p"], [1, 1, 0, 1, 1], ["a", "b", "a", "uncertain", "z"], {"q": "a"}
    ) == ["majority", "other", "outside_c", "outside_c", "other"]
    empty = mode_covariance_fit([], [], [], [], [])
    assert all(f.n == 0 and f.slope is None for f in empty.fits.values())
    with pytest.raises(ValueError, match="unknown group"):
        mode_covariance_fit(["T"], ["dominant"], [1], [0.1], [0.1])
    with pytest.raises(ValueError, match="two runs"):
        mode_covariance_fit(["T", "T"], ["majority"] * 2, [1, 1], [0, 0], [0, 0], runs=["a", "b"])
    with pytest.raises(ValueError, match="non-negative integers"):
        mode_covariance_fit(["T"], ["majority"], [1.5], [0.1], [0.1])
