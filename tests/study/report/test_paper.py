"""rcea.study.report.paper on a constructed report: every cell's value, interval and mark,
footnotes for insufficient evidence and blocked numbers, LaTeX escaping of user names, and
the CSV's long form at full precision."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest

from rcea.study.report.paper import latex_escape, render_tables, report_tables


def _q(name: str, value: Any, **kw: Any) -> dict[str, Any]:
    base = {
        "name": name,
        "section": "entropy",
        "run": "grpo",
        "model": "tiny",
        "step": 10,
        "key": None,
        "value": value,
        "ci_low": None,
        "ci_high": None,
        "n": 8,
        "coverage": None,
        "depends_on": [],
        "publishable": True,
        "blocked_by": None,
        "label": "entropy-only (no audit)",
        "evidence": None,
    }
    return {**base, **kw}


REPORT = {
    "study": "s_1&2",
    "schema_version": "1",
    "quantities": [
        _q("paired_ratio", 1.3819292704529438, ci_low=0.98736, ci_high=1.9773),
        _q("mean_token_entropy", 0.794, step=0),
        _q(
            "paired_ratio",
            1.1,
            step=0,
            label="insufficient evidence",
            evidence="insufficient evidence: 2 of 8 questions eligible",
        ),
        _q(
            "retention",
            0.71,
            section="retention",
            run="kl_cov&50%",
            label="audited",
            depends_on=["pair"],
        ),
        _q(
            "retention",
            0.5,
            section="retention",
            run="ppo",
            label="audited",
            publishable=False,
            blocked_by="pair audit failed",
            depends_on=["pair"],
        ),
        _q("pass_at_4", 0.85, section="passk", key="math500"),
    ],
}


def test_one_table_per_section_rows_by_checkpoint() -> None:
    tables = {t.name: t for t in report_tables(REPORT)}
    assert list(tables) == ["entropy", "retention", "passk"]
    ent = tables["entropy"]
    assert ent.index == ["run", "model", "step"]
    assert ent.columns == ["paired_ratio", "mean_token_entropy"]
    assert [key for key, _ in ent.rows] == [["grpo", "tiny", "0"], ["grpo", "tiny", "10"]]
    (_, step0), (_, step10) = ent.rows
    assert (step0[0].text, step0[0].mark, step0[0].note) == ("1.100", "*", 1)
    assert (step10[0].text, step10[0].mark) == ("1.382 [0.987, 1.977]", "u")
    assert step10[1].text == "–"  # no mean_token_entropy at step 10
    assert ent.notes == [
        "paired_ratio (grpo/tiny/0): insufficient evidence: 2 of 8 questions eligible"
    ]
    ret = tables["retention"]
    marks = {key[0]: cells[0].mark for key, cells in ret.rows}
    assert marks == {"kl_cov&50%": "a", "ppo": "b"}
    assert ret.notes == ["retention (ppo/tiny/10): blocked by pair audit failed"]
    assert tables["passk"].index == ["run", "model", "step", "key"]


def test_latex_is_booktabs_with_escaped_names_and_marks() -> None:
    tex = render_tables(REPORT, "latex")
    assert tex.count("\\begin{table}") == 3 and tex.count("\\toprule") == 3
    assert "kl\\_cov\\&50\\%" in tex and "kl_cov&50%" not in tex
    assert "1.382 [0.987, 1.977]$^{\\mathrm{u}}$" in tex
    assert "1.100$^{\\mathrm{*,1}}$" in tex
    assert "1: paired\\_ratio (grpo/tiny/0): insufficient evidence" in tex
    assert "\\label{tab:rcea-retention}" in tex


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("a_b", "a\\_b"),
        ("50%", "50\\%"),
        ("x^2~y", "x\\textasciicircum{}2\\textasciitilde{}y"),
        ("\\cmd{}", "\\textbackslash{}cmd\\{\\}"),
        ("$#&", "\\$\\#\\&"),
    ],
)
def test_latex_escape(raw: str, escaped: str) -> None:
    assert latex_escape(raw) == escaped


def test_markdown_marks_and_pipes() -> None:
    md = render_tables({**REPORT, "study": "a|b"}, "markdown")
    assert "# RCEA report tables: a\\|b" in md
    assert "| grpo | tiny | 0 | 1.100 <sup>*,1</sup> | 0.794 <sup>u</sup> |" in md


def test_csv_is_the_long_form_at_full_precision() -> None:
    rows = list(csv.DictReader(io.StringIO(render_tables(REPORT, "csv"))))
    assert len(rows) == len(REPORT["quantities"])
    assert float(rows[0]["value"]) == 1.3819292704529438
    assert rows[0]["ci_low"] == "0.98736" and rows[1]["ci_low"] == ""
    assert rows[4]["blocked_by"] == "pair audit failed" and rows[4]["publishable"] == "False"


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown table format 'docx'"):
        render_tables(REPORT, "docx")
