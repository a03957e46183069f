"""Simulated partition audits for the sequential gate (tests and
``benchmarks/bench_sequential_gate.py``).

A *world* fixes a population of questions: per question q, the share of truly
``different`` pairs p_q ~ Beta(mean ``p_different``, concentration ``kappa``) and the
automatic partition's error rates e_sd,q (truly same → said different) and e_ds,q (truly
different → said same), each Beta with mean ``e_sd`` / ``e_ds`` and concentration
``kappa`` (question-level heterogeneity: pairs within a question are correlated).
Annotators A and B flip the truth independently with probability ``e_human``; the
adjudicator labels A ≠ B pairs with the truth, so the reference is wrong only where A and
B are both wrong (probability r = e_human²).

Because p_q and the error rates are independent, the expected confusion over the
population is closed-form (:func:`true_values`); the pooled statistics' estimands are the
requirements evaluated on it — the "truth" that a settled decision can contradict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rcea.audits.sequential import (
    InterimReport,
    SequentialPlan,
    decide_counts,
    look_sizes,
    pair_counts,
)
from rcea.audits.thresholds import GateThresholds

__all__ = ["World", "SimulatedAudit", "simulate_audit", "true_values", "monitor"]


@dataclass(frozen=True)
class World:
    p_different: float = 0.5
    e_human: float = 0.03
    e_sd: float = 0.03
    e_ds: float = 0.03
    kappa: float = 20.0
    n_questions: int = 29
    pairs_per_question: int = 156


def _f1s(ss: float, sd: float, ds: float, dd: float) -> tuple[float, float, float]:
    """macro-F1, different precision, recall of a confusion n[ref][pred]."""
    f1_s = 2 * ss / (2 * ss + sd + ds)
    f1_d = 2 * dd / (2 * dd + sd + ds)
    return (f1_s + f1_d) / 2, dd / (dd + sd), dd / (dd + ds)


def true_values(w: World) -> dict[str, float]:
    """The population value of every requirement statistic (closed form)."""
    p, e, r = w.p_different, w.e_human, w.e_human**2
    hh, _, _ = _f1s(
        (1 - p) * (1 - e) ** 2 + p * e**2,
        e * (1 - e),
        e * (1 - e),
        p * (1 - e) ** 2 + (1 - p) * e**2,
    )
    dd = p * (1 - r) * (1 - w.e_ds) + (1 - p) * r * w.e_sd
    ds = p * (1 - r) * w.e_ds + (1 - p) * r * (1 - w.e_sd)
    sd = p * r * (1 - w.e_ds) + (1 - p) * (1 - r) * w.e_sd
    ss = p * r * w.e_ds + (1 - p) * (1 - r) * (1 - w.e_sd)
    auto, prec, rec = _f1s(ss, sd, ds, dd)
    return {
        "human_human_macro_f1": hh,
        "automatic_macro_f1": auto,
        "gap": hh - auto,
        "different_precision": prec,
        "different_recall": rec,
    }


def _beta(rng: np.random.Generator, mean: float, kappa: float, size: int) -> np.ndarray[Any, Any]:
    if mean <= 0.0:
        return np.zeros(size)
    return rng.beta(mean * kappa, (1 - mean) * kappa, size=size)


@dataclass(frozen=True)
class SimulatedAudit:
    """Label codes (0 same, 1 different) of every planned pair in labelling order."""

    q_index: np.ndarray[Any, Any]
    truth: np.ndarray[Any, Any]
    a: np.ndarray[Any, Any]
    b: np.ndarray[Any, Any]
    adjudicated: np.ndarray[Any, Any]  # −1 where A = B
    automatic: np.ndarray[Any, Any]
    n_questions: int


def simulate_audit(w: World, rng: np.random.Generator) -> SimulatedAudit:
    q, m = w.n_questions, w.pairs_per_question
    p_q = _beta(rng, w.p_different, w.kappa, q)
    sd_q, ds_q = _beta(rng, w.e_sd, w.kappa, q), _beta(rng, w.e_ds, w.kappa, q)
    q_index = np.repeat(np.arange(q), m)
    truth = (rng.random(q * m) < p_q[q_index]).astype(np.int64)
    flip_a = rng.random(q * m) < w.e_human
    flip_b = rng.random(q * m) < w.e_human
    a, b = truth ^ flip_a, truth ^ flip_b
    err = np.where(truth == 1, ds_q[q_index], sd_q[q_index])
    auto = truth ^ (rng.random(q * m) < err)
    adj = np.where(a != b, truth, -1)
    order = rng.permutation(q * m)  # labelling order interleaves questions
    return SimulatedAudit(
        q_index=q_index[order],
        truth=truth[order],
        a=a[order],
        b=b[order],
        adjudicated=adj[order],
        automatic=auto[order],
        n_questions=q,
    )


def monitor(
    audit: SimulatedAudit,
    plan: SequentialPlan,
    thresholds: GateThresholds,
    *,
    automatic_coverage: float = 1.0,
    stop_when_settled: bool = True,
    cs: tuple[float, ...] | None = None,
) -> list[InterimReport]:
    """Interim reports at every planned look (up to the first settled one)."""
    n_planned = len(audit.a)
    cs = plan.boundaries() if cs is None else cs
    out: list[InterimReport] = []
    for size in look_sizes(plan.looks, n_planned):
        s = slice(0, size)
        counts, n_open = pair_counts(
            audit.q_index[s],
            audit.n_questions,
            audit.a[s],
            audit.b[s],
            audit.adjudicated[s],
            audit.automatic[s],
        )
        rep = decide_counts(
            counts, n_open, size, automatic_coverage, thresholds, plan, n_planned, cs
        )
        out.append(rep)
        if stop_when_settled and rep.settled:
            break
    return out
