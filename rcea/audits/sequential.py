"""Predeclared group-sequential partition-audit gate (docs/sequential-gate.md).

A rubric's ``[sequential]`` table predeclares *looks* — shares t₁ < … < t_K = 1 of the
planned pairs labelled by both annotators — an error rate ``alpha`` and an alpha-spending
function. At look k every gate requirement gets a repeated confidence interval

    [estimate − c_k·SE, estimate + c_k·SE]

whose boundary c_k comes from the spending function, and a decision: ``settled_pass``
(the interval lies on the passing side of the threshold), ``settled_fail`` (on the
failing side) or ``undecided``. The gate as a whole is ``settled_pass`` when every
requirement is, ``settled_fail`` as soon as one requirement is, and ``undecided``
otherwise: its outcome no longer depends on the undecided requirements exactly when it
is settled.

Boundaries (one-sided, level ``alpha`` per direction), for cumulative spending α(t):

* ``obrien_fleming`` — Lan–DeMets O'Brien–Fleming type, α(t) = 2 − 2Φ(z_{1−α/2}/√t);
* ``pocock`` — Lan–DeMets Pocock type, α(t) = α·ln(1 + (e − 1)t);
* ``bonferroni`` — c_k = z_{1−α/K} at every look (no correlation between looks used).

For the two spending functions c_k solves P(Z₁ < c₁, …, Z_{k−1} < c_{k−1}, Z_k ≥ c_k) =
α(t_k) − α(t_{k−1}) under the canonical joint distribution (Z_j = W(t_j)/√t_j for a
standard Brownian motion W, so corr(Z_i, Z_j) = √(t_i/t_j)), by numerical integration
on a grid (Armitage–McPherson–Rowe recursion, Simpson's rule).

SE is the standard deviation of the statistic over ``n_boot`` question-level bootstrap
replicates (questions drawn with replacement with all their pairs, as the paired
bootstrap of the estimators does: pairs within a question are correlated) times
√(Q/(Q−1)) for Q questions (the usual few-cluster correction: the bootstrap SD of a
mean over Q clusters is √((Q−1)/Q) of its standard error), floored at the
binomial SE √(p̃(1−p̃)/n) with p̃ = (n·estimate + 1)/(n + 2), n the pairs (or, for the
precision and recall, the predicted / reference ``different`` pairs) behind the
statistic. The floor keeps a look with no observed disagreement (bootstrap SE 0) from
settling on a handful of pairs.

Pairs where A ≠ B that are not adjudicated yet are *open*: the requirements that need the
final reference (automatic macro-F1, gap, different precision and recall) are bounded
pessimistically for ``settled_pass`` (the reference taken to disagree with the automatic
label) and optimistically for ``settled_fail`` (taken to agree), so an interim decision
never depends on how an open pair will be adjudicated. The automatic coverage is a
number of the whole locked partition, not a sample: it is settled at every look.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rcea.audits.agreement import DIFFERENT, SAME, check_labels, resolve_adjudication
from rcea.audits.gates import GATE_TOLERANCE, UNCERTAIN, counted_adjudications, evaluate_gate
from rcea.audits.thresholds import AGREEMENT_REQUIREMENTS, GateThresholds

__all__ = [
    "DECISIONS",
    "SPENDING_FUNCTIONS",
    "InterimReport",
    "RequirementDecision",
    "SequentialPlan",
    "attach_interim",
    "boundaries",
    "current_look",
    "interim_decisions",
    "look_sizes",
    "plan_passed",
    "planned_gate",
    "question_bootstrap",
    "spent_alpha",
]

SPENDING_FUNCTIONS = ("obrien_fleming", "pocock", "bonferroni")
DECISIONS = ("settled_pass", "settled_fail", "undecided")
_MAX_SEED = 2**63 - 1


@dataclass(frozen=True)
class SequentialPlan:
    """The rubric's ``[sequential]`` table (predeclared, part of the frozen content)."""

    looks: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)
    alpha: float = 0.05
    spending: str = "obrien_fleming"
    n_boot: int = 2000
    seed: int = 0

    def __post_init__(self) -> None:
        s = "[sequential]"
        looks = self.looks
        if isinstance(looks, str | bytes) or not isinstance(looks, Sequence) or not looks:
            raise ValueError(f"{s} looks must be a non-empty list of shares, got {looks!r}")
        vals: list[float] = []
        for i, t in enumerate(looks):
            if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
                raise ValueError(f"{s} looks[{i}] must be a number, got {t!r}")
            if not 0.0 < float(t) <= 1.0:
                raise ValueError(f"{s} looks[{i}] must be in (0, 1], got {t!r}")
            if vals and float(t) <= vals[-1]:
                raise ValueError(f"{s} looks must be strictly increasing (looks[{i}] = {t!r})")
            vals.append(float(t))
        if vals[-1] != 1.0:
            raise ValueError(f"{s} the last look must be 1.0 (every planned pair), got {vals[-1]}")
        if len(vals) > 20:
            raise ValueError(f"{s} at most 20 looks, got {len(vals)}")
        object.__setattr__(self, "looks", tuple(vals))
        a = self.alpha
        if isinstance(a, bool) or not isinstance(a, int | float) or not 0.0 < float(a) < 0.5:
            raise ValueError(f"{s} alpha must be a number strictly between 0 and 0.5, got {a!r}")
        object.__setattr__(self, "alpha", float(a))
        if self.spending not in SPENDING_FUNCTIONS:
            raise ValueError(
                f"{s} spending must be one of {', '.join(SPENDING_FUNCTIONS)}, "
                f"got {self.spending!r}"
            )
        for key, lo in (("n_boot", 200), ("seed", 0)):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo or v > _MAX_SEED:
                raise ValueError(f"{s} {key} must be an integer >= {lo}, got {v!r}")

    def boundaries(self) -> tuple[float, ...]:
        return boundaries(self.looks, self.alpha, self.spending)

    def to_dict(self) -> dict[str, Any]:
        return {
            "looks": list(self.looks),
            "alpha": self.alpha,
            "spending": self.spending,
            "n_boot": self.n_boot,
            "seed": self.seed,
        }


# --------------------------------------------------------------------------- boundaries


def spent_alpha(t: float, alpha: float, spending: str) -> float:
    """Cumulative one-sided alpha spent by information time ``t`` ∈ [0, 1]."""
    # scipy: ≈ 1 s to import, paid only where it computes (rcea/audits/__init__.py)
    from scipy import stats

    if t <= 0.0:
        return 0.0
    t = min(t, 1.0)
    if spending == "obrien_fleming":
        z = stats.norm.ppf(1.0 - alpha / 2.0)
        return float(2.0 - 2.0 * stats.norm.cdf(z / math.sqrt(t)))
    if spending == "pocock":
        return float(alpha * math.log(1.0 + (math.e - 1.0) * t))
    if spending == "bonferroni":
        return float(alpha * t)
    raise ValueError(f"unknown spending function {spending!r}")


def _simpson(lo: float, hi: float, n: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Grid points and Simpson weights on [lo, hi] (n odd)."""
    x = np.linspace(lo, hi, n)
    w = np.ones(n)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    return x, w * (hi - lo) / (3.0 * (n - 1))


_LOW = -9.0  # below this the continuation density is negligible (Φ(−9) ≈ 1e-19)
_GRID = 1201


def _excess(
    c: float,
    mass: np.ndarray[Any, Any],
    x: np.ndarray[Any, Any],
    s0: float,
    s1: float,
    sd: float,
    target: float,
) -> float:
    """P(cross at this look with boundary c, continuing before) − the alpha to spend."""
    # scipy: ≈ 1 s to import, paid only where it computes (rcea/audits/__init__.py)
    from scipy import stats

    return float(np.sum(mass * stats.norm.sf((c * s1 - x * s0) / sd))) - target


def boundaries(looks: Sequence[float], alpha: float, spending: str) -> tuple[float, ...]:
    """One-sided upper boundaries c_1..c_K on the z scale (see the module docstring)."""
    # scipy: ≈ 1 s to import, paid only where it computes (rcea/audits/__init__.py)
    from scipy import optimize, stats

    ts = [float(t) for t in looks]
    k_looks = len(ts)
    if spending == "bonferroni":
        c = float(stats.norm.ppf(1.0 - alpha / k_looks))
        return tuple(c for _ in ts)
    spend = [spent_alpha(t, alpha, spending) for t in ts]
    incr = [spend[0]] + [spend[i] - spend[i - 1] for i in range(1, k_looks)]
    out = [float(stats.norm.ppf(1.0 - incr[0]))]
    # continuation sub-density of Z_1 on [_LOW, c_1]
    x, w = _simpson(_LOW, out[0], _GRID)
    dens = stats.norm.pdf(x)
    for k in range(1, k_looks):
        t0, t1 = ts[k - 1], ts[k]
        sd = math.sqrt(t1 - t0)
        s0, s1 = math.sqrt(t0), math.sqrt(t1)
        mass = dens * w
        target = incr[k]
        if target <= 0.0:
            c_k = math.inf
        else:
            c_k = float(
                optimize.brentq(
                    _excess, -10.0, 40.0, args=(mass, x, s0, s1, sd, target), xtol=1e-10
                )
            )
        out.append(c_k)
        hi = min(c_k, 12.0)
        z, wz = _simpson(_LOW, hi, _GRID)
        kern = stats.norm.pdf((z[:, None] * s1 - x[None, :] * s0) / sd) * (s1 / sd)
        dens = kern @ mass
        x, w = z, wz
    return tuple(out)


def look_sizes(looks: Sequence[float], n_planned: int) -> tuple[int, ...]:
    """Pairs labelled by both annotators that each look needs: ⌈t_k·N⌉."""
    return tuple(max(1, math.ceil(t * n_planned - 1e-9)) for t in looks)


def current_look(looks: Sequence[float], n_planned: int, n_labelled: int) -> int:
    """The latest look reached (1-based), 0 before the first."""
    return sum(n_labelled >= n for n in look_sizes(looks, n_planned))


# --------------------------------------------------------------------------- bootstrap

# count columns: 0..3 human A vs B, 4..7 automatic vs pessimistic reference,
# 8..11 automatic vs optimistic reference; each block n[ref][pred] with same=0, different=1
_HH, _PESS, _OPT = 0, 4, 8
_CLS = {SAME: 0, DIFFERENT: 1}


def _block_stats(c: np.ndarray[Any, Any], off: int) -> dict[str, np.ndarray[Any, Any]]:
    """Macro-F1, different precision and recall of 2×2 blocks ``c[..., off:off+4]``."""
    ss, sd, ds, dd = (c[..., off + i].astype(np.float64) for i in range(4))
    with np.errstate(divide="ignore", invalid="ignore"):
        f1_s = np.where(2 * ss + sd + ds > 0, 2 * ss / (2 * ss + sd + ds), 0.0)
        f1_d = np.where(2 * dd + sd + ds > 0, 2 * dd / (2 * dd + sd + ds), 0.0)
        prec = np.where(dd + sd > 0, dd / (dd + sd), 0.0)
        rec = np.where(dd + ds > 0, dd / (dd + ds), 0.0)
    return {
        "macro_f1": (f1_s + f1_d) / 2.0,
        "precision": prec,
        "recall": rec,
        "n": ss + sd + ds + dd,
        "n_pred_diff": dd + sd,
        "n_ref_diff": dd + ds,
    }


def _statistics(c: np.ndarray[Any, Any]) -> dict[str, np.ndarray[Any, Any]]:
    """Every requirement statistic (pessimistic and optimistic) from count vectors."""
    hh, pe, op = _block_stats(c, _HH), _block_stats(c, _PESS), _block_stats(c, _OPT)
    return {
        "human_human_macro_f1": hh["macro_f1"],
        "automatic_macro_f1:pess": pe["macro_f1"],
        "automatic_macro_f1:opt": op["macro_f1"],
        "gap:pess": hh["macro_f1"] - pe["macro_f1"],
        "gap:opt": hh["macro_f1"] - op["macro_f1"],
        "different_precision:pess": pe["precision"],
        "different_precision:opt": op["precision"],
        "different_recall:pess": pe["recall"],
        "different_recall:opt": op["recall"],
    }


def question_bootstrap(
    counts: np.ndarray[Any, Any], n_boot: int, seed: int | Sequence[int]
) -> dict[str, np.ndarray[Any, Any]]:
    """Statistics of ``n_boot`` question-level bootstrap replicates.

    ``counts`` is (Q, 12): per question, the count vector of its pairs. Replicate b draws
    Q questions with replacement (multinomial weights) and pools their counts."""
    q = counts.shape[0]
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(q, np.full(q, 1.0 / q), size=n_boot)
    return _statistics(weights @ counts)


# --------------------------------------------------------------------------- decisions


@dataclass(frozen=True)
class RequirementDecision:
    """One requirement at one look: the interval valid under the plan and the decision."""

    name: str
    value: float | None
    threshold: float
    comparator: str
    lower: float | None
    upper: float | None
    se: float | None
    se_bootstrap: float | None
    decision: str
    pairs_needed: int | None = None
    settles_by_look: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "threshold": self.threshold,
            "comparator": self.comparator,
            "lower": self.lower,
            "upper": self.upper,
            "se": self.se,
            "se_bootstrap": self.se_bootstrap,
            "decision": self.decision,
            "pairs_needed": self.pairs_needed,
            "settles_by_look": self.settles_by_look,
        }


@dataclass(frozen=True)
class InterimReport:
    """The interim decisions of one look (``look`` 0: before the first look)."""

    plan: SequentialPlan
    look: int
    n_looks: int
    n_planned: int
    n_labelled: int
    n_questions: int
    n_open: int
    look_sizes: tuple[int, ...]
    boundaries: tuple[float, ...]
    boundary: float | None
    decision: str
    requirements: tuple[RequirementDecision, ...] = field(default_factory=tuple)
    pairs_needed: int | None = None

    @property
    def settled(self) -> bool:
        return self.decision != "undecided"

    @property
    def final_look(self) -> bool:
        return self.look == self.n_looks

    def to_dict(self) -> dict[str, Any]:
        return {
            "plan": self.plan.to_dict(),
            "look": self.look,
            "n_looks": self.n_looks,
            "final_look": self.final_look,
            "n_planned": self.n_planned,
            "n_labelled": self.n_labelled,
            "n_questions": self.n_questions,
            "n_open": self.n_open,
            "look_sizes": list(self.look_sizes),
            "boundaries": list(self.boundaries),
            "boundary": self.boundary,
            "decision": self.decision,
            "settled": self.settled,
            "pairs_needed": self.pairs_needed,
            "requirements": [r.to_dict() for r in self.requirements],
        }


def _floor_se(est: float, n: float) -> float:
    if n <= 0:
        return math.inf
    p = (n * min(max(est, 0.0), 1.0) + 1.0) / (n + 2.0)
    return math.sqrt(p * (1.0 - p) / n)


def label_codes(labels: Sequence[str | None]) -> np.ndarray[Any, Any]:
    """same → 0, different → 1, ``None`` → −1."""
    return np.array([-1 if x is None else _CLS[x] for x in labels], dtype=np.int64)


def pair_counts(
    q_index: np.ndarray[Any, Any],
    n_questions: int,
    a: np.ndarray[Any, Any],
    b: np.ndarray[Any, Any],
    adj: np.ndarray[Any, Any],
    auto: np.ndarray[Any, Any],
) -> tuple[np.ndarray[Any, Any], int]:
    """(Q, 12) count vectors per question and the number of open pairs, from label codes
    (0 same, 1 different, −1 none; see :func:`label_codes`)."""
    c = np.zeros((n_questions, 12), dtype=np.int64)
    np.add.at(c, (q_index, _HH + 2 * b + a), 1)  # B as reference, A as prediction
    ev = auto >= 0
    agreed = a == b
    is_open = ev & ~agreed & (adj < 0)
    ref = np.where(adj >= 0, adj, np.where(agreed, a, -1))
    pess = np.where(is_open, 1 - auto, ref)
    opt = np.where(is_open, auto, ref)
    np.add.at(c, (q_index[ev], _PESS + 2 * pess[ev] + auto[ev]), 1)
    np.add.at(c, (q_index[ev], _OPT + 2 * opt[ev] + auto[ev]), 1)
    return c, int(is_open.sum())


def _decide(comparator: str, lower: float, upper: float, threshold: float) -> str:
    if comparator == ">=":
        if lower >= threshold - GATE_TOLERANCE:
            return "settled_pass"
        if upper < threshold - GATE_TOLERANCE:
            return "settled_fail"
    else:
        if upper <= threshold + GATE_TOLERANCE:
            return "settled_pass"
        if lower > threshold + GATE_TOLERANCE:
            return "settled_fail"
    return "undecided"


def _needed(
    margin: float, se: float, n_now: int, look: int, sizes: tuple[int, ...], cs: tuple[float, ...]
) -> tuple[int | None, int | None]:
    """More pairs (labelled by both) needed to settle if the estimate and the per-pair
    spread stay as they are: n ≥ n_now·(c_j·SE/margin)², at the first later look j whose
    planned size reaches it (beyond the plan: with the last boundary, look ``None``)."""
    if margin <= 0 or not math.isfinite(se) or n_now <= 0:
        return None, None
    for j in range(look, len(sizes)):  # 0-based index of later looks
        need = n_now * (cs[j] * se / margin) ** 2
        if sizes[j] >= need:  # the next decision is made at look j + 1 anyway
            return max(0, max(math.ceil(need), sizes[j]) - n_now), j + 1
    need = n_now * (cs[-1] * se / margin) ** 2
    return max(0, math.ceil(need) - n_now), None


def interim_decisions(
    question_ids: Sequence[Hashable],
    annotator_a: Sequence[Any],
    annotator_b: Sequence[Any],
    adjudicated: Mapping[Any, Any] | Sequence[Any] | None,
    automatic: Sequence[Any],
    automatic_coverage: float,
    thresholds: GateThresholds,
    plan: SequentialPlan,
    n_planned: int,
    *,
    pair_ids: Sequence[Any] | None = None,
) -> InterimReport:
    """Interim decisions over the pairs labelled by both annotators so far.

    The inputs list only those pairs (``question_ids`` aligned with them: the resampling
    unit); ``n_planned`` counts every planned pair, labelled or not. ``adjudicated`` as in
    :func:`rcea.audits.gates.evaluate_gate`; unadjudicated A ≠ B pairs are open (see the module
    docstring). The look is the latest one whose size ⌈t_k·N⌉ the labelled pairs reach.
    """
    a = check_labels(annotator_a, "annotator_a", allow_empty=True)
    b = check_labels(annotator_b, "annotator_b", allow_empty=True)
    n = len(a)
    if len(b) != n or len(automatic) != n or len(question_ids) != n:
        raise ValueError(
            f"length mismatch: question_ids={len(question_ids)}, annotator_a={n}, "
            f"annotator_b={len(b)}, automatic={len(automatic)}"
        )
    if isinstance(n_planned, bool) or not isinstance(n_planned, int) or n_planned < 1:
        raise ValueError(f"n_planned must be an integer >= 1, got {n_planned!r}")
    if n > n_planned:
        raise ValueError(f"{n} labelled pairs exceed the {n_planned} planned")
    ids = [str(p) for p in (pair_ids if pair_ids is not None else range(n))]
    adj = resolve_adjudication(ids, adjudicated)
    auto: list[str | None] = []
    for i, lab in enumerate(automatic):
        if lab is None or lab == UNCERTAIN:
            auto.append(None)
        elif lab in (SAME, DIFFERENT):
            auto.append(str(lab))
        else:
            raise ValueError(f"automatic[{i}] must be 'same', 'different', None or 'uncertain'")
    qids = [str(q) for q in question_ids]
    order = {q: i for i, q in enumerate(sorted(set(qids)))}
    counts, n_open = pair_counts(
        np.array([order[q] for q in qids], dtype=np.int64),
        len(order),
        label_codes(a),
        label_codes(b),
        label_codes(adj),
        label_codes(auto),
    )
    return decide_counts(
        counts, n_open, n, automatic_coverage, thresholds, plan, n_planned, plan.boundaries()
    )


def decide_counts(
    counts: np.ndarray[Any, Any],
    n_open: int,
    n: int,
    automatic_coverage: float,
    thresholds: GateThresholds,
    plan: SequentialPlan,
    n_planned: int,
    cs: tuple[float, ...],
) -> InterimReport:
    """:func:`interim_decisions` from per-question count vectors (:func:`pair_counts`);
    ``cs`` are the plan's boundaries (computed once by a caller that loops)."""
    sizes = look_sizes(plan.looks, n_planned)
    look = current_look(plan.looks, n_planned, n)
    cov_ok = automatic_coverage >= thresholds.automatic_coverage_min - GATE_TOLERANCE
    cov = RequirementDecision(
        name="automatic_coverage",
        value=float(automatic_coverage),
        threshold=thresholds.automatic_coverage_min,
        comparator=">=",
        lower=float(automatic_coverage),
        upper=float(automatic_coverage),
        se=0.0,
        se_bootstrap=0.0,
        decision="settled_pass" if cov_ok else "settled_fail",
    )
    base = {
        "plan": plan,
        "look": look,
        "n_looks": len(plan.looks),
        "n_planned": n_planned,
        "n_labelled": n,
        "n_questions": counts.shape[0],
        "n_open": n_open,
        "look_sizes": sizes,
        "boundaries": cs,
    }
    t = thresholds.to_dict()
    if look == 0:
        reqs = tuple(
            RequirementDecision(name, None, t[key], comp, None, None, None, None, "undecided")
            for name, key, comp in AGREEMENT_REQUIREMENTS
        ) + (cov,)
        return InterimReport(boundary=None, decision="undecided", requirements=reqs, **base)
    c = cs[look - 1]
    point = {k: float(v) for k, v in _statistics(counts.sum(axis=0)).items()}
    reps = question_bootstrap(counts, plan.n_boot, [plan.seed, look])
    hh, pe, op = (_block_stats(counts.sum(axis=0), off) for off in (_HH, _PESS, _OPT))
    n_hh, n_auto = float(hh["n"]), float(pe["n"])
    n_q = counts.shape[0]
    small_q = math.sqrt(n_q / (n_q - 1)) if n_q > 1 else 1.0  # few-cluster correction

    def se_of(key: str, floor_n: float) -> tuple[float, float]:
        boot = float(np.std(reps[key], ddof=1)) * small_q
        if key.startswith("gap"):
            floor = max(
                _floor_se(point["human_human_macro_f1"], n_hh),
                _floor_se(point["automatic_macro_f1:" + key.split(":")[1]], floor_n),
            )
        else:
            floor = _floor_se(point[key], floor_n)
        return max(boot, floor), boot

    def floor_n(name: str, side: dict[str, Any]) -> float:
        if name == "human_human_macro_f1":
            return n_hh
        if name == "different_precision":
            return float(side["n_pred_diff"])
        if name == "different_recall":
            return float(side["n_ref_diff"])
        return n_auto

    reqs_list: list[RequirementDecision] = []
    for name, key, comp in AGREEMENT_REQUIREMENTS:
        thr = t[key]
        if name == "human_human_macro_f1":
            se, boot = se_of(name, n_hh) if n_hh else (math.inf, math.inf)
            est_p = est_o = point[name]
            se_p = se_o = se
        elif n_auto == 0:
            est_p = est_o = math.nan
            se_p = se_o = boot = math.inf
        else:
            est_p, est_o = point[name + ":pess"], point[name + ":opt"]
            se_p, boot = se_of(name + ":pess", floor_n(name, pe))
            se_o, _ = se_of(name + ":opt", floor_n(name, op))
        if math.isnan(est_p) or not math.isfinite(se_p):
            reqs_list.append(
                RequirementDecision(name, None, thr, comp, None, None, None, None, "undecided")
            )
            continue
        if comp == ">=":
            lower, upper = est_p - c * se_p, est_o + c * se_o
        else:
            lower, upper = est_o - c * se_o, est_p + c * se_p
        decision = _decide(comp, lower, upper, thr)
        lo_bound = -1.0 if name == "gap" else 0.0  # shown clipped to the statistic's range
        lower, upper = max(lower, lo_bound), min(upper, 1.0)
        needed: tuple[int | None, int | None] = (None, None)
        if decision == "undecided":
            pass_side = est_p >= thr if comp == ">=" else est_p <= thr
            fail_side = est_o < thr if comp == ">=" else est_o > thr
            if pass_side:
                needed = _needed(abs(est_p - thr), se_p, n, look, sizes, cs)
            elif fail_side:
                needed = _needed(abs(est_o - thr), se_o, n, look, sizes, cs)
        reqs_list.append(
            RequirementDecision(
                name=name,
                value=float(est_p),
                threshold=thr,
                comparator=comp,
                lower=float(lower),
                upper=float(upper),
                se=float(se_p),
                se_bootstrap=float(boot),
                decision=decision,
                pairs_needed=needed[0],
                settles_by_look=needed[1],
            )
        )
    reqs = (*reqs_list, cov)
    decision = gate_decision([r.decision for r in reqs])
    pairs_needed = None
    if decision == "undecided":
        pend = [r for r in reqs if r.decision == "undecided"]
        fail_bound = [
            r.pairs_needed
            for r in pend
            if r.pairs_needed is not None
            and r.value is not None
            and (r.value < r.threshold if r.comparator == ">=" else r.value > r.threshold)
        ]
        if fail_bound:
            pairs_needed = min(fail_bound)
        elif all(r.pairs_needed is not None for r in pend):
            pairs_needed = max(int(r.pairs_needed or 0) for r in pend)
    return InterimReport(
        boundary=c, decision=decision, requirements=reqs, pairs_needed=pairs_needed, **base
    )


def gate_decision(decisions: Sequence[str]) -> str:
    """The gate's decision: fail if any requirement is settled_fail, pass if all are
    settled_pass, else undecided (the outcome still depends on an undecided one)."""
    if any(d == "settled_fail" for d in decisions):
        return "settled_fail"
    if decisions and all(d == "settled_pass" for d in decisions):
        return "settled_pass"
    return "undecided"


# --------------------------------------------------------------------------- outcome


def plan_passed(interim: dict[str, Any]) -> bool | None:
    """The gate outcome under the plan: ``None`` while undecided before the last look."""
    if interim["decision"] == "settled_pass":
        return True
    if interim["decision"] == "settled_fail":
        return False
    return False if interim["final_look"] else None


def attach_interim(data: dict[str, Any], interim: dict[str, Any]) -> dict[str, Any]:
    """Merge an interim report (``InterimReport.to_dict()``) into a gate dict, in place."""
    data["sequential"] = interim
    data["decision"] = interim["decision"]
    data["gate_rule"] = "sequential"
    by_name = {r["name"]: r for r in interim["requirements"]}
    extra = ("decision", "lower", "upper", "se", "pairs_needed", "settles_by_look")
    if data.get("requirements"):
        for r in data["requirements"]:
            seq = by_name.get(r["name"])
            if seq is not None:
                r.update({k: seq[k] for k in extra})
    else:
        data["requirements"] = [
            {
                "name": r["name"],
                "value": r["value"],
                "threshold": r["threshold"],
                "comparator": r["comparator"],
                "passed": None,
                **{k: r[k] for k in extra},
            }
            for r in interim["requirements"]
        ]
    outcome = plan_passed(interim)
    if data.get("stage") == "final":
        data["fixed_sample_passed"] = data.get("passed")
        data["passed"] = outcome
        if outcome is None:
            data["stage"] = "interim"
    elif data.get("stage") == "provisional":
        data["fixed_sample_provisional_passed"] = data.get("provisional_passed")
        data["provisional_passed"] = outcome
    return data


def planned_gate(
    pair_ids: Sequence[Any],
    question_ids: Sequence[Hashable],
    annotator_a: Sequence[Any],
    annotator_b: Sequence[Any],
    adjudicated: Mapping[Any, Any],
    automatic: Sequence[Any],
    automatic_coverage: float,
    thresholds: GateThresholds,
    *,
    scope: str,
    stage: str,
    plan: SequentialPlan | None = None,
    n_planned: int | None = None,
    audited_coverage: float | None = None,
    rubric_hash: str | None = None,
    partition_hash: str | None = None,
    provisional: bool = False,
) -> dict[str, Any]:
    """The pair gate as a dict, from label arrays — the one assembly the bundle verifier
    and ``rcea stats agreement`` share with the store's gate: :func:`rcea.audits.gates.
    evaluate_gate` at ``stage``; ``provisional`` (a final gate whose automatic coverage is
    not from the locked partition) keeps the outcome as ``provisional_passed`` and
    ``passed = None``; with a sequential ``plan`` the interim decisions over the
    adjudications the scope counts (:func:`rcea.audits.gates.counted_adjudications`) are
    merged in (:func:`attach_interim`)."""
    data = evaluate_gate(
        pair_ids,
        annotator_a,
        annotator_b,
        adjudicated,
        automatic,
        automatic_coverage,
        thresholds,
        audited_coverage=audited_coverage,
        rubric_hash=rubric_hash,
        partition_hash=partition_hash,
        stage=stage,  # type: ignore[arg-type]  # the value is validated against the literal's choices where it is read
        adjudication_scope=scope,
    ).to_dict()
    if provisional and data["stage"] == "final":
        # docs/estimators.md item 11: coverage is over the locked partition; without it
        # the gate is not final, whatever the other requirements say.
        data["stage"] = "provisional"
        data["provisional_passed"] = data["passed"]
        data["passed"] = None
    if plan is not None:
        interim = interim_decisions(
            question_ids,
            annotator_a,
            annotator_b,
            counted_adjudications(
                pair_ids, annotator_a, annotator_b, automatic, adjudicated, scope
            ),
            automatic,
            automatic_coverage,
            thresholds,
            plan,
            n_planned if n_planned is not None else len(pair_ids),
            pair_ids=pair_ids,
        )
        attach_interim(data, interim.to_dict())
    return data
