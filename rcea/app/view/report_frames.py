"""Tidy frames cut from the validated report (``rcea.study.report.schema.StudyReport``, the model
the API returns and the bundle carries; keys in docs/report-keys.md) for the Entropy, Modes,
Covariance and Seeds pages. Pure functions: no store, no Streamlit, no recomputation — every
number is the report's own, read through the typed sections."""

from __future__ import annotations

from typing import Any

import pandas as pd

from rcea.audits.covariance import FIT_SUMMARY
from rcea.audits.tail import TailDirectionSummary
from rcea.study.report.publication import changed_marks, display_label
from rcea.study.report.replicates import estimator_name
from rcea.study.report.schema import CheckpointReport, StudyReport

Report = StudyReport

CHECKPOINT_COLUMNS = ["checkpoint", "run", "model", "step", "reported", "failed_run"]


def checkpoint_label(run: str, model: str, step: int) -> str:
    """How a checkpoint is named across the view: ``run · model @ step``."""
    return f"{run} · {model} @ {step}"


def _ckpt(c: CheckpointReport) -> dict[str, Any]:
    return {
        "checkpoint": checkpoint_label(c.run, c.model, c.step),
        "run": c.run,
        "model": c.model,
        "step": c.step,
        "reported": c.reported,
        "failed_run": c.failed_run,
    }


def training_frame(report: Report) -> pd.DataFrame:
    """One row per logged training point: ``run`` (objective), ``model``, ``series``
    (``run · model``: one line per (run, model), never two scales merged), ``step``,
    ``progress`` and whatever the producer logged (``entropy``, ``reward``, ``loss``, ...)."""
    rows = [
        {"run": c.run, "model": c.model, "series": f"{c.run} · {c.model}", **p.model_dump()}
        for c in report.training_curves
        for p in c.points
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


def _fields(source: Any, fields: dict[str, str]) -> dict[str, Any]:
    """Column → ``source``'s attribute of ``fields``; every one ``None`` without a source."""
    return {column: source and getattr(source, name) for column, name in fields.items()}


#: ratio_frame's columns → the ``CheckpointEntropy`` attribute each shows.
_RATIO_FIELDS = {
    "paired_ratio": "paired_ratio",
    "ci_low": "paired_ci_low",
    "ci_high": "paired_ci_high",
    "n_paired": "n_paired_questions",
    "coverage_paired": "coverage_paired",
    "broad_ratio": "broad_ratio",
    "coverage_success": "coverage_success",
    "coverage_failure": "coverage_failure",
    "direction_share": "direction_share",
    "sign_test_p": "sign_test_p",
}


def ratio_frame(report: Report) -> pd.DataFrame:
    """Failed/successful token-entropy ratios per checkpoint (docs/estimators.md item 3): the
    paired geometric-mean ratio with its bootstrap CI, |E| and paired coverage, the broad
    ratio with both outcome coverages, the direction share and the sign-test p."""
    rows = []
    for c in report.checkpoints:
        rows.append({**_ckpt(c), **_fields(c.entropy, _RATIO_FIELDS), "note": c.entropy_error})
    return pd.DataFrame(rows, columns=[*CHECKPOINT_COLUMNS, *_RATIO_FIELDS, "note"])


#: decomposition_frame's columns → the ``OutcomeReport`` and ``EntropySection`` attributes.
_OUTCOME_FIELDS = {
    "H(R|x)": "mean_outcome_entropy",
    "coverage (R=1)": "coverage_success",
    "coverage (R=0)": "coverage_failure",
}
_DECOMPOSITION_FIELDS = {
    "H(Y|x)": "mean_sequence_entropy",
    "H(Y|R=1,x)": "mean_conditional_entropy_success",
    "H(Y|R=0,x)": "mean_conditional_entropy_failure",
    "max |residual|": "max_abs_residual",
    "H_tok": "mean_token_entropy",
    "max |mixture residual|": "max_abs_token_mixture_residual",
}


def decomposition_frame(report: Report) -> pd.DataFrame:
    """Prop. 1 per checkpoint (docs/estimators.md items 1–2), macro over questions: H(R|x), Ĥ(Y|x),
    Ĥ(Y|R=r,x), the reconstruction residual, mean token entropy and the Eq. 5 mixture
    residual. H(R|x) and the outcome coverages need rewards only (``outcome``): they are
    there for a checkpoint without token entropies too."""
    rows = []
    for c in report.checkpoints:
        e = c.entropy
        rows.append(
            {
                **_ckpt(c),
                "n": c.n,
                "accuracy": c.accuracy,
                **_fields(c.outcome, _OUTCOME_FIELDS),
                **_fields(e, _DECOMPOSITION_FIELDS),
            }
        )
    columns = [*CHECKPOINT_COLUMNS, "n", "accuracy", *_OUTCOME_FIELDS, *_DECOMPOSITION_FIELDS]
    return pd.DataFrame(rows, columns=columns)


_RETENTION_FIELDS = {
    name: name
    for name in (
        "retention",
        "ci_low",
        "ci_high",
        "n_eligible",
        "n_denominator",
        "mean_n_eff_base",
        "mean_n_eff_checkpoint",
    )
}


def retention_frame(report: Report) -> pd.DataFrame:
    """Rarefied retention per non-base checkpoint with its question-bootstrap CI
    (docs/estimators.md item 5, Table 1/A6 style): eligible count out of its denominator and the
    mean N̄_eff at base and checkpoint."""
    rows = []
    for c in report.checkpoints:
        r = c.retention
        if r is None and not c.retention_error:
            continue
        rows.append({**_ckpt(c), **_fields(r, _RETENTION_FIELDS), "note": c.retention_error})
    return pd.DataFrame(rows, columns=[*CHECKPOINT_COLUMNS, *_RETENTION_FIELDS, "note"])


def mode_entropy_frame(report: Report) -> pd.DataFrame:
    """Mode entropy per checkpoint (docs/estimators.md item 5): eligible questions, mean N_eff and
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
        {**_ckpt(c), **c.modes.model_dump(include=set(keys))}
        for c in report.checkpoints
        if c.modes is not None
    ]
    return pd.DataFrame(rows, columns=[*CHECKPOINT_COLUMNS, *keys])


#: A transition's columns (its attributes of the same names), in the covariance tables
#: of item 6 and, between a group and the run's failure, of item 16's mode groups.
TRANSITION_COLUMNS = [
    "transition",
    "run",
    "model",
    "from_step",
    "to_step",
    "predicted",
    "observed",
    "n_positions",
]


def transitions_frame(report: Report) -> pd.DataFrame:
    """Predicted vs observed mean ΔH per adjacent-checkpoint transition (docs/estimators.md item 6);
    ``in_fit`` is False for failed runs (excluded from the fit, still shown)."""
    cov = report.covariance
    rows = [
        {**{c: getattr(t, c) for c in TRANSITION_COLUMNS}, "in_fit": not t.failed_run}
        for t in (cov.transitions if cov else [])
    ]
    return pd.DataFrame(rows, columns=[*TRANSITION_COLUMNS, "in_fit"])


FIT_COLUMNS = ["n", *FIT_SUMMARY]  # the fit's own key list (rcea.audits.covariance)


def fit_frame(report: Report) -> pd.DataFrame:
    """Fit statistics (Table A7 style): the pooled fit over non-failed runs, then one row
    per model group."""
    cov = report.covariance
    rows = []
    if cov is not None:
        for name, fit in [("pooled (non-failed)", cov.pooled), *sorted(cov.groups.items())]:
            rows.append({"scope": name, **_fit_row(fit)})
    return pd.DataFrame(rows, columns=["scope", *FIT_COLUMNS])


def q99_frame(report: Report) -> pd.DataFrame:
    """The reward-stratified tail per endpoint (docs/estimators.md item 7, q99 table): share of
    positive covariance mass in each stratum's tail, the selected fraction (ties kept),
    the gap in percentage points; failed runs kept and marked."""
    rows = []
    for ep in report.tail.endpoints if report.tail else []:
        rep, s, f = ep.report, ep.report.success, ep.report.failure
        rows.append(
            {
                "endpoint": checkpoint_label(ep.run, ep.model, ep.step),
                "failed_run": ep.failed_run,
                "quantile": rep.quantile,
                "success_share": s.share,
                "success_selected_fraction": s.selected_fraction,
                "failure_share": f.share,
                "failure_selected_fraction": f.selected_fraction,
                "gap_pp": rep.gap_failure_minus_success_pp,
                "n_tokens": rep.n_tokens,
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
    rows = [
        {
            "endpoint": checkpoint_label(ep.run, ep.model, ep.step),
            "failed_run": ep.failed_run,
            **b.to_dict(),
        }
        for ep in (report.tail.endpoints if report.tail else [])
        for b in ep.report.budgets
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


_FAILURE_FIELDS = {n: n for n in ("run", "model", "failed", "reported_step", "reported_reason")}
_WINDOW_FIELDS = {n: n for n in ("collapse_step", "nonzero_variance_share", "empty_mask_share")}


def failure_frame(report: Report) -> pd.DataFrame:
    """The failure verdict per (run, model) (docs/estimators.md items 9, 13, 14): the reported
    checkpoint and, next to a failure, the failure-window shares from the training curve."""
    rows = []
    for f in report.failure:
        w = f.failure_window
        rows.append({**_fields(f, _FAILURE_FIELDS), **_fields(w, _WINDOW_FIELDS)})
    return pd.DataFrame(rows, columns=[*_FAILURE_FIELDS, *_WINDOW_FIELDS])


def association_frame(report: Report) -> pd.DataFrame:
    """The retention–pass@k Spearman per model scale (and pooled only when requested,
    labelled), on the report's one named benchmark and k."""
    a = report.association
    if a is None:
        return pd.DataFrame(columns=["scope", "metric", "rho", "p_value", "n", "excluded"])
    fits: list[tuple[str, Any]] = list(a.by_model.items())
    if a.pooled is not None:
        fits.append((a.pooled.label, a.pooled))
    return pd.DataFrame(
        [
            {
                "scope": scope,
                "metric": a.metric,
                "rho": fit.rho,
                "p_value": fit.p_value,
                "n": fit.n,
                "excluded": ", ".join(fit.excluded),
            }
            for scope, fit in fits
        ],
        columns=["scope", "metric", "rho", "p_value", "n", "excluded"],
    )


def direction_counts_frame(counts: TailDirectionSummary) -> pd.DataFrame:
    """The report's ``tail.direction_counts`` (the q99 tail, then each equal-count
    budget) as one row per selection; lists are joined for display."""
    rows = [counts.quantile_tail, *counts.budgets]
    flat = [
        {
            k: ", ".join(map(str, v)) if isinstance(v, list | tuple) else v
            for k, v in r.to_dict().items()
        }
        for r in rows
    ]
    return pd.DataFrame(flat)


#: the CONSORT-style stages of a checkpoint's flow (docs/reports.md "Flow"), in order
FLOW_STAGES = ("imported", "successes", "judged", "accepted", "assigned")
#: the numbers whose eligible questions the flow ends in
FLOW_NUMBERS = ("paired_ratio", "validity", "modes", "retention")


def flow_frame(report: Report) -> pd.DataFrame:
    """One row per checkpoint: ``trajectories / questions`` at each stage of its flow,
    then the eligible questions each number rests on (empty: the number is not computed)."""
    rows = []
    for c in report.checkpoints:
        if c.flow is None:
            continue
        row: dict[str, Any] = {"checkpoint": checkpoint_label(c.run, c.model, c.step)}
        for stage in FLOW_STAGES:
            f = getattr(c.flow, stage)
            row[stage] = f"{f.trajectories} / {f.questions}"
        for name in FLOW_NUMBERS:
            row[f"eligible: {name}"] = c.flow.eligible.get(name)
        rows.append(row)
    return pd.DataFrame(rows)


REALIZATION_COLUMNS = [
    "n_eligible",
    "coverage",
    "mode_entropy",
    "within_mode_entropy",
    "sequence_entropy",
    "within_mode_token_entropy",
    "share_in_repeated_modes",
    "decomposition_residual",
    "realization_retention",
]

#: The two parts of Ĥ(Y|C,x) on the Modes page's chart (docs/estimators.md item 15).
BETWEEN, WITHIN = "between modes Ĥ(Z|C,x)", "within modes W(x)"


def realization_frame(report: Report) -> pd.DataFrame:
    """Item 15 per checkpoint (docs/estimators.md item 15; the report's ``realization``
    section): eligible questions, coverage, the between-mode entropy Ĥ(Z|C,x), the
    within-mode realization entropy W, their sum Ĥ(Y|C,x), the token-level mixture, the
    share of C in repeated modes, the chain-rule residual and the realization retention
    against the base (``None`` at the base); checkpoints without numbers are left out."""
    rows = []
    for e in report.realization:
        if e.report is None:
            continue
        row = {
            "checkpoint": checkpoint_label(e.run, e.model, e.step),
            "run": e.run,
            "model": e.model,
            "step": e.step,
            **{k: getattr(e.report, k) for k in REALIZATION_COLUMNS if hasattr(e.report, k)},
            "realization_retention": e.retention.retention if e.retention else None,
        }
        rows.append(row)
    return pd.DataFrame(rows, columns=["checkpoint", "run", "model", "step", *REALIZATION_COLUMNS])


def realization_split_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`realization_frame` in long form for the chart: ``checkpoint``, ``part``
    (:data:`BETWEEN` or :data:`WITHIN`) and ``value`` (nats); rows without both parts
    are left out."""
    both = frame.dropna(subset=["mode_entropy", "within_mode_entropy"])
    long = both.melt(
        id_vars=["checkpoint"],
        value_vars=["mode_entropy", "within_mode_entropy"],
        var_name="part",
        value_name="value",
    )
    # melt keeps the frame's checkpoint order in its first half: the chart's axis order
    long["part"] = long["part"].map({"mode_entropy": BETWEEN, "within_mode_entropy": WITHIN})
    return long


MODE_TAIL_COLUMNS = [
    "failed_run",
    "n_questions",
    "majority_mass_share",
    "majority_token_share",
    "concentration_ratio",
    "success_tail_majority_share",
]


def mode_tail_frame(report: Report) -> pd.DataFrame:
    """Item 16 per endpoint (docs/estimators.md item 16; the report's ``mode_tail``
    section): M, T, the concentration ratio M/T and the success-tail majority share."""
    rows = [
        {
            "checkpoint": checkpoint_label(e.run, e.model, e.step),
            "run": e.run,
            "model": e.model,
            "step": e.step,
            **{k: getattr(e, k) for k in MODE_TAIL_COLUMNS},
        }
        for e in report.mode_tail
    ]
    return pd.DataFrame(rows, columns=["checkpoint", "run", "model", "step", *MODE_TAIL_COLUMNS])


#: the report sections of the numbers the Modes page shows (they rest on the partition)
MODE_SECTIONS = ("modes", "retention", "realization", "mode_tail", "association")
#: those of the validity numbers (they rest on the judge's calibration)
VALIDITY_SECTIONS = ("validity",)


def changed_notes(report: Report) -> dict[str, str]:
    """Dependency (``partition``, ``validity``) → the "changed after a failed attempt" mark
    its audited numbers carry (``rcea.study.report.publication.changed_marks``)."""
    return changed_marks({"audits": report.audits.model_dump(mode="json")})


def labelled_frame(report: Report, sections: tuple[str, ...]) -> pd.DataFrame:
    """The report's labelled quantities of ``sections``: one row per number with its label
    as every surface shows it (``audited — changed after a failed attempt: …`` when its
    audit passed only after a change following a failed attempt)."""
    rows = [
        {
            "section": q.section,
            "quantity": q.name,
            "where": " ".join(str(x) for x in (q.run, q.model, q.step, q.key) if x is not None),
            "value": q.value,
            "label": display_label(q.model_dump(mode="json")),
        }
        for q in report.quantities
        if q.section in sections
    ]
    return pd.DataFrame(rows, columns=["section", "quantity", "where", "value", "label"])


MODE_COVARIANCE_POINT_COLUMNS = ["group", *TRANSITION_COLUMNS, "failed_run"]


def _fit_row(fit: Any) -> dict[str, Any]:
    """Item 6's statistics of one fit (an ``audits`` ``CovarianceFit``), as in
    :func:`fit_frame`."""
    return {k: getattr(fit, k) for k in FIT_COLUMNS}


def mode_covariance_frames(report: Report) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Item 16's covariance fit by mode group (the report's ``mode_covariance``): one
    point per (group, transition) — predicted vs observed mean ΔH over the group's
    prefixes — and one fit row per group (pooled over models, then per model), item 6's
    statistics as in :func:`fit_frame`."""
    sec = report.mode_covariance
    if sec is None:
        return (
            pd.DataFrame(columns=MODE_COVARIANCE_POINT_COLUMNS),
            pd.DataFrame(columns=["group", "scope", *FIT_COLUMNS]),
        )
    points = pd.DataFrame(
        [t.model_dump(include=set(MODE_COVARIANCE_POINT_COLUMNS)) for t in sec.transitions],
        columns=MODE_COVARIANCE_POINT_COLUMNS,
    )
    fits = [
        {
            "group": g,
            "scope": "pooled (non-failed)",
            **{k: getattr(sec.fits[g], k) for k in FIT_COLUMNS},
        }
        for g in sec.groups
        if g in sec.fits
    ]
    for model, by_group in sec.by_model.items():
        for g in sec.groups:
            if g in by_group:
                fits.append(
                    {
                        "group": g,
                        "scope": model,
                        **{k: getattr(by_group[g], k) for k in FIT_COLUMNS},
                    }
                )
    return points, pd.DataFrame(fits, columns=["group", "scope", *FIT_COLUMNS])


SEED_POINT_COLUMNS = [
    "checkpoint", "estimator", "kind", "train_seed", "value", "ci_low", "ci_high", "n",
]  # fmt: skip
SEED_TABLE_COLUMNS = [
    "checkpoint", "run", "model", "step", "estimator", "per_seed", "n_seeds", "mean",
    "between_seed_sd", "ci_low", "ci_high", "depends_on", "label",
]  # fmt: skip


def _seed_labels(report: Report) -> dict[tuple[Any, ...], str]:
    """(run, model, step, estimator) → the across-seed mean's label as every surface shows
    it, or ``not publishable: <the missing gate>`` (the paper tables' ``b``)."""
    out = {}
    for q in report.quantities:
        if q.section == "replicates" and q.name == "across_seed_mean":
            label = (
                display_label(q.model_dump(mode="json"))
                if q.publishable
                else f"not publishable: {q.blocked_by}"
            )
            out[(q.run, q.model, q.step, q.key)] = label
    return out


def seed_frames(report: Report) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Item 17 (the report's ``replicates`` section), every quantity it lists by its name
    (``rcea.study.report.replicates.estimator_name``): the chart's points — per (run,
    model, step) and estimator each seed's estimate (``kind`` seed, n = its questions) and
    the across-seed mean with its interval (``kind`` mean, n = seeds; only with two or
    more seeds) — and the table, one row per (run, model, step) and estimator with each
    seed's value, the mean, the between-seed SD, the interval and the label of the mean
    (``single seed`` where there is one seed)."""
    sec = report.replicates
    labels = _seed_labels(report)
    points: list[dict[str, Any]] = []
    table: list[dict[str, Any]] = []
    for g in sec.groups if sec else []:
        checkpoint = checkpoint_label(g.run, g.model, g.step)
        for q in g.quantities:
            estimator = estimator_name(q.model_dump())
            points += [
                {"checkpoint": checkpoint, "estimator": estimator, "kind": "seed",
                 "train_seed": v.train_seed, "value": v.value, "n": v.n_questions}
                for v in q.seeds
                if v.value is not None
            ]  # fmt: skip
            if not q.single_seed:
                points.append(
                    {"checkpoint": checkpoint, "estimator": estimator, "kind": "mean",
                     "value": q.mean, "ci_low": q.ci_low, "ci_high": q.ci_high, "n": q.n_seeds}
                )  # fmt: skip
            table.append(
                {
                    "checkpoint": checkpoint,
                    "run": g.run,
                    "model": g.model,
                    "step": g.step,
                    "estimator": estimator,
                    "per_seed": "; ".join(
                        f"{v.train_seed}: " + ("n/a" if v.value is None else f"{v.value:.4g}")
                        for v in q.seeds
                    ),
                    "n_seeds": q.n_seeds,
                    "mean": q.mean,
                    "between_seed_sd": q.between_seed_sd,
                    "ci_low": q.ci_low,
                    "ci_high": q.ci_high,
                    "depends_on": ", ".join(q.depends_on) or "—",
                    "label": "single seed"
                    if q.single_seed
                    else labels.get((g.run, g.model, g.step, estimator), ""),
                }
            )
    return (
        pd.DataFrame(points, columns=SEED_POINT_COLUMNS),
        pd.DataFrame(table, columns=SEED_TABLE_COLUMNS),
    )
