"""Items 15–18 in the paper tables and figures (``rcea report tables|figures``).

Items 15, 16 and 18 are tables of their report sections (``realization``, ``mode_tail``,
``mode_covariance``, ``entropy_law``) with the marks of every other table; item 17's
across-seed aggregates enter ``quantities[]`` (section ``replicates``, key = the
estimator): the mean with its interval and the between-seed SD, equal to numpy's mean
and SD of the seeds' own numbers, labelled by what they rest on (a mode-dependent mean is
blocked until the gate passes; a mean of seeds below their floor is "insufficient
evidence"). Figures ``mode_entropy_split`` (item 15), ``mode_covariance_scatter`` (item
16) and ``entropy_law`` (item 18), drawn from the report's own numbers. A published bundle
holding all of them verifies.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rcea.study.report.build import build_report
from rcea.study.report.figures import (
    entropy_law,
    make_figures,
    mode_covariance_scatter,
    mode_entropy_split,
)
from rcea.study.report.paper import render_tables, report_tables
from rcea.study.report.publication import quantities
from rcea.study.report.publish import publish_report
from rcea.study.report.schema import report_json
from rcea.study.report.verify import verify_bundle
from rcea.study.store import require_study, session_scope
from rcea.study.store.measurements import record_measurement
from tests.study.report.test_paper_outputs import _compile
from tests.study.report.test_report_mode_covariance import add_transitions, transition_rows
from tests.study.report.test_report_mode_tail import add_sums
from tests.study.report.test_report_replicates import K_MIN, N_BOOT, PASS_K, SEEDS, _both, _study
from tests.support.helpers import RUBRIC
from tests.support.report_study import (
    FAILED_RUN,
    JUDGE,
    RUNS,
    draw,
    final_gate,
    judge,
    make_report_study,
    publish,
    report_records,
)

#: the estimators of the seeded study at step 10 → (their per-seed quantity, its key)
PER_SEED = {
    "paired_ratio": ("paired_ratio", None),
    "retention": ("retention", None),
    "within_mode_entropy": ("realization_within_mode_entropy", None),
    "pass_at_1 (toy)": ("pass_at_1", "toy"),
    f"pass_at_{PASS_K} (toy)": (f"pass_at_{PASS_K}", "toy"),
}
#: floors low enough for the test studies' six or eight questions, except the paired ratio's
LOW_FLOORS = (
    RUBRIC
    + """
[estimators]
retention_min_questions = 1
retention_min_share = 0.1
mode_entropy_min_questions = 2
mode_entropy_min_share = 0.1
"""
)


def _aggregates(report: dict[str, Any], step: int = 10) -> dict[tuple[str, str], Any]:
    return {
        (q["name"], q["key"]): q
        for q in report["quantities"]
        if q["section"] == "replicates" and q["step"] == step
    }


def _cells(report: dict[str, Any], section: str) -> dict[tuple[str, ...], dict[str, Any]]:
    """The table of ``section``: (row key…) → column → (text, mark)."""
    (table,) = [t for t in report_tables(report) if t.name == section]
    return {
        tuple(key): {
            c: (cell.text, cell.mark) for c, cell in zip(table.columns, cells, strict=True)
        }
        for key, cells in table.rows
    }


def test_across_seed_rows_are_the_seeds_mean_and_sd(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _study(engine, tmp_path)
    report, bundle = _both(engine)
    assert report["quantities"] == bundle["quantities"]  # what verify re-derives
    agg = _aggregates(report)
    assert {key for _, key in agg} == set(PER_SEED)
    assert {name for name, _ in agg} == {"across_seed_mean", "across_seed_sd"}
    own = {(q["name"], q["run"], q["step"], q["key"]): q for q in report["quantities"]}
    for estimator, (name, key) in PER_SEED.items():
        values = [own[(name, f"grpo [train seed {s}]", 10, key)]["value"] for s in SEEDS]
        mean, sd = agg[("across_seed_mean", estimator)], agg[("across_seed_sd", estimator)]
        assert (mean["run"], mean["model"], mean["n"], sd["n"]) == ("grpo", "tiny", 3, 3)
        assert mean["value"] == pytest.approx(np.mean(values), rel=1e-12)
        assert sd["value"] == pytest.approx(np.std(values, ddof=1), rel=1e-12)
        assert mean["ci_low"] <= mean["value"] <= mean["ci_high"]
        assert sd["ci_low"] is None

    # no gate: the mode-dependent means are blocked like the seeds' own numbers
    for estimator in ("retention", "within_mode_entropy"):
        q = agg[("across_seed_mean", estimator)]
        assert q["depends_on"] == ["partition", "validity"] and not q["publishable"]
        assert q["blocked_by"].startswith(report["audits"]["pair"]["blocked_by"])
    # six questions, floor ten: every seed's ρ_H is insufficient, so is their mean
    rho = agg[("across_seed_mean", "paired_ratio")]
    assert rho["label"] == "insufficient evidence" and not rho["depends_on"]
    for s in SEEDS:
        why = own[("paired_ratio", f"grpo [train seed {s}]", 10, None)]["evidence"]
        assert f"train seed {s}: " + why.removeprefix("insufficient evidence: ") in rho["evidence"]
    passk = agg[("across_seed_mean", f"pass_at_{PASS_K} (toy)")]
    assert passk["label"] == "entropy-only (no audit)" and passk["evidence"] is None

    cells = _cells(report, "replicates")
    row = ("grpo", "tiny", "10")
    text, mark = cells[(*row, f"pass_at_{PASS_K} (toy)")]["across_seed_mean"]
    assert mark == "u" and text == (
        f"{passk['value']:.3f} [{passk['ci_low']:.3f}, {passk['ci_high']:.3f}]"
    )
    assert cells[(*row, "paired_ratio")]["across_seed_mean"][1] == "*"
    assert cells[(*row, "retention")]["across_seed_mean"][1] == "b"
    assert cells[(*row, "within_mode_entropy")]["across_seed_sd"][1] == "b"
    assert "\\label{tab:rcea-replicates}" in render_tables(report, "latex")


def test_one_seed_has_no_across_seed_row(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _study(engine, tmp_path, seeds=(7,))
    report, _ = _both(engine)
    assert report["replicates"]["groups"]  # the section lists the seed …
    assert not _aggregates(report, 0) and not _aggregates(report, 10)  # … no aggregate
    assert "replicates" not in {t.name for t in report_tables(report)}


def test_any_estimator_the_section_lists_gets_its_rows(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Rows come from the section's quantities by name: one it adds shows unchanged."""
    _study(engine, tmp_path)
    report, _ = _both(engine)
    group = next(g for g in report["replicates"]["groups"] if g["step"] == 10)
    new = copy.deepcopy(group["quantities"][0])
    new.update(quantity="concentration_ratio", mean=1.25, between_seed_sd=0.5)
    group["quantities"].append(new)
    agg = _aggregates({"quantities": quantities(report)})
    assert agg[("across_seed_mean", "concentration_ratio")]["value"] == 1.25
    assert agg[("across_seed_sd", "concentration_ratio")]["value"] == 0.5


def test_an_audited_bundle_with_seeds_verifies_and_marks_them(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _study(engine, tmp_path)
    judge(engine, calibrated_hash=JUDGE, study="sd")
    final_gate(engine, draw(engine, tmp_path, study="sd", rubric=LOW_FLOORS), passing=True)
    with session_scope(engine) as s:
        res = publish_report(
            s, study="sd", out_dir=tmp_path / "out", actor="r", n_boot=N_BOOT, k_min=K_MIN
        )
    bundle = Path(res["bundle"])
    verified = verify_bundle(bundle)
    assert verified.ok, verified.mismatches
    report = json.loads((bundle / "report.json").read_text())
    tex = tmp_path / "rcea-tables.tex"
    tex.write_text(render_tables(report, "latex"))
    _compile(tex, tmp_path)
    cells = _cells(report, "replicates")
    row = ("grpo", "tiny", "10")
    assert cells[(*row, "retention")]["across_seed_mean"][1] == "a"
    assert cells[(*row, "within_mode_entropy")]["across_seed_mean"][1] == "a"
    assert cells[(*row, "paired_ratio")]["across_seed_mean"][1] == "*"


@pytest.fixture
def full(engine, tmp_path: Path) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """The report study with item 16's per-trajectory sums and grouped transitions."""
    if "sqlite" not in str(engine.url):
        pytest.skip("one store is enough: tables and figures read the report")
    make_report_study(engine, tmp_path)
    add_sums(engine, report_records())
    add_transitions(engine, transition_rows(report_records()))
    _dense_traces(engine)
    return {"engine": engine, "tmp": tmp_path}


def _dense_traces(engine) -> None:  # type: ignore[no-untyped-def]
    """Accuracy and entropy at every step (the support study's, every 2 and 5 steps,
    leave item 18's early window, step ≤ 3, two pairs of one entropy: no early fit)."""
    with session_scope(engine) as s:
        sid = require_study(s, name="rep").id
        for i, run in enumerate(RUNS):
            acc = [min(0.3 + 0.02 * st, 0.6) for st in range(21)]
            if run == FAILED_RUN:
                acc = [a if st <= 10 else 0.02 for st, a in enumerate(acc)]
            trace = [{"step": st, "progress": st / 20, "accuracy": a} for st, a in enumerate(acc)]
            curve = [
                {"step": st, "progress": st / 20, "entropy": 1.0 + 0.1 * i - 0.03 * st}
                for st in range(21)
            ]
            for kind, key, payload in (
                ("accuracy_trace", "toy", {"points": trace}),
                ("training_curve", "", {"points": curve}),
            ):
                record_measurement(
                    s,
                    study_id=sid,
                    kind=kind,
                    run=run,
                    model="tiny" if kind == "accuracy_trace" else "",
                    key=key,
                    payload=payload,
                )


#: per section, the columns items 15, 16 and 18 must have
ITEM_COLUMNS = {
    "realization": {
        "realization_mode_entropy",
        "realization_within_mode_entropy",
        "realization_retention",
    },
    "mode_tail": {
        "mode_tail_majority_mass_share",
        "mode_tail_majority_token_share",
        "mode_tail_concentration_ratio",
    },
    "mode_covariance": {"mode_cov_sign_agreement", "mode_cov_slope", "mode_cov_r_squared"},
    "entropy_law": {
        "entropy_law_a",
        "entropy_law_b",
        "entropy_law_r2",
        "entropy_law_ceiling",
        "entropy_law_early_fit_rmse",
    },
}


def test_items_15_16_18_tables_and_figures_before_and_after_the_gate(full: dict[str, Any]) -> None:
    engine, tmp = full["engine"], full["tmp"]
    with session_scope(engine) as s:
        before = json.loads(json.dumps(report_json(build_report(s, study="rep", n_boot=N_BOOT))))
    tables = {t.name: t for t in report_tables(before)}
    for section, columns in ITEM_COLUMNS.items():
        assert columns <= set(tables[section].columns), section
    # no gate yet: every mode-dependent cell is blocked, the law is unaudited
    for section in ("realization", "mode_tail", "mode_covariance"):
        marks = {m for row in _cells(before, section).values() for _, m in row.values()}
        assert marks <= {"b", ""} and "b" in marks, section
    law = {m for row in _cells(before, "entropy_law").values() for _, m in row.values()}
    assert law <= {"u", ""} and "u" in law
    order = [t.name for t in report_tables(before)]
    assert order.index("retention") < order.index("realization") < order.index("passk")
    assert order.index("mode_tail") < order.index("mode_covariance") < order.index("entropy_law")

    judge(engine, calibrated_hash=JUDGE)
    final_gate(engine, draw(engine, tmp, rubric=LOW_FLOORS), passing=True)
    bundle = Path(publish(engine, tmp / "out")["bundle"])
    verified = verify_bundle(bundle)
    assert verified.ok, verified.mismatches
    report = json.loads((bundle / "report.json").read_text())
    tex = tmp / "rcea-tables.tex"
    tex.write_text(render_tables(report, "latex"))
    _compile(tex, tmp)  # the new captions and keys are LaTeX that compiles
    for section in ("realization", "mode_tail", "mode_covariance"):
        marks = {m for row in _cells(report, section).values() for _, m in row.values()}
        assert "a" in marks and "b" not in marks, section
    # the figures: drawn into the bundle, and their data are the report's
    assert (bundle / "figures" / "mode_entropy_split.png").exists()
    assert (bundle / "figures" / "entropy_law.png").exists()
    assert (bundle / "figures" / "mode_covariance_scatter.png").exists()
    items = {"mode_entropy_split", "mode_covariance_scatter", "entropy_law"}
    assert items <= set(make_figures(report, "svg"))
    split = mode_entropy_split(report)
    assert split is not None
    ax = split.axes[0]
    realized = [e["report"] for e in report["realization"] if e["report"]]
    heights = [round(p.get_height(), 12) for p in ax.patches]
    assert heights == [round(r["mode_entropy"], 12) for r in realized] + [
        round(r["within_mode_entropy"], 12) for r in realized
    ]
    scatter = mode_covariance_scatter(report)
    assert scatter is not None
    drawn = {tuple(xy) for c in scatter.axes[0].collections for xy in c.get_offsets().tolist()}
    ts = report["mode_covariance"]["transitions"]
    assert drawn == {(t["predicted"], t["observed"]) for t in ts}
    fig = entropy_law(report)
    assert fig is not None
    fitted = {
        (r["label"], kind): law
        for r in report["entropy_law"]["runs"]
        for kind, law in r["entropies"].items()
        if law and law["a"] is not None
    }
    assert fitted
    (label, kind), law = next(iter(fitted.items()))
    (ax,) = [a for a in fig.axes if a.get_title() == kind]
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == f"{label} law"]
    h, r = line.get_data()
    # the drawn curve is R = −a·exp(H) + b with the section's a and b
    assert np.allclose(r, -law["a"] * np.exp(h) + law["b"], rtol=1e-9, atol=1e-12)


def test_no_realization_or_law_no_figure() -> None:
    assert mode_entropy_split({"realization": []}) is None
    assert mode_covariance_scatter({"mode_covariance": None}) is None
    assert entropy_law({"entropy_law": None}) is None
