"""Tidy frames cut from a ``build_report`` dict (the JSON of ``app.report.schema.StudyReport``,
validated when the view loads it; keys in docs/report-keys.md)
for the Entropy, Modes and Covariance pages. Pure functions: no store, no Streamlit, no
recomputation — every number is the report's own."""

from __future__ import annotations

from typing import Any

import pandas as pd

#: The JSON form of :class:`app.report.schema.StudyReport`.
Report = dict[str, Any]

CHECKPOINT_COLUMNS = ["checkpoint", "run", "model", "step", "reported", "failed_run"]


def checkpoint_label(run: str, model: str, step: int) -> str:
    """How a checkpoint is named across the view: ``run · model @ step``."""
    return f"{run} · {model} @ {step}"


def _ckpt(c: dict[str, Any]) -> dict[str, Any]:
    return {
        "checkpoint": checkpoint_label(c["run"], c["model"], c["step"]),
        "run": c["run"],
        "model": c["model"],
        "step": c["step"],
        "reported": c["reported"],
        "failed_run": c["failed_run"],
    }


def training_frame(report: Report) -> pd.DataFrame:
    """One row per logged training point: ``run`` (objective), ``model``, ``series``
    (``run · model``: one line per (run, model), never two scales merged), ``step``,
    ``progress`` and whatever the producer logged (``entropy``, ``reward``, ``loss``, ...)."""
    rows = [
        {"run": c["run"], "model": c["model"], "series": f"{c['run']} · {c['model']}", **p}
        for c in report["training_curves"]
        for p in c["points"]
    ]
    return pd.DataFrame(
        rows, columns=None if rows else ["run", "model", "series", "step", "progress"]
    )


def training_metrics(frame: pd.DataFrame) -> list[str]:
    """The numeric logged columns of ``training_frame`` besides step and progress,
    ``entropy`` first."""
    skip = {"run", "model", "series", "step", "progress"}
    cols = [c for c in frame.columns if c not in skip and pd.api.types.is_numeric_dtype(frame[c])]
    return sorted(cols, key=lambda c: (c != "entropy", c))


def ratio_frame(report: Report) -> pd.DataFrame:
    """Failed/successful token-entropy ratios per checkpoint (DESIGN.md item 3): the
    paired geometric-mean ratio with its bootstrap CI, |E| and paired coverage, the broad
    ratio with both outcome coverages, the direction share and the sign-test p."""
    rows = []
    for c in report["checkpoints"]:
        e = c.get("entropy") or {}
        rows.append(
            {
                **_ckpt(c),
                "paired_ratio": e.get("paired_ratio"),
                "ci_low": e.get("paired_ci_low"),
                "ci_high": e.get("paired_ci_high"),
                "n_paired": e.get("n_paired_questions"),
                "coverage_paired": e.get("coverage_paired"),
                "broad_ratio": e.get("broad_ratio"),
                "coverage_success": e.get("coverage_success"),
                "coverage_failure": e.get("coverage_failure"),
                "direction_share": e.get("direction_share"),
                "sign_test_p": e.get("sign_test_p"),
                "note": c.get("entropy_error"),
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            *CHECKPOINT_COLUMNS,
            "paired_ratio",
            "ci_low",
            "ci_high",
            "n_paired",
            "coverage_paired",
            "broad_ratio",
            "coverage_success",
            "coverage_failure",
            "direction_share",
            "sign_test_p",
            "note",
        ],
    )


def decomposition_frame(report: Report) -> pd.DataFrame:
    """Prop. 1 per checkpoint (DESIGN.md items 1–2), macro over questions: H(R|x), Ĥ(Y|x),
    Ĥ(Y|R=r,x), the reconstruction residual, mean token entropy and the Eq. 5 mixture
    residual."""
    rows = []
    for c in report["checkpoints"]:
        e = c.get("entropy") or {}
        rows.append(
            {
                **_ckpt(c),
                "n": c["n"],
                "accuracy": c["accuracy"],
                "H(R|x)": e.get("mean_outcome_entropy"),
                "H(Y|x)": e.get("mean_sequence_entropy"),
                "H(Y|R=1,x)": e.get("mean_conditional_entropy_success"),
                "H(Y|R=0,x)": e.get("mean_conditional_entropy_failure"),
                "max |residual|": e.get("max_abs_residual"),
                "H_tok": e.get("mean_token_entropy"),
                "max |mixture residual|": e.get("max_abs_token_mixture_residual"),
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            *CHECKPOINT_COLUMNS,
            "n",
            "accuracy",
            "H(R|x)",
            "H(Y|x)",
            "H(Y|R=1,x)",
            "H(Y|R=0,x)",
            "max |residual|",
            "H_tok",
            "max |mixture residual|",
        ],
    )


def retention_frame(report: Report) -> pd.DataFrame:
    """Rarefied retention per non-base checkpoint with its question-bootstrap CI
    (DESIGN.md item 5, Table 1/A6 style): eligible count out of its denominator and the
    mean N̄_eff at base and checkpoint."""
    rows = []
    for c in report["checkpoints"]:
        r = c.get("retention")
        if r is None and not c.get("retention_error"):
            continue
        r = r or {}
        rows.append(
            {
                **_ckpt(c),
                "retention": r.get("retention"),
                "ci_low": r.get("ci_low"),
                "ci_high": r.get("ci_high"),
                "n_eligible": r.get("n_eligible"),
                "n_denominator": r.get("n_denominator"),
                "mean_n_eff_base": r.get("mean_n_eff_base"),
                "mean_n_eff_checkpoint": r.get("mean_n_eff_checkpoint"),
                "note": c.get("retention_error"),
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            *CHECKPOINT_COLUMNS,
            "retention",
            "ci_low",
            "ci_high",
            "n_eligible",
            "n_denominator",
            "mean_n_eff_base",
            "mean_n_eff_checkpoint",
            "note",
        ],
    )


def mode_entropy_frame(report: Report) -> pd.DataFrame:
    """Mode entropy per checkpoint (DESIGN.md item 5): eligible questions, mean N_eff and
    Ĥ(Z|C_x), included and uncertain counts, coverage."""
    keys = [
        "n_questions",
        "n_eligible",
        "mean_n_eff",
        "mean_mode_entropy",
        "n_included",
        "n_uncertain",
        "coverage",
    ]
    rows = [
        {**_ckpt(c), **{k: (c.get("modes") or {}).get(k) for k in keys}}
        for c in report["checkpoints"]
        if c.get("modes")
    ]
    return pd.DataFrame(rows, columns=[*CHECKPOINT_COLUMNS, *keys])


def transitions_frame(report: Report) -> pd.DataFrame:
    """Predicted vs observed mean ΔH per adjacent-checkpoint transition (DESIGN.md item 6);
    ``in_fit`` is False for failed runs (excluded from the fit, still shown)."""
    cov = report.get("covariance") or {}
    rows = [
        {
            "transition": t["transition"],
            "run": t["run"],
            "model": t["model"],
            "from_step": t["from_step"],
            "to_step": t["to_step"],
            "predicted": t["predicted"],
            "observed": t["observed"],
            "n_positions": t.get("n_positions"),
            "in_fit": not t.get("failed_run", False),
        }
        for t in cov.get("transitions", [])
    ]
    return pd.DataFrame(
        rows,
        columns=[
            "transition",
            "run",
            "model",
            "from_step",
            "to_step",
            "predicted",
            "observed",
            "n_positions",
            "in_fit",
        ],
    )


FIT_COLUMNS = [
    "n",
    "sign_agreement",
    "spearman_rho",
    "pearson_r",
    "slope",
    "intercept",
    "r_squared",
    "median_abs_error",
    "median_relative_error",
]


def fit_frame(report: Report) -> pd.DataFrame:
    """Fit statistics (Table A7 style): the pooled fit over non-failed runs, then one row
    per model group."""
    cov = report.get("covariance") or {}
    rows = []
    if cov.get("pooled"):
        rows.append({"scope": "pooled (non-failed)", **_pick(cov["pooled"], FIT_COLUMNS)})
    for name, fit in sorted((cov.get("groups") or {}).items()):
        rows.append({"scope": name, **_pick(fit, FIT_COLUMNS)})
    return pd.DataFrame(rows, columns=["scope", *FIT_COLUMNS])


def _pick(d: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    return {k: d.get(k) for k in keys}


def q99_frame(report: Report) -> pd.DataFrame:
    """The reward-stratified tail per endpoint (DESIGN.md item 7, q99 table): share of
    positive covariance mass in each stratum's tail, the selected fraction (ties kept),
    the gap in percentage points; failed runs kept and marked."""
    tail = report.get("tail") or {}
    rows = []
    for ep in tail.get("endpoints", []):
        rep = ep["report"]
        s, f = rep.get("success", {}), rep.get("failure", {})
        rows.append(
            {
                "endpoint": checkpoint_label(ep["run"], ep["model"], ep["step"]),
                "failed_run": ep["failed_run"],
                "quantile": rep.get("quantile"),
                "success_share": s.get("share"),
                "success_selected_fraction": s.get("selected_fraction"),
                "failure_share": f.get("share"),
                "failure_selected_fraction": f.get("selected_fraction"),
                "gap_pp": rep.get("gap_failure_minus_success_pp"),
                "n_tokens": rep.get("n_tokens"),
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "endpoint",
            "failed_run",
            "quantile",
            "success_share",
            "success_selected_fraction",
            "failure_share",
            "failure_selected_fraction",
            "gap_pp",
            "n_tokens",
        ],
    )


def budget_frame(report: Report) -> pd.DataFrame:
    """Equal-count budget sensitivity per endpoint (Table A8 style)."""
    tail = report.get("tail") or {}
    rows = [
        {
            "endpoint": checkpoint_label(ep["run"], ep["model"], ep["step"]),
            "failed_run": ep["failed_run"],
            **b,
        }
        for ep in tail.get("endpoints", [])
        for b in ep["report"].get("budgets", [])
    ]
    return pd.DataFrame(
        rows,
        columns=[
            "endpoint",
            "failed_run",
            "budget",
            "success_k",
            "failure_k",
            "success_share",
            "failure_share",
            "gap_failure_minus_success_pp",
        ],
    )


def failure_frame(report: Report) -> pd.DataFrame:
    """The failure verdict per (run, model) (DESIGN.md items 9, 13, 14): the reported
    checkpoint and, next to a failure, the failure-window shares from the training curve."""
    rows = []
    for f in report["failure"]:
        w = f.get("failure_window") or {}
        rows.append(
            {
                "run": f["run"],
                "model": f["model"],
                "failed": f["failed"],
                "reported_step": f["reported_step"],
                "reported_reason": f["reported_reason"],
                "collapse_step": w.get("collapse_step"),
                "nonzero_variance_share": w.get("nonzero_variance_share"),
                "empty_mask_share": w.get("empty_mask_share"),
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "run",
            "model",
            "failed",
            "reported_step",
            "reported_reason",
            "collapse_step",
            "nonzero_variance_share",
            "empty_mask_share",
        ],
    )


def association_frame(report: Report) -> pd.DataFrame:
    """The retention–pass@k Spearman per model scale (and pooled only when requested,
    labelled), on the report's one named benchmark and k."""
    a = report.get("association")
    if not a:
        return pd.DataFrame(columns=["scope", "metric", "rho", "p_value", "n", "excluded"])
    fits = [(m, fit) for m, fit in a["by_model"].items()]
    if a.get("pooled"):
        fits.append((a["pooled"]["label"], a["pooled"]))
    return pd.DataFrame(
        [
            {
                "scope": scope,
                "metric": a["metric"],
                "rho": fit["rho"],
                "p_value": fit["p_value"],
                "n": fit["n"],
                "excluded": ", ".join(fit["excluded"]),
            }
            for scope, fit in fits
        ],
        columns=["scope", "metric", "rho", "p_value", "n", "excluded"],
    )


def direction_counts_frame(counts: dict[str, Any]) -> pd.DataFrame:
    """The report's ``tail.direction_counts`` (the q99 tail, then each equal-count
    budget) as one row per selection; lists are joined for display."""
    rows = [counts.get("quantile_tail") or {}, *(counts.get("budgets") or [])]
    flat = [
        {k: ", ".join(map(str, v)) if isinstance(v, list | tuple) else v for k, v in r.items()}
        for r in rows
        if r
    ]
    return pd.DataFrame(flat)
