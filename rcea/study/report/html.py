"""The bundle's ``report.html``: one self-contained page (no external resources; figures
embedded as base64 PNG data URIs, every value HTML-escaped)."""

from __future__ import annotations

import base64
from html import escape
from typing import Any

from rcea.audits.covariance import FIT_SUMMARY
from rcea.study.report.publication import CHANGED_LABEL, changed_marks, display_label
from rcea.study.report.replicates import replicates_html

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f3f3f3}
.blocked{color:#a00}
.label{font-size:0.8em;color:#555}
img{max-width:100%;border:1px solid #ddd;margin:0.5em 0}
code{font-size:0.85em}
"""


def fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(fmt(v))}</td>" for v in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _changed_mark(audit: dict[str, Any]) -> str:
    changes = audit.get("changed_after_failure") or []
    if not changes:
        return ""
    return (
        f" — {CHANGED_LABEL} ({changes[0]['since']}: " + ", ".join(c["key"] for c in changes) + ")"
    )


def changes_text(attempt: dict[str, Any]) -> str:
    """``changed after a failed attempt (NAME): key before → after; …`` or ``""``."""
    changes = attempt.get("changed_after_failure") or []
    if not changes:
        return ""
    since = changes[0]["since"]
    diff = "; ".join(f"{c['key']} {fmt(c['before'])} → {fmt(c['after'])}" for c in changes)
    return f"{CHANGED_LABEL} ({since}): {diff}"


#: the judge calibration's figures, in report order
_CAL_FIGURES = ("accuracy", "macro_f1", "accepted_valid_precision", "valid_recall", "coverage")


def _calibration_table(val: dict[str, Any]) -> list[str]:
    """The completed calibration's figures on the balanced sample and on the population
    (with its interval), and the predeclared threshold on the basis it applies to."""
    rep = val.get("report")
    if not rep:
        return []
    pop = rep.get("population") or {}
    ci = pop.get("intervals") or {}
    acc = val.get("acceptance") or {}
    basis = acc.get("basis") or "balanced"
    thresholds = {r["name"]: r for r in acc.get("requirements") or []}
    rows = []
    for k in _CAL_FIGURES:
        band = ci.get(k)
        req = thresholds.get(k)
        rows.append(
            [
                k,
                rep.get(k),
                fmt(pop.get(k)) + (f" [{fmt(band[0])}, {fmt(band[1])}]" if band else ""),
                ""
                if req is None
                else f">= {fmt(req['threshold'])} ({'pass' if req['passed'] else 'FAIL'})",
            ]
        )
    weights = pop.get("weights") or {}
    return [
        f"<h3>Judge calibration {escape(str(val.get('calibration')))}</h3>",
        "<p class='label'>The calibration sample is stratified by the judge's verdict (about "
        "half accepted, half not), so its raw figures describe that balanced sample; the "
        "population figures weight each stratum by its share of the whole judged population"
        + (
            f" (accepted {fmt(weights.get('accepted'))}, not accepted "
            f"{fmt(weights.get('not_accepted'))})"
            if weights
            else " (not recorded for this calibration)"
        )
        + f", with {fmt(pop.get('confidence'))} stratified-bootstrap intervals. The "
        f"predeclared thresholds apply to the <strong>{escape(basis)}</strong> figures.</p>",
        _table(
            ["figure", "balanced sample", "population (interval)", f"threshold ({basis})"], rows
        ),
    ]


def render_html(
    report: dict[str, Any],
    *,
    scope: str,
    figures: dict[str, bytes],
    hashes: dict[str, Any],
) -> str:
    """The page, laid out like the paper: scope label and audits, then per model scale
    the supplement's tables (benchmark and retention, endpoint ratios with coverage,
    paired ratios with CI and sign test, covariance fit, q99 and rank budgets, failure
    diagnosis), each with its ``depends_on`` status; the figures; the full quantity list in
    an appendix; the hashes the numbers rest on."""
    pair = report["audits"]["pair"]
    val = report["audits"]["validity"]
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>RCEA report — {escape(report['study'])}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>RCEA report — study {escape(report['study'])}</h1>",
        (
            "<p class='blocked'><strong>SIMULATED</strong>: the human labels behind this "
            "report came from simulated annotators (rcea demo --simulate-annotators), not "
            "from people.</p>"
            if report.get("simulated")
            else ""
        ),
        f"<p>Generated {escape(report['generated_at'])}; scope: <strong>{escape(scope)}</strong>."
        f" Parameters: <code>{escape(str(report['parameters']))}</code></p>",
        (
            "<p class='blocked'>Estimator settings deviate from the predeclared rubric: "
            f"{escape(', '.join(report['parameters']['deviations_from_rubric']))}</p>"
            if report["parameters"].get("deviations_from_rubric")
            else ""
        ),
        (
            "<p class='blocked'><strong>Insufficient evidence</strong> (below the rubric's "
            "predeclared minimum of eligible questions; shown, never audited): "
            + escape("; ".join(report["insufficient_evidence"]))
            + "</p>"
            if report.get("insufficient_evidence")
            else ""
        ),
        "<p class='label'>Every number on this page is re-derivable from this bundle alone: "
        "<code>rcea report verify &lt;this directory&gt;</code> recomputes them from "
        "<code>inputs.json</code> with the same estimators and seeds.</p>",
        "<h2>Audits</h2>",
        _table(
            ["audit", "status", "bound to", "blocked by"],
            [
                [
                    f"pair audit {pair['audit'] or ''}".strip(),
                    pair["status"] + _changed_mark(pair),
                    f"partition {pair['partition_hash'] or 'n/a'} ({pair['partition_source']}),"
                    f" rubric {pair['rubric_hash'] or 'n/a'}",
                    pair["blocked_by"],
                ],
                [
                    "validity (judge calibration)",
                    val["status"] + _changed_mark(val),
                    f"judge {val.get('judge_hash') or 'n/a'}, filter {val['filter']}",
                    val["blocked_by"],
                ],
            ],
        ),
    ]
    parts += _calibration_table(val)
    flows = [c for c in report["checkpoints"] if c.get("flow")]
    if flows:
        parts.append("<h3>Flow per checkpoint (trajectories / questions)</h3>")
        stages = ("imported", "successes", "judged", "accepted", "assigned")
        parts.append(
            _table(
                ["checkpoint", *stages, "eligible questions"],
                [
                    [
                        f"{c['run']}/{c['model']}/step {c['step']}",
                        *(
                            f"{c['flow'][k]['trajectories']} / {c['flow'][k]['questions']}"
                            for k in stages
                        ),
                        ", ".join(
                            f"{k} {v}" for k, v in c["flow"]["eligible"].items() if v is not None
                        ),
                    ]
                    for c in flows
                ],
            )
        )
    if report.get("attempts"):
        parts.append("<h3>Every attempt on the record</h3>")
        parts.append(
            _table(
                [
                    "kind",
                    "name",
                    "bound to",
                    "seed",
                    "drawn",
                    "attempt / reason",
                    "α (correction)",
                    "labels counted",
                    "outcome",
                    "changed after a failed attempt",
                ],
                [
                    [
                        a["kind"],
                        a["name"],
                        a["partition_hash"] or a["judge_hash"] or "",
                        a["seed"],
                        f"{a['drawn_at']} by {a['drawn_by']}",
                        f"{a['attempt'] or ''} {a['reason'] or ''}".strip(),
                        "" if a.get("alpha") is None else f"{fmt(a['alpha'])} ({a['correction']})",
                        "" if a.get("n_labels") is None else a["n_labels"],
                        a["outcome"]
                        + (f" ({a['abandon_reason']})" if a.get("abandon_reason") else "")
                        + (f"; thresholds on the {a['basis']} figures" if a.get("basis") else ""),
                        changes_text(a),
                    ]
                    for a in report["attempts"]
                ],
            )
        )
        for a in report["attempts"]:
            if a.get("changed_after_failure"):
                parts.append(
                    f"<p class='blocked'>{escape(a['kind'])} <strong>{escape(str(a['name']))}"
                    f"</strong>: {escape(changes_text(a))}</p>"
                )
    for f in pair.get("failures_on_partition") or []:
        parts.append(
            "<p class='blocked'>A failed attempt is on the record of this partition: the "
            f"final gate of audit <strong>{escape(str(f['audit']))}</strong> FAILED "
            f"(rubric {escape(str(f['rubric_hash']))}, recorded {escape(f['recorded_at'])} "
            f"by {escape(f['recorded_by'])}).</p>"
        )
    if pair.get("gate"):
        reqs = pair["gate"].get("requirements") or []
        parts.append("<h3>Final gate</h3>")
        scope = pair["gate"].get("adjudication_scope") or "disagreements_and_automatic"
        parts.append(
            "<p>Adjudication scope: <strong>"
            + escape(
                "A ≠ B only"
                if scope == "disagreements"
                else "A ≠ B and A = B ≠ automatic (arbitration can only move the reference "
                "toward the automatic label)"
            )
            + f"</strong> (<code>{escape(scope)}</code>); human–human F1 over every pair "
            "both annotators labelled.</p>"
        )
        parts.append(
            _table(
                ["requirement", "value", "comparator", "threshold", "passed"],
                [
                    [r["name"], r["value"], r["comparator"], r["threshold"], r.get("passed")]
                    for r in reqs
                ],
            )
        )
    if report.get("failure"):
        parts.append("<h2>Training failure (per run and model)</h2>")
        rows = []
        for f in report["failure"]:
            w = f.get("failure_window") or {}
            rows.append(
                [
                    f["run"],
                    f["model"],
                    "FAILED" if f["failed"] else "ok",
                    f["reported_step"],
                    f["reported_reason"],
                    w.get("nonzero_variance_share"),
                    w.get("empty_mask_share"),
                ]
            )
        parts.append(
            _table(
                [
                    "run",
                    "model",
                    "verdict",
                    "reported step",
                    "reason",
                    "window: non-zero reward variance",
                    "window: empty covariance mask",
                ],
                rows,
            )
        )
    parts += _per_scale(report)
    parts += _entropy_law(report.get("entropy_law"))
    parts += replicates_html(report.get("replicates"), _table)
    parts.append("<h2>Figures</h2>")
    for name, png in figures.items():
        data = base64.b64encode(png).decode("ascii")
        parts.append(
            f"<figure><img alt='{escape(name)}' src='data:image/png;base64,{data}'>"
            f"<figcaption>figures/{escape(name)}.png</figcaption></figure>"
        )
    if not figures:
        parts.append("<p>No figure has data.</p>")
    parts.append("<h2>Appendix: every quantity</h2>")
    parts.append("<p>The same list is <code>quantities</code> in report.json.</p>")
    rows = [
        [
            q["section"],
            q["name"],
            " ".join(str(x) for x in (q["run"], q["model"], q["step"], q["key"]) if x is not None),
            q["value"],
            "" if q["ci_low"] is None else f"[{fmt(q['ci_low'])}, {fmt(q['ci_high'])}]",
            ", ".join(q["depends_on"]) or "none",
            display_label(q),
        ]
        for q in report["quantities"]
    ]
    parts.append(
        _table(["section", "quantity", "where", "value", "95% CI", "depends on", "label"], rows)
    )
    parts.append("<h2>Hashes</h2>")
    flat = [[k, v] for k, v in hashes.items() if k != "files"]
    flat += [[f"sha256 {name}", digest] for name, digest in hashes.get("files", {}).items()]
    parts.append(_table(["what", "SHA-256"], flat))
    parts.append("</body></html>")
    return "\n".join(parts)


def _status(report: dict[str, Any], deps: list[str]) -> str:
    """``audited``, ``entropy-only (no audit)`` or ``blocked: <why>`` for numbers that
    depend on ``deps``."""
    if not deps:
        return "depends on: nothing — entropy-only (no audit)"
    blockers = {
        "partition": report["audits"]["pair"]["blocked_by"],
        "validity": report["audits"]["validity"]["blocked_by"],
    }
    why = [blockers[d] for d in deps if blockers.get(d)]
    head = f"depends on: {', '.join(deps)} — "
    if why:
        return head + "blocked: " + "; ".join(why)
    marks = changed_marks(report)  # the section's numbers carry the mark (each row too)
    return head + "; ".join(["audited", *(marks[d] for d in deps if d in marks)])


def _caption(report: dict[str, Any], deps: list[str]) -> str:
    text = _status(report, deps)
    cls = "blocked" if "blocked:" in text else "label"
    return f"<p class='{cls}'>{escape(text)}</p>"


def _ci(lo: Any, hi: Any) -> str:
    return "" if lo is None else f"[{fmt(lo)}, {fmt(hi)}]"


def _per_scale(report: dict[str, Any]) -> list[str]:
    """One section per model scale with the supplement's tables."""
    val = report["audits"]["validity"]
    mode_deps = ["partition", "validity"] if val["filter"] == "judge" else ["partition"]
    models = sorted(
        {c["model"] for c in report["checkpoints"]}
        | {f["model"] for f in report.get("failure") or []}
    )
    greedy = {(g["run"], g["model"], g["step"]): g for g in report.get("greedy") or []}
    assoc = report.get("association") or {}
    metric = assoc.get("metric")
    passk_name = f"pass_at_{assoc['k']}" if assoc.get("k") else None
    passk = {
        (p["run"], p["model"], p["step"]): p["pass_at_k"].get(passk_name)
        for p in report.get("passk") or []
        if p["benchmark"] == assoc.get("benchmark")
    }
    out: list[str] = []
    for model in models:
        cks = [c for c in report["checkpoints"] if c["model"] == model]
        out.append(f"<h2>Model scale {escape(model)}</h2>")
        out.append("<h3>Benchmarks and retention</h3>")
        rows = []
        for c in cks:
            g = greedy.get((c["run"], c["model"], c["step"])) or {}
            r = c.get("retention") or {}
            m = c.get("modes") or {}
            rows.append(
                [
                    c["run"],
                    c["step"],
                    ("reported" if c["reported"] else "")
                    + (" (failed run)" if c["failed_run"] else ""),
                    c["accuracy"],
                    g.get("macro_accuracy"),
                    passk.get((c["run"], c["model"], c["step"])),
                    r.get("retention"),
                    _ci(r.get("ci_low"), r.get("ci_high")),
                    m.get("mean_n_eff"),
                    m.get("coverage"),
                ]
            )
        out.append(
            _table(
                [
                    "run",
                    "step",
                    "checkpoint",
                    "sampled accuracy",
                    "greedy macro accuracy",
                    metric or "pass@k",
                    "retention",
                    "retention CI",
                    "mean N_eff",
                    "mode coverage",
                ],
                rows,
            )
        )
        out.append(
            _caption(report, [])
            + "<p class='label'>retention, N_eff, mode coverage: "
            + escape(_status(report, mode_deps))
            + "</p>"
        )
        out.append("<h3>Outcome numbers (rewards only)</h3>")
        out.append(
            _table(
                [
                    "run",
                    "model",
                    "step",
                    "H(R|x)",
                    "mean accuracy",
                    "coverage (success)",
                    "coverage (failure)",
                    "solved",
                    "both outcomes",
                ],
                [
                    [
                        c["run"],
                        c["model"],
                        c["step"],
                        o.get("mean_outcome_entropy"),
                        o.get("mean_accuracy"),
                        o.get("coverage_success"),
                        o.get("coverage_failure"),
                        o.get("share_solved"),
                        o.get("share_mixed"),
                    ]
                    for c in cks
                    for o in [c.get("outcome") or {}]
                ],
            )
        )
        for imp in [i for i in report.get("imports", []) if i.get("model") == model]:
            out.append(
                "<p class='label'>"
                + escape(
                    f"imported {imp['source']} as {imp['run']} {imp['model']}: score rule "
                    f"{imp['score_rule'] or 'n/a'}"
                )
                + "</p>"
            )
        out.append("<h3>Endpoint ratios with coverage; paired ratios with CI and sign test</h3>")
        rows = []
        for c in cks:
            e = c.get("entropy") or {}
            rows.append(
                [
                    c["run"],
                    c["step"],
                    e.get("broad_ratio"),
                    e.get("coverage_success"),
                    e.get("coverage_failure"),
                    e.get("paired_ratio"),
                    _ci(e.get("paired_ci_low"), e.get("paired_ci_high")),
                    e.get("direction_share"),
                    e.get("sign_test_p"),
                    c.get("entropy_error") or "",
                ]
            )
        out.append(
            _table(
                [
                    "run",
                    "step",
                    "broad ratio",
                    "coverage (success)",
                    "coverage (failure)",
                    "paired ratio",
                    "paired CI",
                    "direction share",
                    "sign test p",
                    "note",
                ],
                rows,
            )
        )
        out.append(_caption(report, []))
        cov = report.get("covariance") or {}
        fit = (cov.get("groups") or {}).get(model)
        if fit:
            out.append("<h3>Covariance fit</h3>")
            keys = ("n", *FIT_SUMMARY)
            out.append(_table(list(keys), [[fit.get(k) for k in keys]]))
            excl = cov.get("excluded_runs") or []
            out.append(
                _caption(report, [])
                + (
                    f"<p class='label'>excluded failed runs: {escape(', '.join(excl))}</p>"
                    if excl
                    else ""
                )
            )
        tail = [t for t in (report.get("tail") or {}).get("endpoints") or [] if t["model"] == model]
        if tail:
            out.append("<h3>q99 tail and rank budgets</h3>")
            budgets = sorted(
                {b.get("budget") for t in tail for b in t["report"].get("budgets") or []},
                key=lambda x: (x is None, x),
            )
            rows = []
            for t in tail:
                rep = t["report"]
                by = {b.get("budget"): b for b in rep.get("budgets") or []}
                rows.append(
                    [
                        t["run"] + (" (failed run)" if t["failed_run"] else ""),
                        t["step"],
                        (rep.get("success") or {}).get("share"),
                        (rep.get("failure") or {}).get("share"),
                        rep.get("gap_failure_minus_success_pp"),
                        *[(by.get(b) or {}).get("gap_failure_minus_success_pp") for b in budgets],
                    ]
                )
            out.append(
                _table(
                    [
                        "run",
                        "step",
                        "q99 share (success)",
                        "q99 share (failure)",
                        "gap (pp)",
                        *[f"top {b:g} gap (pp)" for b in budgets],
                    ],
                    rows,
                )
            )
            out.append(_caption(report, []))
        fails = [f for f in report.get("failure") or [] if f["model"] == model]
        if fails:
            out.append("<h3>Failure diagnosis</h3>")
            out.append(
                _table(
                    ["run", "verdict", "reported step", "reason"],
                    [
                        [
                            f["run"],
                            "FAILED" if f["failed"] else "ok",
                            f["reported_step"],
                            f["reported_reason"],
                        ]
                        for f in fails
                    ],
                )
            )
            out.append(_caption(report, []))
        by_model = (assoc.get("by_model") or {}).get(model)
        if by_model:
            out.append("<h3>Retention–pass@k association (exploratory)</h3>")
            out.append(
                _table(
                    ["metric", "Spearman rho", "p", "n", "points", "excluded"],
                    [
                        [
                            metric,
                            by_model.get("rho"),
                            by_model.get("p_value"),
                            by_model.get("n"),
                            _points(by_model),
                            ", ".join(by_model.get("excluded") or []),
                        ]
                    ],
                )
            )
            out.append(_caption(report, mode_deps))
    return out


def _points(fit: dict[str, Any]) -> str:
    """A cross-run fit's points, each run with the training seeds averaged into it."""
    seeds = fit.get("n_seeds") or {}
    return ", ".join(
        m if seeds.get(m, 1) == 1 else f"{m} (mean of {seeds[m]} seeds)"
        for m in fit.get("methods") or []
    )


def _entropy_law(sec: dict[str, Any] | None) -> list[str]:
    """Item 15: the law per run and entropy, the comparison and the ordering, in words."""
    if not sec:
        return []
    out = ["<h2>Entropy–performance law R = −a·exp(H) + b</h2>"]
    if sec.get("error"):
        out.append(f"<p>Not computed: {escape(sec['error'])}</p>")
        return out
    rows = [
        [r["label"], kind, law["a"], law["b"], law["r2"], law["rmse"], law["n"],
         law["ceiling"], law["early_fit_rmse"]]
        for r in sec["runs"]
        for kind, law in r["entropies"].items()
        if law is not None
    ]  # fmt: skip
    out.append(
        _table(["run", "entropy", "a", "b", "R²", "RMSE", "n", "ceiling b − a",
                f"early-fit RMSE (first {sec['fit_fraction']:.0%})"], rows)
    )  # fmt: skip
    out.append(f"<p>{escape(sec['comparison']['sentence'])}</p>")
    if sec.get("ordering_sentence"):
        out.append(f"<p>{escape(sec['ordering_sentence'])}</p>")
    return out
