"""Item 17 in the report: a run with training seeds is keyed per seed in every section
(nothing pools seeds), and the ``replicates`` section's per-seed values and across-seed
mean and SD equal computations written here with numpy and math.comb; the streamed build
equals the bundle path (what ``rcea report verify`` recomputes); one seed says so."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rcea.study.records.ingest import ingest_file
from rcea.study.report.build import build_report
from rcea.study.report.compute import compute_report
from rcea.study.report.inputs import gather_inputs
from rcea.study.report.schema import StudyReport, report_json
from rcea.study.store import require_study, session_scope
from rcea.study.store.measurements import record_measurement
from tests.support.helpers import write_jsonl

SEEDS = (1, 2, 3)
STEPS = (0, 10)
N_Q, PER_Q, K_MIN, N_BOOT, PASS_K = 6, 16, 4, 200, 4


def _records(seeds: tuple[int, ...]) -> list[dict[str, Any]]:
    rng = random.Random(5)
    recs: list[dict[str, Any]] = []
    for s in seeds:
        for step in STEPS:
            for q in range(N_Q):
                for k in range(PER_Q):
                    r = int(rng.random() < 0.5)
                    recs.append(
                        {
                            "trajectory_id": f"s{s}-t{len(recs):05d}",
                            "question_id": f"q{q}",
                            "text": "x",
                            "reward": r,
                            "run": "grpo",
                            "model": "tiny",
                            "step": step,
                            "seed": k,  # the decoding seed: the same across training seeds
                            "train_seed": s,
                            "mean_token_entropy": rng.uniform(0.2, 1.0)
                            * (1.0 + 0.2 * s + 0.5 * (1 - r)),
                            "seq_logprob": -rng.uniform(5.0, 30.0),
                            "validity": 1 if r else None,
                            "mode": f"m{rng.randrange(3 if step == 0 else 2)}" if r else None,
                        }
                    )
    return recs


def _passk(s: int, q: int) -> dict[str, int]:
    return {"question_id": f"q{q}", "n": 8, "c": (q + s) % 9}


def _study(engine, tmp_path: Path, seeds: tuple[int, ...] = SEEDS) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    recs = _records(seeds)
    path = write_jsonl(tmp_path / "seeds.jsonl", recs)
    ingest_file(engine, path, study="sd", artifacts_dir=tmp_path / "art", data_dir=tmp_path)
    with session_scope(engine) as s:
        sid = require_study(s, name="sd").id
        for seed in seeds:
            record_measurement(
                s,
                study_id=sid,
                kind="passk",
                run="grpo",
                model="tiny",
                step=10,
                key="toy",
                train_seed=seed,
                payload={
                    "n": 8,
                    "k": [1, PASS_K],
                    "questions": [_passk(seed, q) for q in range(N_Q)],
                },
            )
    return recs


def _both(engine) -> tuple[dict[str, Any], dict[str, Any]]:  # type: ignore[no-untyped-def]
    kw: dict[str, Any] = {"n_boot": N_BOOT, "k_min": K_MIN, "n_min": 4, "association_k": PASS_K}
    with session_scope(engine) as s:
        streamed = report_json(build_report(s, study="sd", **kw))
        streamed.pop("generated_at", None)
        bundle = report_json(
            compute_report(json.loads(json.dumps(gather_inputs(s, study="sd", **kw))))
        )
    return json.loads(json.dumps(streamed)), json.loads(json.dumps(bundle))


def _rho(recs: list[dict[str, Any]]) -> list[float]:
    """Per question: mean failure entropy / mean success entropy, both K >= K_MIN."""
    out = []
    for q in sorted({r["question_id"] for r in recs}):
        s = [r["mean_token_entropy"] for r in recs if r["question_id"] == q and r["reward"] == 1]
        f = [r["mean_token_entropy"] for r in recs if r["question_id"] == q and r["reward"] == 0]
        if len(s) >= K_MIN and len(f) >= K_MIN:
            out.append(float(np.mean(f) / np.mean(s)))
    return out


def test_seeds_are_never_pooled_and_the_aggregate_is_the_seeds(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    recs = _study(engine, tmp_path)
    report, bundle = _both(engine)
    assert report == bundle  # `rcea report verify` recomputes exactly this
    StudyReport.model_validate(report)
    labels = {c["run"] for c in report["checkpoints"]}
    assert labels == {f"grpo [train seed {s}]" for s in SEEDS}
    assert [c["n"] for c in report["checkpoints"]] == [N_Q * PER_Q] * (len(SEEDS) * len(STEPS))
    rep = report["replicates"]
    assert not rep["single_seed"] and rep["sentence"] is None
    assert [r["train_seed"] for r in rep["runs"]] == list(SEEDS)
    group = next(g for g in rep["groups"] if g["step"] == 10)
    assert (group["run"], group["model"], group["train_seeds"]) == ("grpo", "tiny", list(SEEDS))
    by_name = {q["quantity"]: q for q in group["quantities"]}
    assert set(by_name) == {
        "paired_ratio",
        "retention",
        "within_mode_entropy",
        "pass_at_1",
        f"pass_at_{PASS_K}",
    }

    rho = by_name["paired_ratio"]
    expected = [
        math.exp(
            np.mean(np.log(_rho([r for r in recs if r["train_seed"] == s and r["step"] == 10])))
        )
        for s in SEEDS
    ]
    assert [v["value"] for v in rho["seeds"]] == pytest.approx(expected, rel=1e-9)
    assert rho["mean"] == pytest.approx(np.mean(expected), rel=1e-9)
    assert rho["between_seed_sd"] == pytest.approx(np.std(expected, ddof=1), rel=1e-9)
    assert rho["ci_low"] <= rho["mean"] <= rho["ci_high"]
    assert (rho["n_boot"], rho["seed"]) == (N_BOOT, report["parameters"]["seed"])
    # each seed's value is the report's own number for that seed's checkpoint
    per_ck = {(c["run"], c["step"]): c for c in report["checkpoints"]}
    for v in rho["seeds"]:
        ck = per_ck[(f"grpo [train seed {v['train_seed']}]", 10)]
        assert v["value"] == pytest.approx(ck["entropy"]["paired_ratio"], rel=1e-12)
        assert by_name["retention"]["seeds"][SEEDS.index(v["train_seed"])][
            "value"
        ] == pytest.approx(ck["retention"]["retention"], rel=1e-12)

    passk = by_name[f"pass_at_{PASS_K}"]
    want = [
        np.mean(
            [
                1 - math.comb(8 - _passk(s, q)["c"], PASS_K) / math.comb(8, PASS_K)
                for q in range(N_Q)
            ]
        )
        for s in SEEDS
    ]
    assert [v["value"] for v in passk["seeds"]] == pytest.approx(want, rel=1e-12)
    assert passk["benchmark"] == "toy"
    w = {
        (e["run"], e["step"]): e["report"]["within_mode_entropy"]
        for e in report["realization"]
        if e["report"]
    }
    assert [v["value"] for v in by_name["within_mode_entropy"]["seeds"]] == pytest.approx(
        [w[(f"grpo [train seed {s}]", 10)] for s in SEEDS], rel=1e-12
    )


def test_one_seed_says_single_seed(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _study(engine, tmp_path, seeds=(7,))
    report, bundle = _both(engine)
    assert report == bundle
    rep = report["replicates"]
    assert rep["single_seed"] and rep["sentence"].startswith("single seed")
    q = rep["groups"][-1]["quantities"][0]
    assert q["single_seed"] and (q["between_seed_sd"], q["ci_low"], q["ci_high"]) == (None,) * 3


def test_a_run_named_like_another_runs_seeded_label_is_refused(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    recs = _records((1,))
    clash = [dict(r, run="grpo [train seed 1]", train_seed=None) for r in recs[:4]]
    for i, r in enumerate(clash):
        r["trajectory_id"] = f"clash-{i}"
    path = write_jsonl(tmp_path / "c.jsonl", recs + clash)
    ingest_file(engine, path, study="sd", artifacts_dir=tmp_path / "art", data_dir=tmp_path)
    with session_scope(engine) as s, pytest.raises(ValueError, match="has the report label of"):
        build_report(s, study="sd", n_boot=N_BOOT)


def test_the_page_shows_each_seed_and_the_aggregate(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from rcea.study.report.html import render_html

    _study(engine, tmp_path)
    report, _ = _both(engine)
    report["generated_at"] = "now"
    page = render_html(report, scope="entropy-only", figures={}, hashes={})
    assert "Training seeds (item 17)" in page and "<code>grpo [train seed 2]</code>" in page
    group = next(g for g in report["replicates"]["groups"] if g["step"] == 10)
    rho = group["quantities"][0]
    assert f"seed 3: {rho['seeds'][2]['value']:.4g}" in page
    assert f"[{rho['ci_low']:.4g}, {rho['ci_high']:.4g}]" in page


def test_a_single_seed_page_says_so_in_words(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from rcea.study.report.html import render_html

    _study(engine, tmp_path, seeds=(7,))
    report, _ = _both(engine)
    report["generated_at"] = "now"
    page = render_html(report, scope="entropy-only", figures={}, hashes={})
    assert "Single seed: no (run, model, step) has two or more training seeds" in page


def test_an_entropy_only_report_keeps_only_the_unaudited_aggregates(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from rcea.study.report.publication import strip_audited

    _study(engine, tmp_path)
    report, _ = _both(engine)
    group = next(g for g in report["replicates"]["groups"] if g["step"] == 10)
    deps = {q["quantity"]: q["depends_on"] for q in group["quantities"]}
    assert deps["paired_ratio"] == deps[f"pass_at_{PASS_K}"] == []
    assert deps["retention"] == deps["within_mode_entropy"] == ["partition", "validity"]
    stripped = strip_audited(report)
    kept = next(g for g in stripped["replicates"]["groups"] if g["step"] == 10)
    assert [q["quantity"] for q in kept["quantities"]] == [
        "paired_ratio",
        "pass_at_1",
        f"pass_at_{PASS_K}",
    ]


def test_an_entropy_only_bundle_with_seeds_verifies(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from rcea.study.report.publish import publish_report
    from rcea.study.report.verify import verify_bundle

    _study(engine, tmp_path)
    with session_scope(engine) as s:
        bundle = Path(
            publish_report(
                s,
                study="sd",
                out_dir=tmp_path / "out",
                actor="r",
                entropy_only=True,
                n_boot=N_BOOT,
                k_min=K_MIN,
            )["bundle"]
        )
    res = verify_bundle(bundle)
    assert res.ok, res.mismatches
    report = json.loads((bundle / "report.json").read_text())
    group = next(g for g in report["replicates"]["groups"] if g["step"] == 10)
    assert group["train_seeds"] == list(SEEDS)
    assert all(not q["depends_on"] for q in group["quantities"])
