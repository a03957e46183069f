"""pass@k and greedy benchmark accuracy (docs/estimators.md item 8).

Unbiased pass@k from n samples with c correct (Chen et al., 2021):

    pass@k = 1 − C(n−c, k) / C(n, k) = 1 − Π_{i=n−c+1}^{n} (1 − k/i),   n ≥ k,

evaluated in the product form (no huge binomials, no cancellation); it is 1 when
n − c < k. Macro pass@k is the unweighted mean over questions. Greedy accuracy is the
mean of 0/1 correctness per benchmark, and the macro accuracy is the unweighted mean
over benchmarks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rcea.audits._checks import as_binary_array, check_positive_int, check_same_length
from rcea.audits._common import dataclass_dict

__all__ = [
    "BenchmarkAccuracy",
    "MacroPassAtK",
    "macro_benchmark_accuracy",
    "macro_pass_at_k",
    "pass_at_k",
]


#: The most factors one pass@k product takes (min(c, k) of them): 10⁷ float64s, 80 MB.
MAX_PRODUCT_TERMS = 10_000_000


def _nonneg_int(value: Any, name: str) -> int:
    if isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return value


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 − Π_{i=n−c+1}^{n} (1 − k/i) for one question: n samples, c correct, budget k.

    Raises ``ValueError`` unless 0 ≤ c ≤ n and 1 ≤ k ≤ n."""
    n = _nonneg_int(n, "n")
    c = _nonneg_int(c, "c")
    k = check_positive_int(k, "k")
    if c > n:
        raise ValueError(f"c (correct samples) must be <= n (samples), got c={c}, n={n}")
    if n < k:
        raise ValueError(f"pass@k needs n >= k, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    if min(c, k) > MAX_PRODUCT_TERMS:
        raise ValueError(
            f"pass@k with c={c} and k={k} both above {MAX_PRODUCT_TERMS:,} is beyond what "
            "is computed; use a smaller k"
        )
    if c <= k:
        i = np.arange(n - c + 1, n + 1, dtype=np.float64)
        return float(1.0 - np.prod(1.0 - k / i))
    # the same ratio C(n−c, k)/C(n, k) as k factors: Π_{j=0}^{k−1} (1 − c/(n−j))
    j = np.arange(n - k + 1, n + 1, dtype=np.float64)
    return float(1.0 - np.prod(1.0 - c / j))


@dataclass(frozen=True)
class MacroPassAtK:
    """Macro pass@k: ``values[k]`` = mean over the ``n_questions`` questions of pass@k."""

    n_questions: int
    values: dict[int, float]

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_questions": self.n_questions,
            "pass_at_k": {f"pass_at_{k}": v for k, v in self.values.items()},
        }


def macro_pass_at_k(
    ns: Sequence[int] | np.ndarray[Any, Any],
    cs: Sequence[int] | np.ndarray[Any, Any],
    ks: Iterable[int],
) -> MacroPassAtK:
    """Per-k unweighted mean over questions of pass@k(nᵢ, cᵢ, k). ``ns`` and ``cs`` are
    per-question sample and correct counts; every question needs nᵢ ≥ max(ks)."""
    ns_l = list(ns.tolist() if isinstance(ns, np.ndarray) else ns)
    cs_l = list(cs.tolist() if isinstance(cs, np.ndarray) else cs)
    check_same_length(ns=ns_l, cs=cs_l)
    if not ns_l:
        raise ValueError("ns is empty")
    k_list = sorted({check_positive_int(k, "k") for k in ks})
    if not k_list:
        raise ValueError("ks is empty")
    values = {
        k: float(np.mean([pass_at_k(n, c, k) for n, c in zip(ns_l, cs_l, strict=True)]))
        for k in k_list
    }
    return MacroPassAtK(n_questions=len(ns_l), values=values)


@dataclass(frozen=True)
class BenchmarkAccuracy:
    """Greedy accuracy per benchmark (``accuracy``, ``n`` items each) and the unweighted
    macro average over benchmarks."""

    accuracy: dict[str, float]
    n: dict[str, int]
    macro_accuracy: float

    def to_dict(self) -> dict[str, Any]:
        return dataclass_dict(self)


def macro_benchmark_accuracy(
    correct: Mapping[str, Sequence[int] | np.ndarray[Any, Any]],
) -> BenchmarkAccuracy:
    """accuracy_b = mean of the 0/1 greedy correctness of benchmark b;
    macro = (1/#benchmarks) Σ_b accuracy_b (each benchmark weighs the same)."""
    if not isinstance(correct, Mapping) or not correct:
        raise ValueError("correct must be a non-empty mapping of benchmark name to 0/1 list")
    acc: dict[str, float] = {}
    counts: dict[str, int] = {}
    for name in sorted(correct, key=str):
        if not isinstance(name, str) or not name:
            raise ValueError(f"benchmark names must be non-empty strings, got {name!r}")
        arr = as_binary_array(correct[name], f"correct[{name!r}]")
        acc[name] = float(arr.mean())
        counts[name] = int(arr.size)
    return BenchmarkAccuracy(
        accuracy=acc, n=counts, macro_accuracy=float(np.mean(list(acc.values())))
    )
