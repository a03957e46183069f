"""The report's ``mode_tail`` section (docs/estimators.md item 16) on a store made here.

Each endpoint gets a ``tail_trajectories`` measurement — generated tokens reduced by
``trajectory_sums`` as the probe does — and the report's numbers must equal
``mode_stratified_tail`` on those tokens with C and the modes taken from the records
(R = 1, valid, a mode); they are labelled like the mode numbers; the bundle carries them
and ``rcea report verify`` names an edited one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rcea.app.view.report_frames import mode_tail_frame
from rcea.audits.mode_tail import mode_stratified_tail, trajectory_sums
from rcea.study.report.build import build_report
from rcea.study.report.schema import StudyReport, report_json
from rcea.study.report.verify import verify_bundle
from rcea.study.store import require_study, session_scope
from rcea.study.store.measurements import record_measurement
from tests.support.report_study import (
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

END = 20


def tokens(records: list[dict[str, Any]], run: str) -> tuple[list[dict[str, Any]], Any, Any]:
    """The endpoint's records and generated per-token log-probabilities."""
    recs = [r for r in records if r["run"] == run and r["step"] == END]
    rng = np.random.default_rng(RUNS.index(run))
    lengths = rng.integers(3, 12, size=len(recs))
    traj = np.repeat(np.arange(len(recs)), lengths)
    return recs, traj, -rng.gamma(1.5, 1.0, size=traj.size)


def add_sums(engine, records: list[dict[str, Any]]) -> None:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        sid = require_study(s, name="rep").id
        for run in RUNS:
            recs, traj, logp = tokens(records, run)
            sums = trajectory_sums(
                [r["question_id"] for r in recs], [r["reward"] for r in recs], traj, logp
            )
            payload = {
                "quantile": sums.quantile,
                "trajectory_id": [r["trajectory_id"] for r in recs],
                "question_id": [r["question_id"] for r in recs],
                "reward": [r["reward"] for r in recs],
                "n_tokens": sums.n_tokens.tolist(),
                "positive_mass": sums.positive_mass.tolist(),
                "tail_positive_mass": sums.tail_positive_mass.tolist(),
                "tail_tokens": sums.tail_tokens.tolist(),
            }
            record_measurement(
                s,
                study_id=sid,
                kind="tail_trajectories",
                payload=payload,
                run=run,
                model="tiny",
                step=END,
            )


def test_section_equals_the_token_computation(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    records = report_records()
    add_sums(engine, records)
    with session_scope(engine) as s:
        rep = report_json(build_report(s, study="rep", n_boot=N_BOOT))
    section = rep["mode_tail"]
    assert [e["run"] for e in section] == sorted(RUNS)
    for e in section:
        recs, traj, logp = tokens(records, e["run"])
        in_c = [int(r["reward"] == 1 and r["validity"] == 1) for r in recs]
        want = mode_stratified_tail(
            [r["question_id"] for r in recs],
            [r["reward"] for r in recs],
            in_c,
            [r["mode"] or "uncertain" for r in recs],
            traj,
            logp,
        )
        assert e["n_unmatched"] == 0 and e["n_trajectories"] == len(recs)
        assert e["n_tokens_c"] == want.n_tokens_c and e["n_success_tail"] == want.n_success_tail
        for name in (
            "majority_mass_share",
            "majority_token_share",
            "concentration_ratio",
            "success_tail_majority_share",
        ):
            assert e[name] == pytest.approx(getattr(want, name), rel=1e-9), name
        assert e["question_ratio_quartiles"] == pytest.approx(
            list(want.question_ratio_quartiles or []), rel=1e-9
        )
    # the view's Covariance page table shows the report's own numbers
    frame = mode_tail_frame(StudyReport.model_validate(rep))
    assert frame["concentration_ratio"].tolist() == pytest.approx(
        [e["concentration_ratio"] for e in section]
    )
    qs = [q for q in rep["quantities"] if q["section"] == "mode_tail"]
    modes = [q for q in rep["quantities"] if q["section"] == "modes"]
    assert len(qs) == 4 * len(RUNS)
    assert {tuple(q["depends_on"]) for q in qs} == {tuple(q["depends_on"]) for q in modes}
    assert all(not q["publishable"] for q in qs)


def test_bundle_carries_it_and_verify_names_an_edit(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    add_sums(engine, report_records())
    judge(engine, calibrated_hash=JUDGE)
    final_gate(engine, draw(engine, tmp_path), passing=True)
    bundle = Path(publish(engine, tmp_path / "out")["bundle"])
    report = json.loads((bundle / "report.json").read_text())
    assert len(report["mode_tail"]) == len(RUNS)
    qs = [q for q in report["quantities"] if q["section"] == "mode_tail"]
    assert qs and all(q["publishable"] and q["label"] == "audited" for q in qs)
    assert verify_bundle(bundle).ok
    out = tmp_path / "edited"
    shutil.copytree(bundle, out)
    published = report["mode_tail"][0]["concentration_ratio"]
    report["mode_tail"][0]["concentration_ratio"] = published * 1.01
    (out / "report.json").write_text(json.dumps(report, indent=1))
    res = verify_bundle(out)
    assert not res.ok
    assert (
        f"mode_tail[0].concentration_ratio: published {published * 1.01!r}, "
        f"recomputed {published!r}" in res.mismatches
    )
