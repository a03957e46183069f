"""The report's ``mode_covariance`` section (docs/estimators.md item 16: item 6's fit by
mode group) on a store made here.

Each run's transitions 0→10 and 10→20 get a ``covariance_transition`` measurement with
per-trajectory sums, as ``rcea probe covariance`` records them, over θ's trajectories of
four questions. The majority mode of each question at θ carries all of the entropy
change (observed = 0.8 × predicted, varying across transitions); every other prefix has
none. The section must equal a plain computation written here (membership and majority
from the records, position-weighted means, numpy's OLS), the failed run left out; it is
labelled like the mode numbers, the view's Covariance page frames show it, the bundle
carries it and ``rcea report verify`` names an edited number.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rcea.app.view.report_frames import mode_covariance_frames
from rcea.study.report.build import build_report
from rcea.study.report.schema import StudyReport, report_json
from rcea.study.report.verify import verify_bundle
from rcea.study.store import require_study, session_scope
from rcea.study.store.measurements import record_measurement
from tests.support.report_study import (
    FAILED_RUN,
    JUDGE,
    N_BOOT,
    RUNS,
    draw,
    final_gate,
    judge,
    make_report_study,
    publish,
    report_records,
)

TRANSITIONS = ((0, 10), (10, 20))
QUESTIONS = ("q0", "q1", "q2", "q3")


def plain_groups(recs: list[dict[str, Any]]) -> dict[str, str]:
    """trajectory id → majority / other / outside_c, from the records alone."""
    in_c = {r["trajectory_id"]: r["reward"] == 1 and r["validity"] == 1 and r["mode"] for r in recs}
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for r in recs:
        if in_c[r["trajectory_id"]]:
            counts[r["question_id"]][r["mode"]] += 1
    maj = {q: sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[0][0] for q, c in counts.items()}
    return {
        r["trajectory_id"]: (
            "outside_c"
            if not in_c[r["trajectory_id"]]
            else "majority"
            if maj[r["question_id"]] == r["mode"]
            else "other"
        )
        for r in recs
    }


def transition_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (run, transition, trajectory of θ): positions and Δh sums."""
    rng = np.random.default_rng(3)
    rows = []
    for run in RUNS:
        for i, (a, b) in enumerate(TRANSITIONS):
            recs = [r for r in records if r["run"] == run and r["step"] == a
                    and r["question_id"] in QUESTIONS]  # fmt: skip
            group = plain_groups([r for r in records if r["run"] == run and r["step"] == a])
            x = 0.01 * (RUNS.index(run) - 1.5) + 0.004 * i
            for r in recs:
                n = int(rng.integers(1, 6))
                carried = group[r["trajectory_id"]] == "majority"
                pred = rng.normal(x, 0.002, size=n) if carried else np.zeros(n)
                rows.append(
                    {
                        "run": run, "a": a, "b": b, "trajectory_id": r["trajectory_id"],
                        "question_id": r["question_id"], "group": group[r["trajectory_id"]],
                        "n": n, "pred": float(pred.sum()), "obs": float(0.8 * pred.sum()),
                    }
                )  # fmt: skip
    return rows


def add_transitions(engine, rows: list[dict[str, Any]]) -> None:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        sid = require_study(s, name="rep").id
        for run in RUNS:
            for a, b in TRANSITIONS:
                mine = [r for r in rows if r["run"] == run and r["a"] == a]
                n = sum(r["n"] for r in mine)
                payload = {
                    "from_step": a,
                    "to_step": b,
                    "from_run": run,
                    "transition": f"{run}:{a}->{b}",
                    "predicted": sum(r["pred"] for r in mine) / n,
                    "observed": sum(r["obs"] for r in mine) / n,
                    "n_positions": n,
                    "trajectories": {
                        "trajectory_id": [r["trajectory_id"] for r in mine],
                        "question_id": [r["question_id"] for r in mine],
                        "n_positions": [r["n"] for r in mine],
                        "predicted_sum": [r["pred"] for r in mine],
                        "observed_sum": [r["obs"] for r in mine],
                    },
                }
                record_measurement(
                    s,
                    study_id=sid,
                    kind="covariance_transition",
                    payload=payload,
                    run=run,
                    model="tiny",
                    step=b,
                )


def test_section_equals_the_plain_computation(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    rows = transition_rows(report_records())
    add_transitions(engine, rows)
    with session_scope(engine) as s:
        rep = report_json(build_report(s, study="rep", n_boot=N_BOOT))
    sec = rep["mode_covariance"]
    assert sec["n_transitions"] == len(RUNS) * len(TRANSITIONS)
    assert sec["n_transitions_without_trajectories"] == 0 and sec["n_unmatched"] == 0
    assert sec["excluded_runs"] == [FAILED_RUN]
    for g in ("majority", "other", "outside_c"):
        mean: dict[str, tuple[float, float, int]] = {}
        for run in RUNS:
            for a, b in TRANSITIONS:
                mine = [r for r in rows if r["run"] == run and r["a"] == a and r["group"] == g]
                n = sum(r["n"] for r in mine)
                if n:
                    mean[f"{run}:{a}->{b}"] = (
                        sum(r["pred"] for r in mine) / n,
                        sum(r["obs"] for r in mine) / n,
                        n,
                    )
        shown = {t["transition"]: t for t in sec["transitions"] if t["group"] == g}
        assert set(shown) == set(mean)
        for t, (p, o, n) in mean.items():
            assert shown[t]["predicted"] == pytest.approx(p, rel=1e-12, abs=1e-18)
            assert shown[t]["observed"] == pytest.approx(o, rel=1e-12, abs=1e-18)
            assert shown[t]["n_positions"] == n
            assert shown[t]["failed_run"] == t.startswith(FAILED_RUN + ":")
        kept = sorted(t for t in mean if not t.startswith(FAILED_RUN + ":"))
        fit = sec["fits"][g]
        assert sorted(fit["transitions"]) == kept
        x = np.array([mean[t][0] for t in kept])
        y = np.array([mean[t][1] for t in kept])
        assert fit["sign_agreement"] == pytest.approx(float(np.mean(np.sign(x) == np.sign(y))))
        if g == "majority":  # the mode that carries the change: observed = 0.8 × predicted
            slope, intercept = np.polyfit(x, y, 1)
            assert fit["slope"] == pytest.approx(slope, rel=1e-9) == pytest.approx(0.8)
            assert fit["spearman_rho"] == pytest.approx(1.0)
        else:  # no change at all: nothing to fit, nothing wrong
            assert fit["slope"] is None and fit["median_abs_error"] == 0.0
    assert "majority-mode prefixes (6 transitions" in sec["sentence"]
    # labelled like the mode numbers
    qs = [q for q in rep["quantities"] if q["section"] == "mode_covariance"]
    modes = [q for q in rep["quantities"] if q["section"] == "modes"]
    assert {(q["name"], q["key"]) for q in qs} >= {
        ("mode_cov_slope", "majority"),
        ("mode_cov_sign_agreement", "other"),
    }
    assert {tuple(q["depends_on"]) for q in qs} == {tuple(q["depends_on"]) for q in modes}
    # the view's Covariance page draws the section's own numbers
    points, fits = mode_covariance_frames(StudyReport.model_validate(rep))
    assert len(points) == len(sec["transitions"])
    assert points.loc[points["group"] == "majority", "observed"].tolist() == pytest.approx(
        [t["observed"] for t in sec["transitions"] if t["group"] == "majority"]
    )
    pooled = fits[fits["scope"] == "pooled (non-failed)"].set_index("group")
    assert list(pooled.index) == ["majority", "other", "outside_c"]
    assert pooled.loc["majority", "slope"] == pytest.approx(0.8)


def test_without_trajectory_sums_there_is_no_section(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)  # its transitions carry means only
    with session_scope(engine) as s:
        rep = report_json(build_report(s, study="rep", n_boot=N_BOOT))
    assert rep["covariance"] and rep["mode_covariance"] is None
    assert not [q for q in rep["quantities"] if q["section"] == "mode_covariance"]


def test_bundle_carries_it_and_verify_names_an_edit(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    add_transitions(engine, transition_rows(report_records()))
    judge(engine, calibrated_hash=JUDGE)
    final_gate(engine, draw(engine, tmp_path), passing=True)
    bundle = Path(publish(engine, tmp_path / "out")["bundle"])
    report = json.loads((bundle / "report.json").read_text())
    qs = [q for q in report["quantities"] if q["section"] == "mode_covariance"]
    assert qs and all(q["publishable"] and q["label"] == "audited" for q in qs)
    assert verify_bundle(bundle).ok
    out = tmp_path / "edited"
    shutil.copytree(bundle, out)
    published = report["mode_covariance"]["fits"]["majority"]["slope"]
    report["mode_covariance"]["fits"]["majority"]["slope"] = published * 1.01
    (out / "report.json").write_text(json.dumps(report, indent=1))
    res = verify_bundle(out)
    assert not res.ok
    assert any(
        m.startswith("mode_covariance.fits.majority.slope: published") for m in res.mismatches
    ), res.mismatches
