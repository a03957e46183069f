"""The entropy–performance law and the ordering test of a study (docs/estimators.md item 18):
traces in, the report's ``entropy_law`` section out.

One :class:`Trace` per (run, model, training seed): the logged entropies (global, and the
success- and failure-conditioned token entropies of the live metrics) and the validation
accuracy, each as (step, value) points. :func:`law_results` fits every trace
(:func:`rcea.audits.entropy_law.run_law`), the log-linear scaling of a and b per (run, seed)
across model sizes, and the comparison of the entropies; :func:`ordering_results` runs the
RQ1 ordering test per model scale. ``rcea stats entropy-law`` / ``entropy-order`` feed them
from files, :func:`entropy_law_section` from a study's stored measurements (the report, the
bundle and ``rcea report verify``).

From the store (the recorded key mapping, ``entropy_keys`` of each run):

* global entropy: the training curve's ``entropy`` (TRL's and ``rcea train``'s mean token
  entropy of the batch), else ``rcea/token_entropy``; success / failure:
  ``rcea/token_entropy_success`` / ``rcea/token_entropy_failure``;
* accuracy: the run's ``accuracy_trace`` measurements, averaged over benchmarks at the
  steps every benchmark has (``accuracy_benchmarks`` names them);
* a curve recorded without a model label pairs with the run's accuracy trace at any model
  when the run has only one.

Endpoints (ordering): each non-failed (run, model) at its reported checkpoint (item 14);
``entropy`` = the latest training-curve global entropy at or before that step (the law's
H), ``greedy_accuracy`` = greedy accuracy on the named benchmark, ``macro_accuracy`` = the
unweighted mean over benchmarks, ``pass_at_k`` = pass@k on the named benchmark (the
association's rule: the chosen benchmark, else MATH500, else the first; k the chosen one,
else 64, else the largest every run has). The training seeds of one run are one endpoint
(item 17): each number the mean over the seeds that did not fail, ``n_seeds`` recorded.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rcea.audits._common import jsonable
from rcea.audits.entropy_law import (
    DEFAULT_FIT_FRACTION,
    ENTROPY_KINDS,
    RunLaw,
    compare_entropies,
    entropy_order,
    fit_entropy_law,
    law_scaling,
    run_law,
)
from rcea.study.report.replicates import run_name, seed_points

#: Training-curve keys of each entropy, in order of preference.
CURVE_ENTROPY_KEYS: dict[str, tuple[str, ...]] = {
    "global": ("entropy", "rcea/token_entropy"),
    "success": ("rcea/token_entropy_success",),
    "failure": ("rcea/token_entropy_failure",),
}
ORDER_METRICS: tuple[str, ...] = ("greedy_accuracy", "macro_accuracy", "pass_at_k")
DEFAULT_BENCHMARK = "MATH500"
DEFAULT_K = 64

Points = list[tuple[int, float | None]]


@dataclass
class Trace:
    """One (run, model, training seed): entropies by kind and validation accuracy."""

    run: str
    model: str
    seed: int | None = None
    n_params: float | None = None
    entropy: dict[str, Points] = field(default_factory=dict)
    accuracy: list[tuple[int, float]] = field(default_factory=list)
    entropy_keys: dict[str, str] = field(default_factory=dict)
    accuracy_benchmarks: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        seed = "" if self.seed is None else f":seed{self.seed}"
        return f"{self.run}:{self.model}{seed}"


def _json_object(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` in plain JSON types (:func:`jsonable` keeps a dict a dict)."""
    out: dict[str, Any] = jsonable(fields)
    return out


def _law_fields(law: RunLaw | None) -> dict[str, Any]:
    keys = ("a", "b", "r2", "rmse", "n", "ceiling", "early_fit_rmse")
    return {k: None if law is None else getattr(law, k) for k in keys}


def law_results(
    traces: Sequence[Trace],
    *,
    fit_fraction: float = DEFAULT_FIT_FRACTION,
    include_points: bool = True,
) -> dict[str, Any]:
    """Every trace's law (its global-entropy numbers at the top level of its entry, each
    entropy's in ``entropies``), the scaling fits and the entropy comparison, JSON-ready.
    A bad trace raises ``ValueError`` naming it."""
    runs: list[dict[str, Any]] = []
    by_kind: dict[str, dict[str, RunLaw | None]] = {k: {} for k in ENTROPY_KINDS}
    for t in traces:
        per: dict[str, Any] = {}
        for kind in ENTROPY_KINDS:
            points = t.entropy.get(kind)
            law = None
            if points:
                try:
                    law = run_law(
                        [p[0] for p in points],
                        [p[1] for p in points],
                        [p[0] for p in t.accuracy],
                        [p[1] for p in t.accuracy],
                        fit_fraction=fit_fraction,
                    )
                except ValueError as exc:
                    raise ValueError(f"trace {t.label}, {kind} entropy: {exc}") from None
            by_kind[kind][t.label] = law
            per[kind] = None if law is None else law.to_dict(include_points=include_points)
        runs.append(
            {
                "label": t.label,
                "run": t.run,
                "model": t.model,
                "seed": t.seed,
                "n_params": t.n_params,
                **_law_fields(by_kind["global"][t.label]),
                "entropy_keys": dict(t.entropy_keys),
                "accuracy_benchmarks": list(t.accuracy_benchmarks),
                "entropies": per,
            }
        )
    return _json_object(
        {
            "fit_fraction": fit_fraction,
            "runs": runs,
            "scaling": _scaling(traces, by_kind["global"]),
            "comparison": compare_entropies(by_kind).to_dict(),
        }
    )


def _scaling(traces: Sequence[Trace], laws: dict[str, RunLaw | None]) -> list[dict[str, Any]]:
    """Per (run, seed) with N_params at two or more models: a and b on log N (≥ 3 sizes)."""
    groups: dict[tuple[str, int | None], list[Trace]] = defaultdict(list)
    for t in traces:
        if t.n_params is not None:
            groups[(t.run, t.seed)].append(t)
    out = []
    for (run, seed), ts in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or -1)):
        fitted = [t for t in ts if (law := laws.get(t.label)) is not None and law.a is not None]
        if len({t.model for t in ts}) < 2:
            continue
        sizes = [t.n_params for t in fitted]
        shared = len(set(sizes)) != len(sizes)
        if shared:  # two models with one size: no scaling fit
            fitted = []
        sizes_a_b: list[tuple[float, float, float]] = []
        for t in fitted:
            law = laws[t.label]
            # a grouped trace has a size, a fitted one a law with a (and so b) defined
            assert t.n_params is not None and law is not None
            assert law.a is not None and law.b is not None
            sizes_a_b.append((float(t.n_params), law.a, law.b))
        res = law_scaling(
            [t.model for t in fitted],
            [n for n, _, _ in sizes_a_b],
            [a for _, a, _ in sizes_a_b],
            [b for _, _, b in sizes_a_b],
        )
        entry = {"run": run, "seed": seed, **res.to_dict()}
        if shared:
            entry["reason"] = "two models share one n_params: the sizes must differ"
        out.append(entry)
    return out


def ordering_results(
    rows: Sequence[dict[str, Any]],
    *,
    seed: int = 0,
    metrics: Sequence[str] = ORDER_METRICS,
) -> dict[str, Any]:
    """RQ1 per model scale over ``rows`` (each: ``run``, ``model``, ``entropy``, the
    metrics present, optional ``failed`` and ``n_seeds``, the training seeds averaged into
    the row, 1 when absent): ``by_model`` → the ordering test with ``n_seeds`` per run; with one
    model its ``kendall_tau`` and ``p_value`` (metric → value) also at the top level."""
    present = [m for m in metrics if any(r.get(m) is not None for r in rows)]
    by_model: dict[str, Any] = {}
    for model in sorted({str(r["model"]) for r in rows}):
        sel = [r for r in rows if str(r["model"]) == model]
        res = entropy_order(
            model,
            [str(r["run"]) for r in sel],
            [float(r["entropy"]) for r in sel],
            {m: [r.get(m) for r in sel] for m in present},
            excluded=[str(r["run"]) for r in sel if r.get("failed")],
            seed=seed,
        )
        by_model[model] = {
            **res.to_dict(),
            "n_seeds": {str(r["run"]): int(r.get("n_seeds", 1)) for r in sel},
        }
    only = next(iter(by_model.values())) if len(by_model) == 1 else None
    return _json_object(
        {
            "metrics": present,
            "by_model": by_model,
            "kendall_tau": {m["metric"]: m["kendall_tau"] for m in only["metrics"]}
            if only
            else None,
            "p_value": {m["metric"]: m["p_value"] for m in only["metrics"]} if only else None,
        }
    )


def order_sentence(ordering: dict[str, Any]) -> str:
    """Whether endpoint global entropy ordered the runs' performance, in words."""
    parts = []
    for model, res in ordering["by_model"].items():
        # a run of several training seeds is one endpoint, their mean (item 17): say so
        seeded = [f"{r} of {n}" for r, n in sorted((res.get("n_seeds") or {}).items()) if n > 1]
        means = f"; the mean of the seeds for {', '.join(seeded)}" if seeded else ""
        for m in res["metrics"]:
            if m["kendall_tau"] is None or m["p_value"] is None:
                parts.append(f"{model} {m['metric']}: undefined (n = {m['n']}{means})")
                continue
            verdict = "ordered" if m["p_value"] < 0.05 else "did not order"
            # the exact test's smallest p is 2/n! (the two extreme orderings, no ties): with
            # n ≤ 4 runs no ordering reaches 0.05, which the verdict alone would hide
            floor = 2.0 / math.factorial(m["n"]) if m["n"] <= 9 else 0.0
            if floor >= 0.05:
                verdict += f": with n = {m['n']} the smallest attainable p is {floor:.3f}"
            parts.append(
                f"{model} {m['metric']}: τ-b = {m['kendall_tau']:+.2f}, p = {m['p_value']:.3f} "
                f"(n = {m['n']}{means}, {verdict})"
            )
    if not parts:
        return "No endpoints to order."
    return (
        "Endpoint global entropy against performance, per model scale (two-sided permutation "
        "test, 0.05): " + "; ".join(parts) + "."
    )


def law_summary(section: dict[str, Any] | None) -> list[str]:
    """What the section finds, in a few lines: per model scale, for how many runs the
    global-entropy law and the early fit are defined (with the ranges of a and R² and the
    median early-fit RMSE, or the reasons they are not), the size it records, and per run
    the scaling across sizes or why there is none (``rcea demo`` prints them, the view's
    Entropy page shows them)."""
    if not section or not section.get("runs"):
        return []
    lines = []
    by_model: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in section["runs"]:
        by_model[str(r["model"])].append(r)
    pct = f"{section['fit_fraction']:.0%}"
    for model, runs in sorted(by_model.items()):
        sizes = sorted({r["n_params"] for r in runs if r.get("n_params")})
        size = (
            f"N = {', '.join(f'{n:,.0f}' for n in sizes)} non-embedding parameters"
            if sizes
            else "no n_params recorded"
        )
        fitted = [r for r in runs if r["a"] is not None]
        text = (
            f"{model} ({size}): the law R = −a·exp(H) + b fitted for {len(fitted)} of "
            f"{len(runs)} run(s)"
        )
        if fitted:
            a = [r["a"] for r in fitted]
            r2 = [r["r2"] for r in fitted if r["r2"] is not None]
            text += f" (a {min(a):+.3g} … {max(a):+.3g}"
            text += f", R² {min(r2):.2f} … {max(r2):.2f})" if r2 else ")"
        early = [r["early_fit_rmse"] for r in fitted if r["early_fit_rmse"] is not None]
        text += (
            f"; the fit on the first {pct} of steps predicted the rest for {len(early)} "
            f"of {len(runs)}"
        )
        if early:
            text += f" (median RMSE {float(np.median(early)):.3f})"
        reasons = sorted(
            {
                str(((r["entropies"] or {}).get("global") or {}).get("reason"))
                for r in runs
                if r["early_fit_rmse"] is None
            }
        )
        if reasons:
            text += f"; undefined where: {'; '.join(reasons)}"
        lines.append(text + ".")
    scaling = section.get("scaling") or []
    if not scaling:
        lines.append(
            "Scaling across sizes: none (it needs the runs at two or more model sizes with "
            "n_params recorded, and three sizes for the fit)."
        )
    undefined: dict[str, list[str]] = defaultdict(list)
    for e in scaling:
        if e.get("reason"):
            undefined[str(e["reason"])].append(str(e["run"]))
            continue
        lines.append(
            f"Scaling of {e['run']} across {len(e['labels'])} sizes: a = "
            f"{e['a_fit']['slope']:+.3g}·log N + {e['a_fit']['intercept']:.3g}, b = "
            f"{e['b_fit']['slope']:+.3g}·log N + {e['b_fit']['intercept']:.3g}; the largest "
            f"({e['largest']}) predicted from the others: ceiling {e['predicted_ceiling']:.3f} "
            f"vs its own {e['fitted_ceiling']:.3f} (error {e['ceiling_error']:+.3f})."
        )
    for reason, runs_ in sorted(undefined.items()):
        lines.append(f"Scaling across sizes, undefined for {', '.join(runs_)}: {reason}.")
    return lines


# --------------------------------------------------------------------------- from the store


def _points_of(points: Iterable[dict[str, Any]], key: str) -> Points:
    out: Points = []
    for p in points:
        if key in p and "step" in p:
            v = p[key]
            out.append((int(p["step"]), None if v is None else float(v)))
    return out


def _curve_entropies(points: list[dict[str, Any]]) -> tuple[dict[str, Points], dict[str, str]]:
    entropy: dict[str, Points] = {}
    keys: dict[str, str] = {}
    for kind, candidates in CURVE_ENTROPY_KEYS.items():
        for key in candidates:
            pts = _points_of(points, key)
            if any(v is not None and math.isfinite(v) for _, v in pts):
                entropy[kind], keys[kind] = pts, key
                break
    return entropy, keys


def _macro_accuracy(traces: dict[str, list[dict[str, Any]]]) -> list[tuple[int, float]]:
    """Mean accuracy over benchmarks at the steps every benchmark has."""
    per = {
        bench: {int(p["step"]): float(p["accuracy"]) for p in pts if p.get("accuracy") is not None}
        for bench, pts in traces.items()
    }
    steps = set.intersection(*(set(v) for v in per.values())) if per else set()
    return [(s, sum(v[s] for v in per.values()) / len(per)) for s in sorted(steps)]


def traces_from_measurements(
    curves: Sequence[dict[str, Any]], accuracy: Sequence[dict[str, Any]]
) -> tuple[list[Trace], list[str]]:
    """The study's traces (module docstring) and the (run, model)s left without one
    (a curve without an accuracy trace, or the reverse), as ``run:model`` lines."""
    acc: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = defaultdict(dict)
    for m in accuracy:
        acc[(m["run"], m["model"])][m["key"] or "accuracy"] = m["payload"].get("points") or []
    curve_of = {(c["run"], c["model"]): c for c in curves}
    models_of: dict[str, list[str]] = defaultdict(list)
    for run, model in acc:
        models_of[run].append(model)
    traces, missing = [], []
    used: set[tuple[str, str]] = set()
    for (run, model), benches in sorted(acc.items()):
        curve = curve_of.get((run, model))
        if curve is None and len(models_of[run]) == 1:
            curve = curve_of.get((run, ""))
        if curve is None:
            missing.append(f"{run}:{model}: no training curve")
            continue
        used.add((curve["run"], curve["model"]))
        payload = curve["payload"]
        entropy, keys = _curve_entropies(payload.get("points") or [])
        if not entropy:
            missing.append(f"{run}:{model}: the training curve logs no entropy")
            continue
        n_params = payload.get("n_params")
        traces.append(
            Trace(
                run=run,
                model=model,
                seed=payload.get("seed"),
                n_params=float(n_params) if n_params else None,
                entropy=entropy,
                accuracy=_macro_accuracy(benches),
                entropy_keys=keys,
                accuracy_benchmarks=sorted(benches),
            )
        )
    for key in sorted(set(curve_of) - used):
        missing.append(f"{key[0]}:{key[1] or '?'}: no accuracy trace")
    return traces, missing


def _latest(points: Points, step: int) -> float | None:
    best = None
    for s, v in sorted(points):
        if s <= step and v is not None and math.isfinite(v):
            best = v
    return best


def study_endpoints(
    traces: Sequence[Trace],
    checkpoints: Sequence[dict[str, Any]],
    greedy: Sequence[dict[str, Any]],
    passk: Sequence[dict[str, Any]],
    failed: set[tuple[str, str]],
    *,
    benchmark: str | None = None,
    k: int | None = None,
    identities: Mapping[str, tuple[str, int]] | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """The endpoint rows of the ordering test (module docstring) and the pass@k metric's
    name (``'<benchmark> pass@<k>'``, None without pass@k). The training seeds of one run
    (``identities``: seeded label → (run, seed)) are one endpoint named by the run, each
    number the mean over its seeds (:func:`~rcea.study.report.replicates.seed_points`;
    ``n_seeds``)."""
    trace_of = {(t.run, t.model): t for t in traces}
    benches = sorted({p["benchmark"] for p in passk} | {b for g in greedy for b in g["accuracy"]})
    if benchmark is None and benches:
        benchmark = DEFAULT_BENCHMARK if DEFAULT_BENCHMARK in benches else benches[0]
    on_bench = [p for p in passk if p["benchmark"] == benchmark]
    if k is None and on_bench:
        common = set.intersection(
            *({int(n.removeprefix("pass_at_")) for n in p["pass_at_k"]} for p in on_bench)
        )
        k = (DEFAULT_K if DEFAULT_K in common else max(common)) if common else None
    pk = {(p["run"], p["model"], p["step"]): p["pass_at_k"].get(f"pass_at_{k}") for p in on_bench}
    gr = {(g["run"], g["model"], g["step"]): g for g in greedy}
    rows = []
    for c in checkpoints:
        if not c["reported"]:
            continue
        key = (c["run"], c["model"], c["step"])
        t = trace_of.get((c["run"], c["model"]))
        h = _latest(t.entropy["global"], c["step"]) if t and "global" in t.entropy else None
        if h is None:
            continue
        g = gr.get(key) or {}
        rows.append(
            {
                "run": run_name(identities or {}, c["run"]),
                "model": c["model"],
                "entropy": h,
                "greedy_accuracy": (g.get("accuracy") or {}).get(benchmark),
                "macro_accuracy": g.get("macro_accuracy"),
                "pass_at_k": pk.get(key),
                "failed": (c["run"], c["model"]) in failed,
            }
        )
    # the seeds of one run are one endpoint (item 17)
    points = seed_points(rows, ("entropy", *ORDER_METRICS))
    return points, (f"{benchmark} pass@{k}" if k is not None else None)


def entropy_law_section(
    curves: Sequence[dict[str, Any]],
    accuracy: Sequence[dict[str, Any]],
    checkpoints: Sequence[dict[str, Any]],
    greedy: Sequence[dict[str, Any]],
    passk: Sequence[dict[str, Any]],
    failed: set[tuple[str, str]],
    *,
    fit_fraction: float = DEFAULT_FIT_FRACTION,
    seed: int = 0,
    benchmark: str | None = None,
    k: int | None = None,
    identities: Mapping[str, tuple[str, int]] | None = None,
) -> dict[str, Any] | None:
    """The report's ``entropy_law`` section (None when the study has no training curve
    paired with an accuracy trace): the law per trace, the scaling fits, the entropy
    comparison with its sentence, and the ordering test with its sentence."""
    traces, missing = traces_from_measurements(curves, accuracy)
    if not traces:
        return None
    try:
        law = law_results(traces, fit_fraction=fit_fraction)
        rows, metric = study_endpoints(
            traces,
            checkpoints,
            greedy,
            passk,
            failed,
            benchmark=benchmark,
            k=k,
            identities=identities,
        )
        ordering = ordering_results(rows, seed=seed) if rows else None
    except ValueError as exc:  # a bad stored trace: said in the section, the rest stands
        return _failed_section(fit_fraction, missing, str(exc))
    return _json_object(
        {
            **law,
            "without_trace": missing,
            "pass_at_k_metric": metric,
            "ordering": ordering,
            "ordering_sentence": order_sentence(ordering) if ordering else None,
            "error": None,
        }
    )


def _failed_section(fit_fraction: float, missing: list[str], error: str) -> dict[str, Any]:
    return {
        "fit_fraction": fit_fraction,
        "runs": [],
        "scaling": [],
        "comparison": {
            "kinds": [],
            "runs": [],
            "mean_early_fit_rmse": {},
            "mean_r2": {},
            "best": None,
            "sentence": f"No comparison: {error}.",
        },
        "without_trace": missing,
        "pass_at_k_metric": None,
        "ordering": None,
        "ordering_sentence": None,
        "error": error,
    }


def law_quantities(section: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The section's published numbers as ``quantities[]`` entries' varying part (name,
    run, model, key, value, n): per run and entropy a, b, R², RMSE, ceiling and
    early-fit RMSE (key = the entropy), per model and metric τ-b and its p (key = the
    metric)."""
    out: list[dict[str, Any]] = []
    if not section:
        return out
    for r in section["runs"]:
        for kind, law in r["entropies"].items():
            if law is None:
                continue
            for name in ("a", "b", "r2", "rmse", "ceiling", "early_fit_rmse"):
                out.append(
                    {
                        "name": f"entropy_law_{name}",
                        "run": r["run"],
                        "model": r["model"],
                        "key": kind,
                        "value": law[name],
                        "n": law["n_rest"] if name == "early_fit_rmse" else law["n"],
                    }
                )
    for model, res in ((section.get("ordering") or {}).get("by_model") or {}).items():
        for m in res["metrics"]:
            for name in ("kendall_tau", "p_value"):
                out.append(
                    {
                        "name": f"entropy_order_{name}",
                        "run": None,
                        "model": model,
                        "key": m["metric"],
                        "value": m[name],
                        "n": m["n"],
                    }
                )
    return out


def law_curves(
    section: dict[str, Any] | None, *, n_grid: int = 60
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What the view draws for each run and entropy: the paired points (``series``,
    ``entropy``, ``step``, ``H``, ``R``, ``window`` early / rest) and, on a grid over the
    logged H, the fitted law (``fitted``), the early fit's prediction (``early``) and its
    95 % prediction band (``low``, ``high``), refitted from the section's points with
    :func:`rcea.audits.entropy_law.fit_entropy_law` (the same fits as the section's)."""
    points: list[dict[str, Any]] = []
    curves: list[dict[str, Any]] = []
    if not section:
        return points, curves
    for r in section["runs"]:
        for kind, law in (r.get("entropies") or {}).items():
            pts = (law or {}).get("points")
            if not pts or not pts["steps"]:
                continue
            h = np.asarray(pts["entropy"], dtype=np.float64)
            y = np.asarray(pts["accuracy"], dtype=np.float64)
            steps = np.asarray(pts["steps"], dtype=np.float64)
            cutoff = law["cutoff_step"]
            early_mask = steps <= cutoff if cutoff is not None else np.zeros(h.size, bool)
            for s, hv, rv, e in zip(steps, h, y, early_mask, strict=True):
                points.append(
                    {"series": r["label"], "entropy": kind, "step": int(s), "H": float(hv),
                     "R": float(rv), "window": "early" if e else "rest"}
                )  # fmt: skip
            fit = fit_entropy_law(h, y)
            early = fit_entropy_law(h[early_mask], y[early_mask])
            if not fit.defined and not early.defined:
                continue
            grid = np.linspace(float(h.min()), float(h.max()), n_grid)
            fitted = fit.predict(grid) if fit.defined else np.full(n_grid, np.nan)
            pred = early.predict(grid) if early.defined else np.full(n_grid, np.nan)
            low, high = early.band(grid) if early.defined else (pred, pred)
            for i, g in enumerate(grid):
                curves.append(
                    {"series": r["label"], "entropy": kind, "H": float(g),
                     "fitted": _finite(fitted[i]), "early": _finite(pred[i]),
                     "low": _finite(low[i]), "high": _finite(high[i])}
                )  # fmt: skip
    return points, curves


def _finite(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None
