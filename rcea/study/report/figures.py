"""The report's figures (matplotlib, Agg backend) as PNG, PDF or SVG bytes. Only figures
whose data exist are drawn; every function returns ``None`` when there is nothing to draw.

* ``training_entropy``: training-time policy entropy vs normalised progress (step /
  max_steps), one line per objective (measurement ``training_curve``).
* ``paired_ratio``: paired failed/successful token-entropy ratio with its bootstrap CI per
  checkpoint (item 3), a dashed line at 1.
* ``covariance_scatter``: predicted vs observed mean ΔH per transition with the identity
  line; failed runs hollow (excluded from the fit, item 6).
* ``retention``: rarefied mode retention vs the base with CIs per checkpoint (item 5).
* ``accuracy_passk``: verifier accuracy of the sampled trajectories and pass@k per
  checkpoint (item 8).
* ``passk_curve``: pass@k against k (log scale) for each model's base checkpoint and its
  last checkpoint of every run, one panel per benchmark (item 8).
* ``entropy_by_outcome``: success- and failure-conditioned sequence entropy over
  checkpoint steps, one colour per run, solid for successes and dashed for failures
  (item 1).
* ``mode_entropy_split``: between-mode entropy Ĥ(Z|C,x) next to the within-mode
  realization entropy W per checkpoint (item 15; their sum is Ĥ(Y|C,x)), hatched bars for
  W.
* ``mode_covariance_scatter``: item 6's predicted vs observed mean ΔH per transition and
  mode group (majority mode, other modes, outside C) with the identity line; failed runs
  hollow (item 16).
* ``entropy_law``: validation accuracy R against training entropy H per run with the
  fitted law R = −a·exp(H) + b and the early fit's prediction (dashed), one panel per
  entropy (item 18).

Colours are the Okabe–Ito palette (distinguishable under the common colour-vision
deficiencies), and the markers differ as well. ``make_figures(report, fmt)`` renders PNG
(the bundle's), PDF or SVG: the same report — a bundle's ``report.json`` — gives the same
figures (``rcea report figures``).
"""

from __future__ import annotations

import io
from collections import defaultdict
from typing import Any

from cycler import cycler
from matplotlib.figure import Figure

from rcea.study.report.entropy_law import law_curves

#: Okabe & Ito's colour-blind-safe palette (black last: it is the reference lines' grey)
OKABE_ITO = (
    "#E69F00",
    "#56B4E9",
    "#009E73",
    "#F0E442",
    "#0072B2",
    "#D55E00",
    "#CC79A7",
    "#000000",
)
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
STYLE = cycler(color=OKABE_ITO) + cycler(marker=MARKERS)
FORMATS = ("png", "pdf", "svg")
#: figures that a paper would include, beside the bundle's own
PAPER_FIGURES = (
    "passk_curve",
    "entropy_by_outcome",
    "mode_entropy_split",
    "mode_covariance_scatter",
    "entropy_law",
)


def make_figures(report: dict[str, Any], fmt: str = "png") -> dict[str, bytes]:
    """``{file stem: bytes}`` in ``fmt`` (png, pdf or svg) for every figure whose data the
    report holds."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown figure format {fmt!r}: use one of {', '.join(FORMATS)}")
    out: dict[str, bytes] = {}
    for name, fn in (
        ("training_entropy", training_entropy),
        ("paired_ratio", paired_ratio),
        ("covariance_scatter", covariance_scatter),
        ("retention", retention),
        ("accuracy_passk", accuracy_passk),
        ("passk_curve", passk_curve),
        ("entropy_by_outcome", entropy_by_outcome),
        ("mode_entropy_split", mode_entropy_split),
        ("mode_covariance_scatter", mode_covariance_scatter),
        ("entropy_law", entropy_law),
    ):
        fig = fn(report)
        if fig is not None:
            out[name] = _render(fig, fmt)
    return out


def _render(fig: Any, fmt: str) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    # no creation date or software version in the file: the same report gives the same bytes
    metadata: dict[str, Any] = {
        "png": {"Software": None},
        "pdf": {"Creator": None, "Producer": None, "CreationDate": None},
        "svg": {"Creator": None, "Date": None},
    }[fmt]
    fig.savefig(buf, format=fmt, dpi=110, metadata=metadata)
    return buf.getvalue()


def _figure(title: str, xlabel: str, ylabel: str, ncols: int = 1) -> tuple[Figure, Any]:
    # A bare Figure renders through Agg on savefig without pyplot's global backend
    # state, so importing this module changes nothing for the view or the CLI.
    fig = Figure(figsize=(7 if ncols == 1 else 4.2 * ncols, 4))
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    for ax in axes:
        ax.set_prop_cycle(STYLE)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    if ncols > 1:
        fig.suptitle(title)
        return fig, axes
    ax = axes[0]
    ax.set_title(title)
    return fig, ax


def training_entropy(report: dict[str, Any]) -> Figure | None:
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
    return fig


def _by_run(checkpoints: list[dict[str, Any]], value: Any) -> dict[str, list[tuple[int, Any]]]:
    series: dict[str, list[tuple[int, Any]]] = defaultdict(list)
    for c in checkpoints:
        v = value(c)
        if v is not None:
            series[f"{c['run']} ({c['model']})"].append((c["step"], v))
    return series


def _errorbars(title: str, ylabel: str, series: dict[str, list[tuple[int, Any]]]) -> Figure:
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
    return fig


def paired_ratio(report: dict[str, Any]) -> Figure | None:
    def value(c: dict[str, Any]) -> Any:
        e = c["entropy"]
        if not e or e.get("paired_ratio") is None:
            return None
        return (e["paired_ratio"], e.get("paired_ci_low"), e.get("paired_ci_high"))

    series = _by_run(report["checkpoints"], value)
    if not series:
        return None
    return _errorbars("Paired failed/successful token-entropy ratio", "ratio (95% CI)", series)


def retention(report: dict[str, Any]) -> Figure | None:
    def value(c: dict[str, Any]) -> Any:
        r = c["retention"]
        if not r or r.get("retention") is None:
            return None
        return (r["retention"], r.get("ci_low"), r.get("ci_high"))

    series = _by_run(report["checkpoints"], value)
    if not series:
        return None
    return _errorbars("Rarefied effective-mode retention vs base", "retention (95% CI)", series)


def covariance_scatter(report: dict[str, Any]) -> Figure | None:
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
    _identity(ax, ts)
    ax.legend()
    return fig


def _identity(ax: Any, transitions: list[dict[str, Any]]) -> None:
    """The line y = x across the transitions' predicted and observed ΔH."""
    values = [t["predicted"] for t in transitions] + [t["observed"] for t in transitions]
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.05 or 1e-3
    line = {"color": "grey", "linestyle": "--", "marker": "", "label": "identity"}
    ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], **line)


def mode_covariance_scatter(report: dict[str, Any]) -> Figure | None:
    sec = report.get("mode_covariance")
    if not sec or not sec["transitions"]:
        return None
    fig, ax = _figure(
        "Exact covariance by mode group: predicted vs observed ΔH", "predicted ΔH", "observed ΔH"
    )
    ts = sec["transitions"]
    for i, group in enumerate(sec["groups"]):
        colour, marker = OKABE_ITO[i % len(OKABE_ITO)], MARKERS[i % len(MARKERS)]
        for failed in (False, True):
            sel = [t for t in ts if t["group"] == group and t["failed_run"] == failed]
            if sel:
                ax.scatter(
                    [t["predicted"] for t in sel],
                    [t["observed"] for t in sel],
                    marker=marker,
                    edgecolors=colour,
                    facecolors="none" if failed else colour,
                    label=f"{group}" + (" (failed run, excluded)" if failed else ""),
                )
    _identity(ax, ts)
    ax.legend()
    return fig


def accuracy_passk(report: dict[str, Any]) -> Figure | None:
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
    return fig


def passk_curve(report: dict[str, Any]) -> Figure | None:
    # base = each model's earliest checkpoint of the base run (else its earliest anywhere);
    # trained = the last checkpoint of every other run of that model
    by_bench: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in report["passk"]:
        by_bench[p["benchmark"]].append(p)
    panels: dict[str, list[tuple[str, list[tuple[int, float]]]]] = {}
    for bench, rows in sorted(by_bench.items()):
        curves = []
        for model in sorted({p["model"] for p in rows}):
            mine = [p for p in rows if p["model"] == model]
            first = min(p["step"] for p in mine)
            base = [p for p in mine if p["step"] == first]
            base = [p for p in base if p["run"] == "base"] or base[:1]
            picks = [(f"{model} base: {base[0]['run']} step {first}", base[0])] if base else []
            for run in sorted({p["run"] for p in mine} - {"base"}):
                last = max((p for p in mine if p["run"] == run), key=lambda p: p["step"])
                if last is not base[0]:
                    picks.append((f"{run} ({model}) step {last['step']}", last))
            for label, p in picks:
                pts = sorted(
                    (int(name.rsplit("_", 1)[1]), v)
                    for name, v in p["pass_at_k"].items()
                    if v is not None and name.rsplit("_", 1)[-1].isdigit()
                )
                if pts:
                    curves.append((label, pts))
        if curves:
            panels[bench] = curves
    if not panels:
        return None
    fig, axes = _figure("pass@k against k", "k", "pass@k", ncols=len(panels))
    axes = axes if len(panels) > 1 else [axes]
    for ax, (bench, curves) in zip(axes, panels.items(), strict=True):
        ax.set_title(bench)
        ax.set_xscale("log", base=2)
        for label, pts in curves:
            ax.plot([k for k, _ in pts], [v for _, v in pts], label=label)
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize="x-small")
    return fig


def entropy_by_outcome(report: dict[str, Any]) -> Figure | None:
    series: dict[str, dict[str, list[tuple[int, float]]]] = defaultdict(
        lambda: {"success": [], "failure": []}
    )
    for c in report["checkpoints"]:
        e = c.get("entropy") or {}
        for outcome in ("success", "failure"):
            v = e.get(f"mean_conditional_entropy_{outcome}")
            if v is not None:
                series[f"{c['run']} ({c['model']})"][outcome].append((c["step"], v))
    series = {k: v for k, v in series.items() if v["success"] or v["failure"]}
    if not series:
        return None
    fig, ax = _figure(
        "Entropy by verifier outcome", "checkpoint step", "conditional sequence entropy (nats)"
    )
    for i, (label, by_outcome) in enumerate(sorted(series.items())):
        colour, marker = OKABE_ITO[i % len(OKABE_ITO)], MARKERS[i % len(MARKERS)]
        for outcome, line in (("success", "-"), ("failure", "--")):
            pts = sorted(by_outcome[outcome])
            if pts:
                ax.plot(
                    [s for s, _ in pts],
                    [v for _, v in pts],
                    color=colour,
                    marker=marker,
                    linestyle=line,
                    label=f"{label} {outcome}",
                )
    ax.legend(fontsize="x-small", ncol=2)
    return fig


def mode_entropy_split(report: dict[str, Any]) -> Figure | None:
    rows = [
        (f"{e['run']} ({e['model']}) {e['step']}", e["report"])
        for e in report.get("realization") or []
        if e.get("report")
        and e["report"].get("mode_entropy") is not None
        and e["report"].get("within_mode_entropy") is not None
    ]
    if not rows:
        return None
    fig, ax = _figure(
        "Between- vs within-mode entropy of accepted successes",
        "checkpoint",
        "macro entropy (nats)",
    )
    xs = list(range(len(rows)))
    width = 0.4
    # side by side, not stacked: an estimated part may be negative
    for offset, fld, label, hatch, colour in (
        (-width / 2, "mode_entropy", "between modes Ĥ(Z|C,x)", "", OKABE_ITO[4]),
        (width / 2, "within_mode_entropy", "within modes W", "//", OKABE_ITO[0]),
    ):
        ax.bar(
            [x + offset for x in xs],
            [r[fld] for _, r in rows],
            width,
            label=label,
            color=colour,
            hatch=hatch,
            edgecolor="black",
        )
    ax.axhline(0.0, color="grey", linewidth=1)
    ax.set_xticks(xs, [label for label, _ in rows], rotation=30, ha="right", fontsize="small")
    ax.legend()
    return fig


def entropy_law(report: dict[str, Any]) -> Figure | None:
    points, curves = law_curves(report.get("entropy_law"))
    kinds = list(dict.fromkeys(p["entropy"] for p in points))
    if not kinds:
        return None
    fig, axes = _figure(
        "Entropy–performance law R = −a·exp(H) + b",
        "training entropy H (nats)",
        "validation accuracy R",
        ncols=len(kinds),
    )
    axes = axes if len(kinds) > 1 else [axes]
    series = list(dict.fromkeys(p["series"] for p in points))
    for ax, kind in zip(axes, kinds, strict=True):
        ax.set_title(kind)
        for i, name in enumerate(series):
            colour, marker = OKABE_ITO[i % len(OKABE_ITO)], MARKERS[i % len(MARKERS)]
            pts = [p for p in points if p["entropy"] == kind and p["series"] == name]
            if not pts:
                continue
            for window, face in (("early", colour), ("rest", "none")):
                sel = [p for p in pts if p["window"] == window]
                if sel:
                    ax.scatter(
                        [p["H"] for p in sel],
                        [p["R"] for p in sel],
                        marker=marker,
                        facecolors=face,
                        edgecolors=colour,
                        label=f"{name} ({window} pairs)",
                    )
            line = [c for c in curves if c["entropy"] == kind and c["series"] == name]
            for fld, style, what in (("fitted", "-", "law"), ("early", "--", "early fit")):
                xy = [(c["H"], c[fld]) for c in line if c[fld] is not None]
                if xy:
                    ax.plot(
                        [h for h, _ in xy],
                        [r for _, r in xy],
                        color=colour,
                        linestyle=style,
                        marker="",
                        label=f"{name} {what}",
                    )
        ax.legend(fontsize="x-small")
    return fig
