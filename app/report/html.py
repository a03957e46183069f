"""The bundle's ``report.html``: one self-contained page (no external resources; figures
embedded as base64 PNG data URIs, every value HTML-escaped)."""

from __future__ import annotations

import base64
from html import escape
from typing import Any

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


def _fmt(value: Any) -> str:
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
        "<tr>" + "".join(f"<td>{escape(_fmt(v))}</td>" for v in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def render_html(
    report: dict[str, Any],
    *,
    scope: str,
    figures: dict[str, bytes],
    hashes: dict[str, Any],
) -> str:
    """The page: scope label, audits, every quantity (with what it depends on and its
    label), the figures and the hashes the numbers rest on."""
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
        "<h2>Audits</h2>",
        _table(
            ["audit", "status", "bound to", "blocked by"],
            [
                [
                    f"pair audit {pair['audit'] or ''}".strip(),
                    pair["status"],
                    f"partition {pair['partition_hash'] or 'n/a'} ({pair['partition_source']}),"
                    f" rubric {pair['rubric_hash'] or 'n/a'}",
                    pair["blocked_by"],
                ],
                [
                    "validity (judge calibration)",
                    val["status"],
                    f"judge {val.get('judge_hash') or 'n/a'}, filter {val['filter']}",
                    val["blocked_by"],
                ],
            ],
        ),
    ]
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
    parts.append("<h2>Figures</h2>")
    for name, png in figures.items():
        data = base64.b64encode(png).decode("ascii")
        parts.append(
            f"<figure><img alt='{escape(name)}' src='data:image/png;base64,{data}'>"
            f"<figcaption>figures/{escape(name)}.png</figcaption></figure>"
        )
    if not figures:
        parts.append("<p>No figure has data.</p>")
    parts.append("<h2>Quantities</h2>")
    rows = [
        [
            q["section"],
            q["name"],
            " ".join(str(x) for x in (q["run"], q["model"], q["step"], q["key"]) if x is not None),
            q["value"],
            "" if q["ci_low"] is None else f"[{_fmt(q['ci_low'])}, {_fmt(q['ci_high'])}]",
            ", ".join(q["depends_on"]) or "none",
            q["label"],
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
