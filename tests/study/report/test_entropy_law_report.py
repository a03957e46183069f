"""The report's ``entropy_law`` section (docs/estimators.md item 18): computed from the
study's stored training curves and accuracy traces, checked against scipy on the same
points, carried by the bundle and re-derived by ``rcea report verify``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from rcea.app.cli import app
from rcea.study.report.build import build_report
from rcea.study.report.schema import StudyReport, report_json
from rcea.study.report.verify import verify_bundle
from rcea.study.store import require_study, session_scope
from rcea.study.store.measurements import record_measurement
from tests.support.report_study import (
    FAILED_RUN,
    JUDGE,
    RUNS,
    draw,
    final_gate,
    judge,
    make_report_study,
    publish,
)

runner = CliRunner()


OFFSET = {"grpo": 0.0, "ppo": 0.1, "dapo": 0.2, "clipcov": 0.3}


def _vary_curves(engine) -> None:  # type: ignore[no-untyped-def]
    """Give each run its own entropy level (the support study logs one curve for all)."""
    with session_scope(engine) as s:
        sid = require_study(s, name="rep").id
        for run in RUNS:
            points = [
                {"step": st, "progress": st / 20, "entropy": OFFSET[run] + 1.0 - 0.02 * st}
                for st in range(0, 21, 5)
            ]
            record_measurement(
                s, study_id=sid, kind="training_curve", run=run, payload={"points": points}
            )


def _reference(run: str, offset: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """tests/support/report_study.py's traces, paired by hand: accuracy every 2 steps,
    entropy 1 − 0.02·s every 5 steps → each accuracy step with the entropy at 5·⌊s/5⌋."""
    steps = np.arange(0, 21, 2)
    acc = np.minimum(0.3 + 0.02 * steps, 0.5 if run == FAILED_RUN else 0.6)
    if run == FAILED_RUN:
        acc = np.where(steps <= 10, acc, 0.02)
    h = offset + 1.0 - 0.02 * (5 * (steps // 5))
    return h, acc


def test_section_matches_scipy_on_the_stored_traces(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    _vary_curves(engine)
    with session_scope(engine) as s:
        rep = report_json(build_report(s, study="rep", n_boot=200))
    StudyReport.model_validate(rep)
    sec = rep["entropy_law"]
    assert sec["fit_fraction"] == 0.15 and sec["without_trace"] == []
    by = {r["run"]: r for r in sec["runs"]}
    assert set(by) == set(RUNS)
    for run in RUNS:
        h, acc = _reference(run, OFFSET[run])
        ref = stats.linregress(np.exp(h), acc)
        got = by[run]
        assert got["model"] == "tiny" and got["entropy_keys"] == {"global": "entropy"}
        assert got["a"] == pytest.approx(-ref.slope, rel=1e-9)
        assert got["b"] == pytest.approx(ref.intercept, rel=1e-9)
        assert got["r2"] == pytest.approx(ref.rvalue**2, rel=1e-9)
        assert got["entropies"]["success"] is None
        pts = got["entropies"]["global"]["points"]
        assert pts["entropy_steps"] == [int(5 * (s // 5)) for s in range(0, 21, 2)]
    # one entropy logged: no comparison, and it says so
    assert sec["comparison"]["best"] is None and "only one entropy" in sec["comparison"]["sentence"]
    # the ordering: the non-failed runs at their reported checkpoints, per model
    order = sec["ordering"]["by_model"]["tiny"]
    assert order["excluded"] == [FAILED_RUN]
    assert {m["metric"] for m in order["metrics"]} == {
        "greedy_accuracy",
        "macro_accuracy",
        "pass_at_k",
    }
    assert all(m["p_method"] == "exact" for m in order["metrics"])
    greedy = {(g["run"], g["step"]): g for g in rep["greedy"]}
    rows = order["rank_table"]
    # the endpoint entropy is the curve's latest at or before the reported step (20)
    assert [r["entropy"] for r in rows] == pytest.approx([OFFSET[r["run"]] + 0.6 for r in rows])
    ent = [r["entropy"] for r in rows]
    macro = [greedy[(r["run"], 20)]["macro_accuracy"] for r in rows]
    tau = next(m for m in order["metrics"] if m["metric"] == "macro_accuracy")["kendall_tau"]
    assert tau == pytest.approx(stats.kendalltau(ent, macro, variant="b").statistic)
    assert sec["ordering_sentence"].startswith("Endpoint global entropy")
    names = {q["name"] for q in rep["quantities"] if q["section"] == "entropy_law"}
    assert {"entropy_law_a", "entropy_law_ceiling", "entropy_order_kendall_tau"} <= names
    assert all(
        q["label"] == "entropy-only (no audit)"
        for q in rep["quantities"]
        if q["section"] == "entropy_law"
    )


def test_stats_entropy_law_reads_the_study(engine, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    monkeypatch.setenv("RCEA_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    out = runner.invoke(app, ["stats", "entropy-law", "--study", "rep", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    h, acc = _reference("grpo")
    ref = stats.linregress(np.exp(h), acc)
    grpo = next(r for r in data["runs"] if r["run"] == "grpo")
    assert grpo["a"] == pytest.approx(-ref.slope, rel=1e-9)
    out = runner.invoke(app, ["stats", "entropy-law", "--study", "nope", "--json"])
    assert out.exit_code == 1 and json.loads(out.stdout)["ok"] is False


def _rehash(bundle: Path) -> None:
    hashes = json.loads((bundle / "hashes.json").read_text())
    digest = hashlib.sha256((bundle / "report.json").read_bytes()).hexdigest()
    hashes["files"]["report.json"] = digest
    (bundle / "hashes.json").write_text(json.dumps(hashes))


def test_bundle_carries_it_and_verify_rederives_it(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    judge(engine, calibrated_hash=JUDGE)
    final_gate(engine, draw(engine, tmp_path), passing=True)
    bundle = Path(publish(engine, tmp_path / "out")["bundle"])
    report = json.loads((bundle / "report.json").read_text())
    assert report["entropy_law"]["runs"]
    assert verify_bundle(bundle).ok

    # an edited number in the section is named
    report["entropy_law"]["runs"][0]["ceiling"] += 0.01
    (bundle / "report.json").write_text(json.dumps(report))
    _rehash(bundle)
    res = verify_bundle(bundle)
    assert not res.ok
    assert any("entropy_law.runs[0].ceiling" in m for m in res.mismatches), res.mismatches

    # an edited stored entropy changes what is re-derived
    report["entropy_law"]["runs"][0]["ceiling"] -= 0.01
    (bundle / "report.json").write_text(json.dumps(report))
    _rehash(bundle)
    assert verify_bundle(bundle).ok
    inputs = json.loads((bundle / "inputs.json").read_text())
    curve = next(m for m in inputs["inputs"]["measurements"] if m["kind"] == "training_curve")
    curve["payload"]["points"][1]["entropy"] += 0.1
    (bundle / "inputs.json").write_text(json.dumps(inputs))
    hashes = json.loads((bundle / "hashes.json").read_text())
    hashes["files"]["inputs.json"] = hashlib.sha256(
        (bundle / "inputs.json").read_bytes()
    ).hexdigest()
    (bundle / "hashes.json").write_text(json.dumps(hashes))
    res = verify_bundle(bundle)
    assert any(m.startswith("entropy_law.") for m in res.mismatches), res.mismatches


def test_a_bundle_from_before_the_section_still_verifies(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    judge(engine, calibrated_hash=JUDGE)
    final_gate(engine, draw(engine, tmp_path), passing=True)
    bundle = Path(publish(engine, tmp_path / "out")["bundle"])
    report = json.loads((bundle / "report.json").read_text())
    del report["entropy_law"]
    report["quantities"] = [q for q in report["quantities"] if q["section"] != "entropy_law"]
    (bundle / "report.json").write_text(json.dumps(report))
    _rehash(bundle)
    assert verify_bundle(bundle).ok, verify_bundle(bundle).mismatches
