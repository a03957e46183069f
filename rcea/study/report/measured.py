"""The report's sections computed from producer measurements (training curves, greedy
accuracy, accuracy traces, pass@k, covariance transitions, tail reports): items 6–9, 13
and 14 of docs/estimators.md. Pure, like :mod:`rcea.study.report.compute` which calls them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from rcea.audits.association import retention_passk_spearman
from rcea.audits.covariance import covariance_fit_by_group
from rcea.audits.failure import detect_training_failure, last_milestone_before_failure
from rcea.audits.passk import macro_pass_at_k
from rcea.audits.tail import BudgetTail, StratumTail, TailResult, direction_counts
from rcea.study.report.mode_tail import SUM_FIELDS
from rcea.study.report.replicates import run_name, seed_points

Key = tuple[str, str, int]

#: Payload fields each measurement kind needs here, and the fields of its list items.
_REQUIRED: dict[str, tuple[tuple[str, ...], str | None, tuple[str, ...]]] = {
    "training_curve": (("points",), None, ()),
    "greedy_accuracy": (("accuracy",), None, ()),
    "accuracy_trace": (("points",), "points", ("step", "accuracy")),
    "passk": (("k",), "questions", ("n", "c")),
    "covariance_transition": (("predicted", "observed"), None, ()),
    "tail_trajectories": (("quantile", *SUM_FIELDS), None, ()),
    "tail": (
        (
            "quantile",
            "n_tokens",
            "n_trajectories",
            "n_groups",
            "n_zero_variance_groups",
            "mean_logprob",
            "mean_advantage",
            "success",
            "failure",
            "gap_failure_minus_success_pp",
            "budgets",
        ),
        None,
        (),
    ),
}


def measurements_by_kind(stored: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The study's measurements (``{kind, run, model, step, key, payload}``) by kind; a
    payload without a field the report needs is a ``ValueError`` naming the measurement
    and the field."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for m in stored:
        where = (
            f"measurement {m['kind']} (run={m['run']!r} model={m['model']!r} "
            f"step={m['step']} key={m['key']!r})"
        )
        fields, items, item_fields = _REQUIRED.get(m["kind"], ((), None, ()))
        missing = [f for f in fields if f not in m["payload"]]
        for i, item in enumerate(m["payload"].get(items) or [] if items else []):
            missing += [f"{items}[{i}].{f}" for f in item_fields if f not in item]
        if missing:
            raise ValueError(f"{where}: payload lacks {', '.join(missing[:5])}")
        out[m["kind"]].append(
            {
                "run": m["run"],
                "model": m["model"],
                "step": m["step"],
                "key": m["key"],
                "payload": m["payload"],
                "where": where,
            }
        )
    return out


def greedy(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Item 8: greedy accuracy per benchmark and the unweighted macro over benchmarks."""
    groups: dict[Key, dict[str, Any]] = {}
    for m in rows:
        g = groups.setdefault(
            (m["run"], m["model"], m["step"]),
            {"run": m["run"], "model": m["model"], "step": m["step"], "accuracy": {}, "n": {}},
        )
        g["accuracy"][m["key"]] = m["payload"].get("accuracy")
        g["n"][m["key"]] = m["payload"].get("n")
    for g in groups.values():
        vals = [v for v in g["accuracy"].values() if v is not None]
        g["macro_accuracy"] = sum(vals) / len(vals) if vals else None
    return list(groups.values())


def passk(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Item 8: macro pass@k per checkpoint and benchmark, recomputed from the stored
    per-question (n, c) when present (``recomputed``), else the producer's values."""

    out = []
    for m in rows:
        p = m["payload"]
        qs = p.get("questions") or []
        ks = [int(k) for k in p.get("k") or []]
        if qs and ks:
            res = macro_pass_at_k([q["n"] for q in qs], [q["c"] for q in qs], ks).to_dict()
            values, n_q, recomputed = res["pass_at_k"], res["n_questions"], True
        else:
            values = {
                (k if str(k).startswith("pass_at_") else f"pass_at_{k}"): v
                for k, v in (p.get("pass_at_k") or {}).items()
            }
            n_q, recomputed = None, False
        out.append(
            {
                "run": m["run"],
                "model": m["model"],
                "step": m["step"],
                "benchmark": m["key"],
                "n": p.get("n"),
                "n_questions": n_q,
                "pass_at_k": values,
                "recomputed": recomputed,
            }
        )
    return out


def covariance(
    rows: list[dict[str, Any]], failed: set[tuple[str, str]], label: Any
) -> dict[str, Any] | None:
    """Item 6 across the stored transitions, pooled and per model; failed (run, model)
    pairs excluded (``excluded_runs`` names them with ``label``: the run, or
    ``run:model`` when the run name exists at several scales)."""

    if not rows:
        return None
    labels = [str(m["payload"].get("transition") or "") for m in rows]
    if len(set(labels)) != len(labels) or "" in labels:
        labels = [
            f"{m['model']}/{m['run']}:{m['payload'].get('from_step')}->"
            f"{m['payload'].get('to_step', m['step'])}"
            for m in rows
        ]
    ids = [label(m["run"], m["model"]) for m in rows]
    excluded = sorted(
        {i for i, m in zip(ids, rows, strict=True) if (m["run"], m["model"]) in failed}
    )
    fit = covariance_fit_by_group(
        [m["model"] for m in rows],
        labels,
        [m["payload"]["predicted"] for m in rows],
        [m["payload"]["observed"] for m in rows],
        runs=ids,
        excluded_runs=excluded,
    ).to_dict()
    fit["transitions"] = [
        {
            "transition": lab,
            "run": m["run"],
            "model": m["model"],
            "from_step": m["payload"].get("from_step"),
            "to_step": m["payload"].get("to_step", m["step"]),
            "predicted": m["payload"]["predicted"],
            "observed": m["payload"]["observed"],
            "n_positions": m["payload"].get("n_positions"),
            "failed_run": (m["run"], m["model"]) in failed,
        }
        for lab, m in zip(labels, rows, strict=True)
    ]
    fit["excluded_runs"] = fit["pooled"]["excluded_runs"]
    return fit


def tail(rows: list[dict[str, Any]], failed: set[tuple[str, str]]) -> dict[str, Any] | None:
    """Item 7 per endpoint (failed (run, model) kept and marked) and the direction counts."""

    if not rows:
        return None
    endpoints = [
        {
            "run": m["run"],
            "model": m["model"],
            "step": m["step"],
            "failed_run": (m["run"], m["model"]) in failed,
            "report": m["payload"],
        }
        for m in rows
    ]
    return {
        "endpoints": endpoints,
        "direction_counts": direction_counts([_tail_result(m) for m in rows]).to_dict(),
    }


def _tail_result(m: dict[str, Any]) -> TailResult:

    p = m["payload"]
    try:
        success, failure = StratumTail(**p["success"]), StratumTail(**p["failure"])
        budgets = tuple(BudgetTail(**b) for b in p["budgets"])
    except TypeError as exc:
        raise ValueError(f"{m['where']}: malformed tail report ({exc})") from None
    return TailResult(
        endpoint=p.get("endpoint") or f"{m['run']}:{m['model']}:{m['step']}",
        quantile=p["quantile"],
        n_tokens=p["n_tokens"],
        n_trajectories=p["n_trajectories"],
        n_groups=p["n_groups"],
        n_zero_variance_groups=p["n_zero_variance_groups"],
        mean_logprob=p["mean_logprob"],
        mean_advantage=p["mean_advantage"],
        success=success,
        failure=failure,
        gap_failure_minus_success_pp=p["gap_failure_minus_success_pp"],
        budgets=budgets,
    )


#: Half-width (in training progress) of the failure window around the collapse (item 13).
FAILURE_WINDOW_HALF_WIDTH = 0.05


def failure(
    traces: list[dict[str, Any]],
    keys: list[Key],
    curves: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Item 9 per (run, model) from its accuracy traces (one per benchmark; the pair
    failed when any trace did) and item 14: a failed (run, model) is reported at its
    latest stored checkpoint ≤ the last step attaining the peak, any other at its last
    checkpoint. A failure never spreads to the same run name at another scale.

    Item 13, next to the verdict of a failed pair: ``failure_window`` from its
    ``training_curve`` points with progress within ±``FAILURE_WINDOW_HALF_WIDTH`` of the
    collapse — ``nonzero_variance_share`` (mean of 1 − ``frac_reward_zero_std``: the
    share of completions in groups with non-zero reward variance) and
    ``empty_mask_share`` (mean of ``objective/cov_mask_empty``: the share of updates
    whose covariance mask selected nothing), each ``None`` when not logged."""

    steps: dict[tuple[str, str], set[int]] = defaultdict(set)
    for run, model, step in keys:
        steps[(run, model)].add(step)
    checks: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    objs: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for m in traces:
        pts = sorted(m["payload"].get("points", []), key=lambda p: p["step"])
        pts = [p for p in pts if p.get("accuracy") is not None]
        if not pts:
            continue
        try:
            chk = detect_training_failure([p["step"] for p in pts], [p["accuracy"] for p in pts])
        except ValueError as exc:
            raise ValueError(f"{m['where']}: {exc}") from None
        checks[(m["run"], m["model"])].append({"benchmark": m["key"], **chk.to_dict()})
        objs[(m["run"], m["model"])].append(chk)
    curve_of = {(c["run"], c["model"]): c["payload"].get("points") or [] for c in curves or []}
    out = []
    for run, model in sorted(set(steps) | set(checks)):
        failed = [c for c in objs[(run, model)] if c.failed]
        milestones = sorted(steps.get((run, model), set()))
        window = None
        if failed:
            # A failed run with no stored checkpoints (e.g. only its trace was recorded)
            # has no milestone to report.
            cands = (
                [last_milestone_before_failure(milestones, c) for c in failed] if milestones else []
            )
            known = [c for c in cands if c is not None]
            reported = min(known) if known else None
            reason = "last pre-failure milestone"
            collapse = min(c.collapse_step for c in failed if c.collapse_step is not None)
            window = failure_window(curve_of.get((run, model), []), collapse)
        else:
            reported = milestones[-1] if milestones else None
            reason = "final checkpoint"
        out.append(
            {
                "run": run,
                "model": model,
                "failed": bool(failed),
                "checks": checks[(run, model)],
                "reported_step": reported,
                "reported_reason": reason,
                "failure_window": window,
            }
        )
    return out


def failure_window(
    points: list[dict[str, Any]], collapse_step: int, half_width: float = FAILURE_WINDOW_HALF_WIDTH
) -> dict[str, Any] | None:
    """docs/estimators.md item 13 in the window of training progress around ``collapse_step``
    (see :func:`failure`); ``None`` without a training curve."""
    pts = sorted((p for p in points if "step" in p and "progress" in p), key=lambda p: p["step"])
    if not pts:
        return None
    # progress of the collapse: from the curve's own step → progress scale
    scale = next((p["progress"] / p["step"] for p in reversed(pts) if p["step"]), None)
    if not scale:
        return None
    centre = collapse_step * scale
    lo, hi = centre - half_width, centre + half_width
    win = [p for p in pts if lo - 1e-12 <= p["progress"] <= hi + 1e-12]

    def share(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    nz = [
        1.0 - float(p["frac_reward_zero_std"])
        for p in win
        if p.get("frac_reward_zero_std") is not None
    ]
    empty = [
        float(p["objective/cov_mask_empty"])
        for p in win
        if p.get("objective/cov_mask_empty") is not None
    ]
    return {
        "collapse_step": collapse_step,
        "progress_low": max(lo, 0.0),
        "progress_high": hi,
        "n_points": len(win),
        "nonzero_variance_share": share(nz),
        "n_nonzero_variance_points": len(nz),
        "empty_mask_share": share(empty),
        "n_empty_mask_points": len(empty),
    }


#: The association's default benchmark and k (the paper's: MATH500 pass@64).
ASSOCIATION_BENCHMARK = "MATH500"
ASSOCIATION_K = 64


def association(
    checkpoints: list[dict[str, Any]],
    passk: list[dict[str, Any]],
    failed: set[tuple[str, str]],
    label: Any,
    *,
    k: int | None,
    benchmark: str | None,
    pooled: bool = False,
    identities: Mapping[str, tuple[str, int]] | None = None,
) -> dict[str, Any] | None:
    """Exploratory retention–pass@k Spearman (docs/estimators.md item 14), per model scale, on one
    named benchmark and k: each method's (run's) retention and pass@k at its reported
    checkpoint; failed (run, model) pairs excluded. Benchmark: ``benchmark``, else
    MATH500 when stored, else the only benchmark, else the first in sorted order (named
    in the output). k: ``k``, else 64 when stored for that benchmark, else its largest.
    ``pooled`` adds a fit over every scale together, labelled ``pooled``. The training
    seeds of one run (``identities``: seeded label → (run, seed)) are one point, the mean
    of its seeds' values (:func:`~rcea.study.report.replicates.seed_points`; ``n_seeds``
    per point); ``rows`` keep one row per seed, ``point`` naming the point it enters."""

    if not passk:
        return None
    benches = sorted({p["benchmark"] for p in passk})
    if benchmark is None:
        benchmark = ASSOCIATION_BENCHMARK if ASSOCIATION_BENCHMARK in benches else benches[0]
        bench_source = (
            "default"
            if benchmark == ASSOCIATION_BENCHMARK
            else ("only benchmark" if len(benches) == 1 else "first benchmark (MATH500 absent)")
        )
    else:
        bench_source = "chosen"
        if benchmark not in benches:
            raise ValueError(
                f"association benchmark {benchmark!r} has no pass@k measurement "
                f"(have: {', '.join(benches)})"
            )
    on_bench = [p for p in passk if p["benchmark"] == benchmark]
    available = [{int(n.removeprefix("pass_at_")) for n in p["pass_at_k"]} for p in on_bench]
    common = set.intersection(*available) if available else set()
    if k is None:
        if not common:
            return None
        k = ASSOCIATION_K if ASSOCIATION_K in common else max(common)
    name = f"pass_at_{k}"
    value = {(p["run"], p["model"], p["step"]): p["pass_at_k"].get(name) for p in on_bench}
    rows = []
    for c in checkpoints:
        if not c["reported"] or c["retention"] is None:
            continue
        point = run_name(identities or {}, c["run"])
        rows.append(
            {
                "method": c["run"],
                "label": label(c["run"], c["model"]),
                "point": point,
                "run": c["run"],
                "model": c["model"],
                "step": c["step"],
                "retention": c["retention"]["retention"],
                "pass_at_k": value.get((c["run"], c["model"], c["step"])),
            }
        )
    if not rows:
        return None

    def fit(sel: list[dict[str, Any]], pooled: bool) -> dict[str, Any]:
        # the seeds of one run are one point (item 17), named by the run (pooled: run:model
        # when the run exists at several scales)
        points = seed_points(
            ({**r, "run": r["point"], "failed": (r["run"], r["model"]) in failed} for r in sel),
            ("retention", "pass_at_k"),
        )
        names = [label(p["run"], p["model"]) if pooled else p["run"] for p in points]
        res = retention_passk_spearman(
            names,
            [p["retention"] for p in points],
            [p["pass_at_k"] for p in points],
            excluded=[n for n, p in zip(names, points, strict=True) if p["failed"]],
        ).to_dict()
        res["n_seeds"] = {n: p["n_seeds"] for n, p in zip(names, points, strict=True)}
        return res

    by_model = {
        m: fit([r for r in rows if r["model"] == m], pooled=False)
        for m in sorted({r["model"] for r in rows})
    }
    out: dict[str, Any] = {
        "benchmark": benchmark,
        "benchmark_source": bench_source,
        "k": k,
        "metric": f"{benchmark} pass@{k}",
        "by_model": by_model,
        "pooled": None,
        "rows": rows,
    }
    if pooled:
        out["pooled"] = {**fit(rows, True), "label": "pooled over models " + ", ".join(by_model)}
    # one scale: its numbers at the top level, as before
    only = next(iter(by_model.values())) if len(by_model) == 1 else None
    for key in ("rho", "p_value", "n", "methods", "excluded", "missing", "n_seeds"):
        out[key] = only[key] if only else None
    return out
