"""Multi-model studies (docs/estimators.md item 14): a checkpoint is (run, model, step).

A synthetic two-model study — the same run names and steps at two scales, with different
mode structure and entropies per model — gives, through ``rcea stats``, ``rcea report
build`` and the view's frames, exactly the numbers of the same computation on each
single-model file. On the old code (checkpoints keyed by (run, step), a base pooled across
models, failures keyed by run name, one pooled association) these tests fail.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from rcea.app.cli import app as cli
from rcea.app.view import report_frames as rf
from rcea.study.records.ingest import ingest_file
from rcea.study.report.build import build_report
from rcea.study.report.schema import StudyReport, report_json
from rcea.study.store import require_study, session_scope
from rcea.study.store.measurements import record_measurement
from tests.support.helpers import write_jsonl

RUNS = ("grpo", "clipcov")
STEPS = (10, 20)
MODELS = {
    # model → (modes at the base, modes after training, token-entropy scale, success p)
    "3B": (1, 1, 0.6, 0.55),
    "7B": (3, 2, 1.1, 0.7),
}
N_Q = 6
PER_Q = 24
N_BOOT = 200
FAILED = ("clipcov", "7B")  # fails at 7B only; clipcov at 3B is healthy


def model_records(model: str, seed: int) -> list[dict[str, Any]]:
    """One model's records: a shared ``base`` run at step 0 (the base of every run of the
    model) and every run at STEPS; trajectory ids unique across models."""
    base_modes, trained_modes, scale, p = MODELS[model]
    rng = random.Random(seed)
    recs: list[dict[str, Any]] = []
    for run, steps in (("base", (0,)), *((r, STEPS) for r in RUNS)):
        for step in steps:
            n_modes = base_modes if step == 0 else trained_modes
            for q in range(N_Q):
                for k in range(PER_Q):
                    r = int(rng.random() < p + 0.02 * q)
                    recs.append(
                        {
                            "trajectory_id": f"{model}-{run}-{step}-{q}-{k}",
                            "question_id": f"q{q}",
                            "text": f"solution {k}",
                            "reward": r,
                            "run": run,
                            "model": model,
                            "step": step,
                            "seed": k,
                            "mean_token_entropy": scale
                            * rng.uniform(0.5, 1.5)
                            * (1.3 if r == 0 else 1.0),
                            "seq_logprob": -scale * rng.uniform(5.0, 30.0),
                            "validity": 1 if r else None,
                            "mode": f"m{rng.randrange(n_modes)}" if r else None,
                        }
                    )
    return recs


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    per = {m: model_records(m, seed=i) for i, m in enumerate(MODELS)}
    out = {m: write_jsonl(tmp_path / f"{m}.jsonl", recs) for m, recs in per.items()}
    # interleave the two models' records so that file order cannot separate them
    both = [r for pair in zip(per["3B"], per["7B"], strict=True) for r in pair]
    out["both"] = write_jsonl(tmp_path / "both.jsonl", both)
    return out


def cli_json(*args: str) -> dict[str, Any]:
    res = CliRunner().invoke(cli, [*args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def cli_fail(*args: str) -> str:
    res = CliRunner().invoke(cli, list(args))
    assert res.exit_code != 0, res.output
    return res.output


# --------------------------------------------------------------------------- rcea stats


def test_stats_entropy_per_model_equals_single_model_file(files: dict[str, Path]) -> None:
    both = str(files["both"])
    out = cli_fail("stats", "entropy", both, "--run", "grpo", "--step", "10")
    assert "2 models (3B, 7B)" in out and "--model" in out
    for model in MODELS:
        for run, step in (("grpo", 10), ("clipcov", 20), ("base", 0)):
            args = ("--run", run, "--step", str(step), "--n-boot", str(N_BOOT))
            mixed = cli_json("stats", "entropy", both, "--model", model, *args)
            single = cli_json("stats", "entropy", str(files[model]), *args)
            assert mixed == single
            assert mixed["model"] == model and mixed["n_trajectories"] == N_Q * PER_Q
    # pooling only on request, and labelled
    pooled = cli_json(
        "stats", "entropy", both, "--run", "grpo", "--step", "10", "--pool-models", "--n-boot", "50"
    )
    assert pooled["model"] == "pooled" and pooled["pooled_models"] == ["3B", "7B"]
    assert pooled["n_trajectories"] == 2 * N_Q * PER_Q


def test_stats_retention_per_model_equals_single_model_file(files: dict[str, Path]) -> None:
    both = str(files["both"])
    out = cli_fail("stats", "retention", both)
    assert "2 models (3B, 7B)" in out
    all_models = cli_json("stats", "retention", both, "--all-models", "--n-boot", str(N_BOOT))
    for model in MODELS:
        mixed = cli_json("stats", "retention", both, "--model", model, "--n-boot", str(N_BOOT))
        single = cli_json("stats", "retention", str(files[model]), "--n-boot", str(N_BOOT))
        assert mixed == single
        assert mixed["results"] == [r for r in all_models["results"] if r["model"] == model]
        for r in mixed["results"]:
            assert r["base"] == {"run": "base", "model": model, "step": 0}
    # 3B has one mode at its base and after training: retention exactly 1 (a base pooled
    # with 7B's three modes would give about 1/3)
    r3 = cli_json("stats", "retention", both, "--model", "3B", "--n-boot", "50")["results"]
    assert {r["retention"] for r in r3} == {1.0}


def test_model_without_base_is_reported_as_such(tmp_path: Path) -> None:
    recs = model_records("3B", seed=0) + [
        r | {"trajectory_id": "x" + r["trajectory_id"], "model": "1B"}
        for r in model_records("7B", seed=1)
        if r["run"] != "base"
    ]
    path = write_jsonl(tmp_path / "nobase.jsonl", recs)
    res = cli_json("stats", "retention", str(path), "--all-models", "--n-boot", "50")["results"]
    no_base = [r for r in res if r["model"] == "1B"]
    assert len(no_base) == len(RUNS) * len(STEPS)
    for r in no_base:
        assert r["retention"] is None and r["base"] is None
        assert "model '1B' has no base checkpoint" in r["error"]
    assert all(r["retention"] == 1.0 for r in res if r["model"] == "3B")


# --------------------------------------------------------------------------- the report


def add_measurements(engine, study: str, models: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    """Per model: accuracy traces (clipcov fails at 7B only), training curves with the
    item-13 logged keys, MATH500 and AIME pass@k with per-question counts, covariance
    transitions."""
    with session_scope(engine) as s:
        sid = require_study(s, name=study).id
        for model in models:
            rng = random.Random(f"{model}")
            for run in RUNS:
                fails = (run, model) == FAILED
                trace = [
                    {"step": st, "accuracy": (0.02 if fails and st > 12 else 0.4 + 0.01 * st)}
                    for st in range(0, 21, 2)
                ]
                record_measurement(
                    s,
                    study_id=sid,
                    kind="accuracy_trace",
                    run=run,
                    model=model,
                    key="MATH500",
                    payload={"points": trace},
                )
                record_measurement(
                    s,
                    study_id=sid,
                    kind="training_curve",
                    run=run,
                    model=model,
                    payload={
                        "points": [
                            {
                                "step": st,
                                "progress": st / 20,
                                "entropy": 1.0 - 0.01 * st,
                                "frac_reward_zero_std": 0.9 if fails and st >= 12 else 0.2,
                                "objective/cov_mask_empty": 1.0 if fails and st >= 14 else 0.0,
                            }
                            for st in range(0, 21)
                        ]
                    },
                )
                for step in STEPS:
                    for bench in ("MATH500", "AIME"):
                        qs = [
                            {"question_id": f"q{q}", "n": 64, "c": rng.randrange(0, 65)}
                            for q in range(N_Q)
                        ]
                        record_measurement(
                            s,
                            study_id=sid,
                            kind="passk",
                            run=run,
                            model=model,
                            step=step,
                            key=bench,
                            payload={"n": 64, "k": [1, 8, 64], "pass_at_k": {}, "questions": qs},
                        )
                for a, b in ((0, 10), (10, 20)):
                    pred = rng.gauss(0, 0.02)
                    record_measurement(
                        s,
                        study_id=sid,
                        kind="covariance_transition",
                        run=run,
                        model=model,
                        step=b,
                        payload={
                            "from_step": a,
                            "to_step": b,
                            "transition": f"{model}/{run}:{a}->{b}",
                            "predicted": pred,
                            "observed": 0.8 * pred + rng.gauss(0, 0.004),
                        },
                    )


def make_study(engine, tmp_path: Path, path: Path, study: str, models: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    ingest_file(engine, path, study=study, artifacts_dir=tmp_path / "art", data_dir=tmp_path)
    add_measurements(engine, study, models)


def build(engine, study: str, **kw: Any) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        return report_json(build_report(s, study=study, n_boot=N_BOOT, **kw))


def _plain(df: pd.DataFrame) -> pd.DataFrame:
    """Rows renumbered, values as Python objects with every missing value ``None`` (a
    column's dtype depends on the other model's rows)."""
    df = df.reset_index(drop=True).astype(object)
    return df.where(pd.notna(df), None)


FIT_KEYS = ("n", "sign_agreement", "spearman_rho", "pearson_r", "slope", "r_squared")


def test_report_per_model_equals_single_model_reports(engine, tmp_path: Path, files) -> None:  # type: ignore[no-untyped-def]
    make_study(engine, tmp_path, files["both"], "both", tuple(MODELS))
    for m in MODELS:
        make_study(engine, tmp_path, files[m], f"only{m}", (m,))
    rep = build(engine, "both")
    single = {m: build(engine, f"only{m}") for m in MODELS}
    json.dumps(rep, allow_nan=False)

    # checkpoints: every per-checkpoint number equals the single-model report's
    assert len(rep["checkpoints"]) == sum(len(single[m]["checkpoints"]) for m in MODELS)
    for c in rep["checkpoints"]:
        ref = next(
            x
            for x in single[c["model"]]["checkpoints"]
            if (x["run"], x["step"]) == (c["run"], c["step"])
        )
        assert c == ref
    # ... and equals `rcea stats` on the two-model file with --model
    c = next(
        c for c in rep["checkpoints"] if (c["run"], c["model"], c["step"]) == ("grpo", "7B", 20)
    )
    ref = cli_json(
        "stats", "entropy", str(files["both"]), "--model", "7B", "--run", "grpo", "--step", "20",
        "--n-boot", str(N_BOOT),
    )  # fmt: skip
    for key in ("questions", "run", "model", "step"):
        ref.pop(key)
    assert c["entropy"] == ref
    assert c["retention"]["base"] == {"run": "base", "model": "7B", "step": 0}

    # failure per (run, model): clipcov fails at 7B only, and its 3B run is untouched
    fail = {(f["run"], f["model"]): f for f in rep["failure"]}
    assert [k for k, f in fail.items() if f["failed"]] == [FAILED]
    for key, f in fail.items():
        ref = next(x for x in single[key[1]]["failure"] if x["run"] == key[0])
        assert f == ref
    # reported at the latest stored checkpoint at or before the last peak (step 12) → 10
    assert fail[FAILED]["reported_step"] == 10
    w = fail[FAILED]["failure_window"]
    # collapse at step 14 → progress 0.70 ± 0.05 → steps 13, 14, 15
    assert w["n_points"] == 3 and w["collapse_step"] == 14
    assert w["nonzero_variance_share"] == pytest.approx(0.1)
    assert w["empty_mask_share"] == pytest.approx(2 / 3)
    assert fail[("clipcov", "3B")]["failure_window"] is None
    failed_ck = {(c["run"], c["model"]) for c in rep["checkpoints"] if c["failed_run"]}
    assert failed_ck == {FAILED}

    # covariance: only clipcov@7B leaves the fit; per-model groups equal the single fits
    cov = rep["covariance"]
    assert cov["excluded_runs"] == ["clipcov:7B"]
    assert cov["pooled"]["n"] == 2 * 2 * 2 - 2
    for m in MODELS:
        for key in FIT_KEYS:
            assert cov["groups"][m][key] == single[m]["covariance"]["pooled"][key]
    # ... and `rcea stats covfit` on the same transitions, excluding one (run, model)
    path = tmp_path / "transitions.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["transition", "predicted", "observed", "run", "model"])
        w.writerows(
            [t["transition"], repr(t["predicted"]), repr(t["observed"]), t["run"], t["model"]]
            for t in cov["transitions"]
        )
    ref = cli_json("stats", "covfit", str(path), "--exclude-run", "clipcov:7B")
    assert ref["pooled"] == cov["pooled"] and ref["groups"] == cov["groups"]
    out = cli_fail("stats", "covfit", str(path), "--exclude-run", "clipcov")
    assert "exists at several models" in out and "clipcov:3B, clipcov:7B" in out

    # association: per scale on MATH500 pass@64, equal to each single-model study
    assoc = rep["association"]
    assert assoc["metric"] == "MATH500 pass@64" and assoc["benchmark_source"] == "default"
    assert assoc["pooled"] is None and assoc["rho"] is None  # two scales: nothing at top
    for m in MODELS:
        ref = single[m]["association"]
        assert assoc["by_model"][m] == {
            k: ref[k] for k in ("rho", "p_value", "n", "methods", "excluded", "missing", "n_seeds")
        }
    assert assoc["by_model"]["7B"]["excluded"] == ["clipcov"]
    assert assoc["by_model"]["3B"]["excluded"] == []
    assert assoc["by_model"]["3B"]["n"] == 2
    pooled = build(engine, "both", association_pooled=True)["association"]["pooled"]
    assert pooled["label"] == "pooled over models 3B, 7B" and pooled["n"] == 3

    # the view's frames: the two-model report's rows of one model equal that model's
    typed = StudyReport.model_validate(rep)  # the view reads the validated model
    for frame in (rf.ratio_frame, rf.retention_frame, rf.mode_entropy_frame, rf.failure_frame):
        got = frame(typed)
        for m in MODELS:
            mine = _plain(got[got["model"] == m])
            ref = _plain(frame(StudyReport.model_validate(single[m])))
            assert len(mine) == len(ref) > 0, frame.__name__
            pd.testing.assert_frame_equal(mine, ref, check_dtype=False)
    training = rf.training_frame(typed)
    assert training.groupby("series").size().to_dict() == {
        f"{r} · {m}": 21 for r in RUNS for m in MODELS
    }


def test_report_labels_cross_entropy_and_counts_truncated(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    recs = [r for r in model_records("3B", seed=0) if r["run"] in ("base", "grpo")]
    for i, r in enumerate(recs):
        r["truncated"] = i % 7 == 0
        r["sampling_temperature"] = 1.0
        r["logprob_temperature"] = 1.0
        r["sampling_top_p"] = 0.9 if r["run"] == "grpo" else 1.0
    path = write_jsonl(tmp_path / "topp.jsonl", recs)
    ingest_file(engine, path, study="topp", artifacts_dir=tmp_path / "art", data_dir=tmp_path)
    rep = build(engine, "topp")
    for c in rep["checkpoints"]:
        mine = [r for r in recs if (r["run"], r["step"]) == (c["run"], c["step"])]
        assert c["entropy"]["n_truncated"] == sum(r["truncated"] for r in mine) > 0
        expected = "cross_entropy" if c["run"] == "grpo" else "entropy"
        assert c["entropy"]["quantity"] == expected
        ref = cli_json(
            "stats", "entropy", str(path), "--run", c["run"], "--step", str(c["step"]),
            "--n-boot", str(N_BOOT),
        )  # fmt: skip
        assert ref["quantity"] == expected and ref["n_truncated"] == c["entropy"]["n_truncated"]
    # a sampling temperature other than ℓ's is a cross-entropy too
    from rcea.study.report.estimates import sequence_quantity

    assert sequence_quantity(0.7, 1.0, None) == "cross_entropy"
    assert sequence_quantity(0.7, 1.0, 0.7) == "entropy"
    assert sequence_quantity(None, None, None) == "entropy"


# --------------------------------------------------------------------------- estimator gaps


def test_degenerate_bootstrap_replicates_counted_and_warned() -> None:
    """Near-zero successful entropies: a resampled success mean of 0 makes a replicate
    degenerate. The count is at the top level with a warning above 1 %."""
    from rcea.audits.entropy import entropy_report

    qids, rewards, ent = [], [], []
    for q in range(2):
        for k in range(8):  # successes: seven zeros and one tiny value
            qids.append(f"q{q}")
            rewards.append(1)
            ent.append(1e-3 if k == 0 else 0.0)
        for k in range(8):
            qids.append(f"q{q}")
            rewards.append(0)
            ent.append(1.0 + 0.1 * k)
    rep = entropy_report(qids, rewards, ent, seed=0, n_boot=2000).to_dict()
    n_bad = rep["paired"]["n_boot_nonfinite"]
    # P(a replicate keeps no tiny value in either question) = 1 - (1 - (7/8)^8)^2
    p = 1 - (1 - (7 / 8) ** 8) ** 2
    assert abs(n_bad / 2000 - p) < 0.05 and n_bad > 20
    assert rep["n_boot_degenerate"] == n_bad
    assert rep["boot_degenerate_share"] == n_bad / 2000
    assert any(f"{n_bad} of 2000 bootstrap replicates" in w for w in rep["warnings"])


def test_one_eligible_question_says_its_ci_is_zero_width(tmp_path: Path) -> None:
    recs = [
        r
        for r in model_records("7B", seed=3)
        if r["question_id"] == "q0" and r["run"] in ("base", "grpo")
    ]
    path = write_jsonl(tmp_path / "one.jsonl", recs)
    res = cli_json("stats", "retention", str(path), "--n-boot", "100")["results"]
    for r in res:
        assert r["n_eligible"] == 1 and r["ci_low"] == r["ci_high"] == r["retention"]
        assert any("only one eligible question" in w for w in r["warnings"])
    out = CliRunner().invoke(cli, ["stats", "retention", str(path), "--n-boot", "100"])
    assert "warning: only one eligible question" in out.output


def test_no_negative_zero_in_json() -> None:
    from rcea.audits._common import jsonable

    assert json.dumps(jsonable({"x": -0.0, "y": [-0.0, 1.0]})) == '{"x": 0.0, "y": [0.0, 1.0]}'


def test_trajectories_missing_from_the_partition_are_counted(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from rcea.study.pair_audit.freeze import freeze_partition_from_modes

    recs = [r for r in model_records("3B", seed=0) if r["run"] in ("base", "grpo")]
    first = write_jsonl(tmp_path / "a.jsonl", recs)
    ingest_file(engine, first, study="late", artifacts_dir=tmp_path / "art", data_dir=tmp_path)
    with session_scope(engine) as s:
        freeze_partition_from_modes(s, study="late", actor="test")
    late = [
        r | {"trajectory_id": "late-" + r["trajectory_id"]}
        for r in recs
        if r["run"] == "grpo" and r["step"] == 20 and r["reward"] == 1
    ][:5]
    second = write_jsonl(tmp_path / "b.jsonl", late)
    ingest_file(engine, second, study="late", artifacts_dir=tmp_path / "art", data_dir=tmp_path)
    rep = build(engine, "late")
    counts = {(c["run"], c["step"]): c["modes"]["n_not_in_partition"] for c in rep["checkpoints"]}
    assert counts == {("base", 0): 0, ("grpo", 10): 0, ("grpo", 20): 5}
    c = next(c for c in rep["checkpoints"] if (c["run"], c["step"]) == ("grpo", 20))
    assert c["modes"]["n_included"] == sum(
        r["reward"] == 1 for r in recs if (r["run"], r["step"]) == ("grpo", 20)
    )
