"""The demo's two policy scales end to end at miniature sizes (slow: real ``rcea train`` /
``rcea probe`` subprocesses, two warm starts and 12 training runs; the tiny-s base is the
quick demo's, copied from the session's demo cache when a demo test built it): both
scales' bases, the six objectives at each scale, probing, ingest, measurements, the
oracle judge and codebook, then the report. Every checkpoint and measurement carries its
scale's model label; retention is against the same model's base and equals ``rcea stats
retention`` on a file holding that model only; the association is per scale, nothing
pooled."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from rcea.app.demo.config import DEFAULT, QUICK, TINY_M, TINY_S
from rcea.app.demo.context import DemoContext
from rcea.app.demo.state import DemoState
from rcea.app.demo.study import (
    step_base,
    step_codebook,
    step_ingest,
    step_judge,
    step_measure,
    step_probe,
    step_train,
)
from rcea.study.report.schema import report_json

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning"),
]
pytest.importorskip("trl")

OBJECTIVES = ("grpo", "dapo", "clip_cov", "kl_cov", "gtpo", "ep_grpo")
MINI = replace(
    DEFAULT,
    name="mini",
    study="toy-mini",
    # the quick demo's warm start (its bases succeed often enough for retention), so the
    # tiny-s base is the quick demo's: built once per session (the demo cache)
    sft_steps=QUICK.sft_steps,
    train_steps=2,
    save_steps=2,
    eval_steps=1,  # the accuracy trace at steps 0, 1, 2
    probe_k=16,
    probe_questions=8,
    bench_questions=4,
    passk_n=4,
    passk_k=(1, 4),
    n_min=2,
)


def test_two_scales_run_through_the_study_steps_and_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_cache_dir: Path
) -> None:
    from sqlmodel import select

    from rcea.study.report.build import build_report
    from rcea.study.settings import Settings
    from rcea.study.store import open_store, session_scope
    from rcea.study.store.models import Measurement, Trajectory

    assert MINI.scales == (TINY_S, TINY_M)
    data = tmp_path / "data"
    monkeypatch.setenv("RCEA_DATA_DIR", str(data))  # the `rcea` subprocesses' store
    monkeypatch.setenv("RCEA_DEMO_CACHE_DIR", str(demo_cache_dir))  # the session's recipes
    cfg = Settings(data_dir=data)
    cfg.ensure_data_dir()
    lines: list[str] = []
    ctx = DemoContext(
        cfg=cfg,
        sizes=MINI,
        simulate=False,
        serve=False,
        state=DemoState(
            path=tmp_path / "work" / "state.json", size="mini", simulate=False, study="mini", seed=0
        ),
        work=tmp_path / "work",
        echo=lines.append,
    )
    for name, step in [
        ("base", step_base),
        ("train", step_train),
        ("probe", step_probe),
        ("ingest", step_ingest),
        ("measure", step_measure),
        ("judge", step_judge),
        ("codebook", step_codebook),
    ]:
        ctx.state.mark_done(name, seconds=0.0, result=step(ctx))
    text = "\n".join(lines)
    bases = ctx.state.result("base")["scales"]
    assert bases["tiny-m"]["n_parameters"] > 2.5 * bases["tiny-s"]["n_parameters"]
    assert "(12/12) tiny-m ep_grpo: 2 steps" in text

    models = ("tiny-s", "tiny-m")
    expected = {("base", m, 0) for m in models} | {(o, m, 2) for o in OBJECTIVES for m in models}
    eng = open_store(cfg)
    with session_scope(eng) as s:
        stored = {(t.run, t.model, t.step) for t in s.exec(select(Trajectory)).all()}
        meas = {(m.kind, m.model) for m in s.exec(select(Measurement)).all()}
    assert stored == expected
    for kind in ("training_curve", "passk", "greedy_accuracy"):
        assert {(kind, m) for m in models} <= meas, (kind, sorted(meas))

    with session_scope(eng) as s:
        report = report_json(
            build_report(
                s,
                study="mini",
                partition=ctx.state.result("codebook")["partition_hash"],
                n_min=2,
                n_boot=200,
            )
        )
    cks = {(c["run"], c["model"], c["step"]): c for c in report["checkpoints"]}
    assert set(cks) == expected
    with_retention = [c for c in cks.values() if c["retention"] is not None]
    for c in with_retention:  # always against the same model's own base
        assert c["retention"]["base"] == {"run": "base", "model": c["model"], "step": 0}
    assert {c["model"] for c in with_retention} == set(models), json.dumps(
        {k[1]: (c["retention_error"], c["modes"]) for k, c in cks.items()}, default=str
    )[:2000]
    # the entropy law per scale: each run's base size recorded as n_params (read from the
    # saved base's safetensors), so the scaling pairs the two sizes and says it needs three
    law = report["entropy_law"]
    assert law is not None and {(r["run"], r["model"]) for r in law["runs"]} == {
        (o, m) for o in OBJECTIVES for m in models
    }
    sizes = {r["model"]: r["n_params"] for r in law["runs"]}
    assert sizes["tiny-s"] == 314_880 - 99 * 96 and sizes["tiny-m"] == 801_280 - 99 * 128
    assert {e["run"] for e in law["scaling"]} <= set(OBJECTIVES)
    assert all("the scaling fit needs 3" in e["reason"] for e in law["scaling"])
    # steps 1 and 2 pair with a logged entropy (step 0 precedes them): two points, no fit
    assert {r["entropies"]["global"]["points"]["steps"] == [1, 2] for r in law["runs"]} == {True}
    assoc = report["association"]
    assert assoc is not None and set(assoc["by_model"]) == set(models)
    assert assoc["metric"] == "toy-eval pass@4" and assoc["pooled"] is None
    assert assoc["rho"] is None and assoc["n"] is None  # two scales: nothing at the top
    for m in models:
        rows = [r for r in assoc["rows"] if r["model"] == m]
        fit = assoc["by_model"][m]
        assert {r["step"] for r in rows} == {2} and len(rows) >= 1
        assert sorted(fit["methods"] + fit["excluded"] + fit["missing"]) == sorted(
            r["run"] for r in rows
        )
        assert fit["n"] == len(fit["methods"])

    # Each scale's retention equals the single-model computation on its own records.
    from typer.testing import CliRunner

    from rcea.app.cli import app
    from rcea.app.demo.export import export_records

    final = tmp_path / "records-final.jsonl"
    export_records(
        eng, study="mini", partition_id=report["audits"]["pair"]["partition_id"], path=final
    )
    params = report["parameters"]
    compared = 0
    for m in models:
        own = tmp_path / f"records-{m}.jsonl"
        own.write_text(
            "".join(
                line + "\n"
                for line in final.read_text().splitlines()
                if json.loads(line)["model"] == m
            )
        )
        res = CliRunner().invoke(
            app,
            [
                "stats", "retention", str(own), "--n-min", str(params["n_min"]),
                "--n-draws", str(params["n_draws"]), "--n-boot", str(params["n_boot"]),
                "--seed", str(params["seed"]), "--json",
            ],
        )  # fmt: skip
        assert res.exit_code == 0, res.output
        single = {(r["run"], r["step"]): r for r in json.loads(res.stdout)["results"]}
        for c in with_retention:
            if c["model"] != m:
                continue
            mine = single[(c["run"], c["step"])]
            for key in ("retention", "ci_low", "ci_high", "n_eligible", "n_denominator"):
                assert c["retention"][key] == pytest.approx(mine[key], rel=1e-9, abs=1e-12), (
                    m,
                    c["run"],
                    key,
                )
            compared += 1
    assert compared >= 4
