"""``report.html`` laid out like the paper: per model scale the supplement's tables, each
with its ``depends_on`` status (audited / entropy-only / blocked and why), then the
figures, the full quantity list in an appendix, and the hashes."""

from __future__ import annotations

import copy
import re
from pathlib import Path

from rcea.audits.covariance import FIT_SUMMARY
from rcea.study.report.build import build_report
from rcea.study.report.html import fmt, render_html
from rcea.study.report.schema import report_json
from rcea.study.store import session_scope
from tests.support.report_study import (
    JUDGE,
    N_BOOT,
    draw,
    final_gate,
    judge,
    make_report_study,
    publish,
)


def _sections(html: str) -> list[str]:
    return re.findall(r"<h2>(.*?)</h2>", html)


def test_published_page_is_per_scale_with_an_appendix(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    judge(engine, calibrated_hash=JUDGE)
    final_gate(engine, draw(engine, tmp_path), passing=True)
    bundle = Path(publish(engine, tmp_path / "out")["bundle"])
    html = (bundle / "report.html").read_text()
    models = sorted({m for m in re.findall(r"<h2>Model scale (.*?)</h2>", html)})
    assert models == ["tiny"]
    assert _sections(html) == [
        "Audits",
        "Training failure (per run and model)",
        "Model scale tiny",
        "Entropy–performance law R = −a·exp(H) + b",
        "Training seeds (item 17)",  # one seed: said in words
        "Figures",
        "Appendix: every quantity",
        "Hashes",
    ]
    law = html[html.index("<h2>Entropy–performance law") : html.index("<h2>Figures</h2>")]
    assert "<th>ceiling b − a</th>" in law and "No comparison: only one entropy" in law
    assert "<code>rcea report verify &lt;this directory&gt;</code>" in html
    assert "<p>Single seed: no (run, model, step) has two or more training seeds" in html
    scale = html[html.index("<h2>Model scale tiny</h2>") : html.index("<h2>Entropy–")]
    for h3 in (
        "Benchmarks and retention",
        "Endpoint ratios with coverage; paired ratios with CI and sign test",
        "Covariance fit",
        "q99 tail and rank budgets",
        "Failure diagnosis",
    ):
        assert f"<h3>{h3}</h3>" in scale
    assert "retention, N_eff, mode coverage: depends on: partition, validity — audited" in scale
    cov = scale[scale.index("<h3>Covariance fit</h3>") : scale.index("<h3>q99 tail")]
    assert "<tr>" + "".join(f"<th>{k}</th>" for k in ("n", *FIT_SUMMARY)) + "</tr>" in cov
    assert "depends on: nothing — entropy-only (no audit)" in scale
    import json

    rep = json.loads((bundle / "report.json").read_text())
    c = next(c for c in rep["checkpoints"] if c["retention"] and c["retention"]["retention"])
    r = c["retention"]
    assert f"<td>{fmt(r['retention'])}</td><td>[{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]" in scale
    e = next(c["entropy"] for c in rep["checkpoints"] if c["entropy"]["paired_ratio"] is not None)
    assert f"<td>{fmt(e['paired_ratio'])}</td>" in scale
    # the appendix keeps every quantity
    appendix = html[html.index("Appendix: every quantity") : html.index("<h2>Hashes</h2>")]
    assert appendix.count("<tr>") == len(rep["quantities"]) + 1


def test_two_scales_and_blocked_status(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    with session_scope(engine) as s:
        rep = report_json(build_report(s, study="rep", n_boot=N_BOOT))
    big = copy.deepcopy(rep["checkpoints"])
    for c in big:
        c["model"] = "big"
    rep["checkpoints"] += big
    html = render_html(rep, scope="full (audited)", figures={}, hashes={})
    assert re.findall(r"<h2>Model scale (.*?)</h2>", html) == ["big", "tiny"]
    blocker = rep["audits"]["pair"]["blocked_by"]
    text = html.replace("&#x27;", "'").replace("&quot;", '"').replace("&lt;", "<")
    assert blocker and text.count(f"blocked: {blocker}") >= 2  # one per scale
    assert "depends on: nothing — entropy-only (no audit)" in text
