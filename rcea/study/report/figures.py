"""The report's figures as PNG bytes (matplotlib, Agg backend). Only figures whose data
exist are drawn; every function returns ``None`` when there is nothing to draw.

* ``training_entropy``: training-time policy entropy vs normalised progress (step /
  max_steps), one line per objective (measurement ``training_curve``).
* ``paired_ratio``: paired failed/successful token-entropy ratio with its bootstrap CI per
  checkpoint (item 3), a dashed line at 1.
* ``covariance_scatter``: predicted vs observed mean ΔH per transition with the identity
  line; failed runs hollow (excluded from the fit, item 6).
* ``retention``: rarefied mode retention vs the base with CIs per checkpoint (item 5).
* ``accuracy_passk``: verifier accuracy of the sampled trajectories and pass@k per
  checkpoint (item 8).
"""

from __future__ import annotations

import io
from collections import defaultdict
from typing import Any

from matplotlib.figure import Figure


def make_figures(report: dict[str, Any]) -> dict[str, bytes]:
    """``{file stem: PNG bytes}`` for every figure whose data the report holds."""
    out: dict[str, bytes] = {}
    for name, fn in (
        ("training_entropy", training_entropy),
        ("paired_ratio", paired_ratio),
        ("covariance_scatter", covariance_scatter),
        ("retention", retention),
        ("accuracy_passk", accuracy_passk),
    ):
        png = fn(report)
        if png is not None:
            out[name] = png
    return out


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    return buf.getvalue()


def _figure(title: str, xlabel: str, ylabel: str) -> tuple[Any, Any]:
    # A bare Figure renders through Agg on savefig without pyplot's global backend
    # state, so importing this module changes nothing for the view or the CLI.
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    return fig, ax


def training_entropy(report: dict[str, Any]) -> bytes | None:
    # one line per (run, model): two scales of one objective are never one line
    curves = [
        (
            f"{c['run']} ({c['model']})" if c.get("model") else c["run"],
            [p for p in c["points"] if p.get("entropy") is not None],
        )
        for c in report["training_curves"]
    ]
    curves = [(run, pts) for run, pts in curves if pts]
    if not curves:
        return None
    fig, ax = _figure("Training entropy", "normalised progress", "policy entropy (nats)")
    for run, pts in curves:
        pts = sorted(pts, key=lambda p: p.get("progress", p.get("step", 0)))
        ax.plot(
            [p.get("progress", p.get("step")) for p in pts], [p["entropy"] for p in pts], label=run
        )
    ax.legend()
    return _png(fig)


def _by_run(checkpoints: list[dict[str, Any]], value: Any) -> dict[str, list[tuple[int, Any]]]:
    series: dict[str, list[tuple[int, Any]]] = defaultdict(list)
    for c in checkpoints:
        v = value(c)
        if v is not None:
            series[f"{c['run']} ({c['model']})"].append((c["step"], v))
    return series


def _errorbars(title: str, ylabel: str, series: dict[str, list[tuple[int, Any]]]) -> bytes:
    fig, ax = _figure(title, "checkpoint step", ylabel)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    for label, pts in series.items():
        pts.sort()
        xs = [s for s, _ in pts]
        ys = [v[0] for _, v in pts]
        lo = [v[0] - v[1] if v[1] is not None else 0.0 for _, v in pts]
        hi = [v[2] - v[0] if v[2] is not None else 0.0 for _, v in pts]
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=label)
    ax.legend()
    return _png(fig)


def paired_ratio(report: dict[str, Any]) -> bytes | None:
    def value(c: dict[str, Any]) -> Any:
        e = c["entropy"]
        if not e or e.get("paired_ratio") is None:
            return None
        return (e["paired_ratio"], e.get("paired_ci_low"), e.get("paired_ci_high"))

    series = _by_run(report["checkpoints"], value)
    if not series:
        return None
    return _errorbars("Paired failed/successful token-entropy ratio", "ratio (95% CI)", series)


def retention(report: dict[str, Any]) -> bytes | None:
    def value(c: dict[str, Any]) -> Any:
        r = c["retention"]
        if not r or r.get("retention") is None:
            return None
        return (r["retention"], r.get("ci_low"), r.get("ci_high"))

    series = _by_run(report["checkpoints"], value)
    if not series:
        return None
    return _errorbars("Rarefied effective-mode retention vs base", "retention (95% CI)", series)


def covariance_scatter(report: dict[str, Any]) -> bytes | None:
    cov = report["covariance"]
    if not cov or not cov["transitions"]:
        return None
    fig, ax = _figure("Exact covariance: predicted vs observed ΔH", "predicted ΔH", "observed ΔH")
    ts = cov["transitions"]
    for failed, style in ((False, {"marker": "o"}), (True, {"marker": "o", "facecolors": "none"})):
        sel = [t for t in ts if t["failed_run"] == failed]
        if sel:
            ax.scatter(
                [t["predicted"] for t in sel],
                [t["observed"] for t in sel],
                edgecolors="C0",
                label="failed run (excluded)" if failed else "transition",
                **style,
            )
    values = [t["predicted"] for t in ts] + [t["observed"] for t in ts]
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.05 or 1e-3
    ax.plot(
        [lo - pad, hi + pad], [lo - pad, hi + pad], color="grey", linestyle="--", label="identity"
    )
    ax.legend()
    return _png(fig)


def accuracy_passk(report: dict[str, Any]) -> bytes | None:
    acc = _by_run(report["checkpoints"], lambda c: c["accuracy"])
    passk: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for p in report["passk"]:
        for name, v in p["pass_at_k"].items():
            if v is not None:
                passk[f"{p['run']} ({p['model']}) {p['benchmark']} {name}"].append((p["step"], v))
    if not acc and not passk:
        return None
    fig, ax = _figure("Accuracy and pass@k", "checkpoint step", "share")
    for label, pts in acc.items():
        pts.sort()
        ax.plot([s for s, _ in pts], [v for _, v in pts], marker="o", label=f"{label} accuracy")
    for label, pts in passk.items():
        pts.sort()
        ax.plot([s for s, _ in pts], [v for _, v in pts], marker="s", linestyle=":", label=label)
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize="small")
    return _png(fig)
