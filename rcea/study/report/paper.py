"""The report's numbers as tables a paper can include as they are (``rcea report tables``).

Built from the report's labelled ``quantities`` alone — the list ``rcea report publish``
writes and ``rcea report verify`` re-derives — so a table made from a bundle is
reproducible from that bundle. One table per report section (entropy, validity, modes, …),
one row per checkpoint (run, model, step; a key such as a benchmark or a transition when
the section has one) and one column per quantity. Every cell carries:

* the value, with its confidence interval when the report has one (``0.812 [0.74, 0.87]``);
* its publication label as a mark: ``a`` audited, ``c`` audited but changed after a failed
  attempt (its audit passed only after a design change that followed a failed attempt),
  ``u`` unaudited (entropy-only, no audit needed or none passed), ``*`` insufficient
  evidence, ``b`` blocked (a number that a failed or missing audit keeps out of the
  audited set);
* a footnote, numbered per table, for every changed, insufficient-evidence or blocked cell,
  quoting the report's reason (for ``c``: the difference).

Formats: booktabs LaTeX (one ``table`` environment per table), GitHub Markdown, and CSV —
the CSV is the long, tidy form (one row per quantity with every field), the form a
spreadsheet or pandas reads best.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from typing import Any

from rcea.study.report.publication import AUDITED_LABEL, ENTROPY_ONLY_LABEL, INSUFFICIENT_LABEL

#: the label of a quantity → its mark in a cell
MARKS = {AUDITED_LABEL: "a", ENTROPY_ONLY_LABEL: "u", INSUFFICIENT_LABEL: "*"}
BLOCKED_MARK = "b"
#: an audited number whose audit passed only after a change following a failed attempt
CHANGED_MARK = "c"
LEGEND = (
    "Marks: a = audited (its audit passed); c = audited, changed after a failed attempt "
    "(its audit passed only after a design change that followed a failed attempt; "
    "footnoted with the difference); u = unaudited (needs no audit, or published "
    "entropy-only); * = insufficient evidence (footnoted); b = blocked by a failed or missing "
    "audit (footnoted). Intervals are the report's confidence intervals."
)
#: report sections in the order a paper reads them; any other section follows
SECTION_ORDER = (
    "checkpoints",
    "entropy",
    "validity",
    "modes",
    "retention",
    "realization",
    "passk",
    "greedy",
    "covariance",
    "tail",
    "mode_tail",
    "mode_covariance",
    "failure",
    "association",
    "entropy_law",
    "replicates",
)
CAPTIONS = {
    "checkpoints": "Verifier accuracy of the sampled trajectories per checkpoint.",
    "entropy": "Outcome-conditioned entropies per checkpoint (nats).",
    "validity": "Process validity of judge-accepted successes per checkpoint.",
    "modes": "Semantic solution modes among accepted successes per checkpoint.",
    "retention": "Rarefied effective-mode retention against the base checkpoint.",
    "passk": "pass@k per checkpoint and benchmark.",
    "greedy": "Greedy accuracy per checkpoint and benchmark.",
    "covariance": "Exact covariance fit: predicted against observed entropy change.",
    "tail": "Reward-stratified covariance tail shares.",
    "failure": "Failed (collapsed) runs.",
    "association": "Association of retention and pass@k across objectives.",
    "realization": "Within-mode realization entropy (item 15; nats): between-mode entropy "
    "(realization_mode_entropy), within-mode entropy W, their sum, the chain-rule residual "
    "and the realization retention W_t/W_0 against the base.",
    "mode_tail": "Mode-stratified covariance (item 16) per endpoint: the majority mode's "
    "share of positive covariance mass M (majority_mass_share), of tokens T "
    "(majority_token_share), their concentration ratio M/T and the majority share of the "
    "success-tail mass.",
    "mode_covariance": "Exact covariance fit by mode group (item 16; key = the group: "
    "majority mode, other modes, outside the accepted successes).",
    "entropy_law": "Entropy-performance law R = -a exp(H) + b per run (item 18; key = the "
    "entropy): a, b, R squared, RMSE, the ceiling b - a and the early fit's RMSE on the later "
    "pairs; per model the Kendall tau-b of the endpoint ordering (key = the metric).",
    "replicates": "Across training seeds (item 17; key = the estimator): the mean with its "
    "hierarchical bootstrap interval (seeds, then questions within seed) and the "
    "between-seed SD; n = seeds. A checkpoint with one seed has no row.",
}


@dataclass
class Cell:
    text: str
    mark: str = ""
    note: int | None = None


@dataclass
class Table:
    """One section of the report as rows × quantity columns."""

    name: str
    caption: str
    index: list[str]
    columns: list[str]
    rows: list[tuple[list[str], list[Cell]]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def fmt_number(value: Any) -> str:
    """Three significant decimals for shares and entropies, integers as they are."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "–"
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e4):
            return f"{value:.2e}"
        return f"{value:.3f}"
    return str(value)


def _cell_text(q: dict[str, Any]) -> str:
    text = fmt_number(q["value"])
    if q.get("ci_low") is not None and q.get("ci_high") is not None:
        text += f" [{fmt_number(q['ci_low'])}, {fmt_number(q['ci_high'])}]"
    return text


def _mark(q: dict[str, Any]) -> str:
    if q.get("blocked_by") and not q.get("publishable", True):
        return BLOCKED_MARK
    if q.get("changed_after_failure") and q.get("label") == AUDITED_LABEL:
        return CHANGED_MARK
    return MARKS.get(q.get("label") or "", "u")


def _row_key(q: dict[str, Any]) -> tuple[str, ...]:
    key = q.get("key")
    step = q.get("step")
    return (
        str(q.get("run") or "–"),
        str(q.get("model") or "–"),
        "–" if step is None else str(step),
        *([] if key is None else [str(key)]),
    )


def report_tables(report: dict[str, Any]) -> list[Table]:
    """Every section of ``report['quantities']`` as a :class:`Table`."""
    by_section: dict[str, list[dict[str, Any]]] = {}
    for q in report.get("quantities") or []:
        by_section.setdefault(q["section"], []).append(q)
    order = [s for s in SECTION_ORDER if s in by_section]
    order += sorted(s for s in by_section if s not in SECTION_ORDER)
    return [_table(section, by_section[section]) for section in order]


def _table(section: str, qs: list[dict[str, Any]]) -> Table:
    columns: list[str] = []
    rows: dict[tuple[str, ...], dict[str, dict[str, Any]]] = {}
    for q in qs:
        if q["name"] not in columns:
            columns.append(q["name"])
        rows.setdefault(_row_key(q), {})[q["name"]] = q
    keyed = any(q.get("key") is not None for q in qs)
    index = ["run", "model", "step", *(["key"] if keyed else [])]
    table = Table(section, CAPTIONS.get(section, f"The report's {section} section."), index, [])
    table.columns = columns
    for key in sorted(rows, key=_sort_key):
        cells = []
        for name in columns:
            found = rows[key].get(name)
            if found is None:
                cells.append(Cell("–"))
                continue
            q = found
            cell = Cell(_cell_text(q), _mark(q))
            reason = q.get("evidence") if cell.mark == "*" else None
            if cell.mark == BLOCKED_MARK:
                reason = f"blocked by {q['blocked_by']}"
            if cell.mark == CHANGED_MARK:  # one footnote per table for the same change
                change = str(q["changed_after_failure"])
                if change not in table.notes:
                    table.notes.append(change)
                cell.note = table.notes.index(change) + 1
            elif reason:
                table.notes.append(f"{name} ({'/'.join(key)}): {reason}")
                cell.note = len(table.notes)
            cells.append(cell)
        table.rows.append((list(key) + [""] * (len(index) - len(key)), cells))
    return table


def _sort_key(key: tuple[str, ...]) -> tuple[Any, ...]:
    step = key[2]
    return (key[0], key[1], int(step) if step.lstrip("-").isdigit() else -1, key[3:])


# --- LaTeX -------------------------------------------------------------------------------

_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "–": "--",
    "→": r"$\rightarrow$",  # in a "changed after a failed attempt" footnote
}


def latex_escape(text: str) -> str:
    """Text as LaTeX source: every special character escaped (names come from users)."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def _latex_cell(cell: Cell) -> str:
    out = latex_escape(cell.text)
    sup = cell.mark + (f",{cell.note}" if cell.note is not None else "")
    return f"{out}$^{{\\mathrm{{{latex_escape(sup)}}}}}$" if sup else out


#: more columns than this (index included) and a LaTeX table is scaled to the line width
WIDE = 8


def to_latex(tables: list[Table], *, study: str) -> str:
    """One booktabs ``table`` per section (needs ``\\usepackage{booktabs,graphicx}``); a
    table wider than :data:`WIDE` columns is scaled to the line width."""
    out = [
        f"% RCEA report tables for study {latex_escape(study)} (rcea report tables);",
        "% needs \\usepackage{booktabs,graphicx}. " + LEGEND,
    ]
    for t in tables:
        spec = "l" * len(t.index) + "r" * len(t.columns)
        wide = len(t.index) + len(t.columns) > WIDE
        out += [
            "\\begin{table}[ht]",
            "\\centering",
            "\\small",
            f"\\caption{{{latex_escape(t.caption)}}}",
            f"\\label{{tab:rcea-{t.name}}}",
            *(["\\resizebox{\\linewidth}{!}{%"] if wide else []),
            f"\\begin{{tabular}}{{{spec}}}",
            "\\toprule",
            " & ".join(latex_escape(h) for h in [*t.index, *t.columns]) + " \\\\",
            "\\midrule",
        ]
        for key, cells in t.rows:
            parts = [latex_escape(k) for k in key] + [_latex_cell(c) for c in cells]
            out.append(" & ".join(parts) + " \\\\")
        out += ["\\bottomrule", "\\end{tabular}" + ("}" if wide else "")]
        if t.notes:
            out.append("\\par\\smallskip\\footnotesize")
            out += [f"{i}: {latex_escape(n)}\\\\" for i, n in enumerate(t.notes, 1)]
        out += ["\\end{table}", ""]
    return "\n".join(out)


# --- Markdown ----------------------------------------------------------------------------


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def _md_mark(cell: Cell) -> str:
    if not cell.mark:
        return ""
    return f" <sup>{cell.mark}{f',{cell.note}' if cell.note else ''}</sup>"


def to_markdown(tables: list[Table], *, study: str) -> str:
    out = [f"# RCEA report tables: {_md(study)}", "", LEGEND, ""]
    for t in tables:
        out += [f"## {t.name}", "", _md(t.caption), ""]
        out.append("| " + " | ".join(_md(h) for h in [*t.index, *t.columns]) + " |")
        out.append("|" + "---|" * len(t.index) + "---:|" * len(t.columns))
        for key, cells in t.rows:
            texts = [_md(c.text) + _md_mark(c) for c in cells]
            out.append("| " + " | ".join([*map(_md, key), *texts]) + " |")
        if t.notes:
            out.append("")
            out += [f"{i}. {_md(n)}" for i, n in enumerate(t.notes, 1)]
        out.append("")
    return "\n".join(out)


# --- CSV ---------------------------------------------------------------------------------

CSV_FIELDS = (
    "section",
    "name",
    "run",
    "model",
    "step",
    "key",
    "value",
    "ci_low",
    "ci_high",
    "n",
    "coverage",
    "label",
    "publishable",
    "blocked_by",
    "evidence",
    "changed_after_failure",
)


def to_csv(report: dict[str, Any]) -> str:
    """The long form: one row per labelled quantity, every field, full precision."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for q in report.get("quantities") or []:
        writer.writerow({k: ("" if q.get(k) is None else q.get(k)) for k in CSV_FIELDS})
    return buf.getvalue()


FORMATS = {"latex": ".tex", "markdown": ".md", "csv": ".csv"}


def render_tables(report: dict[str, Any], fmt: str) -> str:
    """The report's tables in ``fmt`` (``latex``, ``markdown`` or ``csv``)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown table format {fmt!r}: use one of {', '.join(FORMATS)}")
    if fmt == "csv":
        return to_csv(report)
    render = to_latex if fmt == "latex" else to_markdown
    return render(report_tables(report), study=str(report.get("study", "")))
