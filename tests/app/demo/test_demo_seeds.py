"""``rcea demo --train-seeds N`` (an option; not in the default or quick demo): the first
scale's grpo run at training seeds 0..N-1, each trained by ``rcea train run --train-seeds
K`` into ``runs/grpo/train-seed-K``, probed from the run dirs (the probe reads each seed
from run.json) and put in the study, so the report's replicates section has a real
across-seed aggregate. The pieces here are cheap (no training); the slow test runs the
study steps at miniature sizes and checks the store's keys and the report."""

from __future__ import annotations

import json
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rcea.app.demo.config import DEFAULT, OBJECTIVES, QUICK, TINY_S, DemoSizes, with_train_seeds
from rcea.app.demo.context import DemoContext
from rcea.app.demo.state import DemoState
from rcea.app.demo.study import (
    n_checkpoints,
    probe_config,
    probe_recipe,
    run_dir,
    scale_runs,
    step_train,
    train_config,
    train_recipe,
)


def _ctx(tmp_path: Path, sizes: DemoSizes, lines: list[str] | None = None) -> DemoContext:
    from rcea.study.settings import Settings

    cfg = Settings(data_dir=tmp_path / "data")
    return DemoContext(
        cfg=cfg,
        sizes=sizes,
        simulate=False,
        serve=False,
        state=DemoState(
            path=tmp_path / "work" / "state.json",
            size=sizes.name,
            simulate=False,
            study=sizes.study,
            seed=0,
        ),  # fmt: skip
        work=tmp_path / "work",
        echo=(lines if lines is not None else []).append,
    )


def test_the_option_is_a_size_of_its_own_and_off_by_default() -> None:
    assert DEFAULT.train_seeds == QUICK.train_seeds == 1
    assert DEFAULT.replicated is None and QUICK.replicated is None
    assert with_train_seeds(QUICK, 1) is QUICK
    two = with_train_seeds(QUICK, 2)
    assert (two.train_seeds, two.study, two.name) == (2, "toy-quick-seeds2", "quick")
    assert two.study_name(simulate=True) == "toy-quick-seeds2-sim"
    assert with_train_seeds(DEFAULT, 3).study == "toy-seeds3"
    assert two.replicated == (TINY_S, "grpo")
    assert two.training_seeds(TINY_S, "grpo") == [0, 1]
    assert two.training_seeds(TINY_S, "dapo") == [None]
    # a one-seed demo's recorded sizes are what they were before the option (its state
    # still resumes); N seeds are on record
    assert "train_seeds" not in QUICK.to_dict()
    assert two.to_dict()["train_seeds"] == 2
    with pytest.raises(ValueError, match="train_seeds must be >= 1"):
        replace(QUICK, train_seeds=0)


def test_runs_dirs_and_recipes(tmp_path: Path) -> None:
    one = _ctx(tmp_path / "a", QUICK)
    train_config(one, TINY_S)  # the recipes read the config step_train writes
    assert scale_runs(one, TINY_S) == [(o, None) for o in OBJECTIVES]
    # the one-seed demo's recipes (and so its cache keys) are unchanged
    assert "train_seed" not in train_recipe(one, TINY_S, "grpo")
    probe_config(one, TINY_S)
    assert list(probe_recipe(one, TINY_S)["runs"]) == list(OBJECTIVES)
    assert n_checkpoints(one, TINY_S) == 1 + 6 * len(QUICK.milestones)

    ctx = _ctx(tmp_path / "b", with_train_seeds(QUICK, 2))
    train_config(ctx, TINY_S)
    assert scale_runs(ctx, TINY_S) == [("grpo", 0), ("grpo", 1)] + [
        (o, None) for o in OBJECTIVES[1:]
    ]
    grpo = run_dir(ctx, TINY_S, "grpo")
    assert run_dir(ctx, TINY_S, "grpo", 1) == grpo / "train-seed-1"
    assert train_recipe(ctx, TINY_S, "grpo", 1)["train_seed"] == 1
    cfg = tomllib.loads(probe_config(ctx, TINY_S).read_text())["checkpoints"]
    assert cfg["run_dirs"][:3] == [
        str(grpo / "train-seed-0"), str(grpo / "train-seed-1"), str(run_dir(ctx, TINY_S, "dapo"))
    ]  # fmt: skip
    assert "train_seed" not in cfg  # the probe reads each seed from its run.json
    assert cfg["base_run"] == "base"
    assert list(probe_recipe(ctx, TINY_S)["runs"])[:3] == [
        "grpo/train-seed-0", "grpo/train-seed-1", "dapo"
    ]  # fmt: skip
    assert n_checkpoints(ctx, TINY_S) == 1 + 7 * len(QUICK.milestones)


def test_step_train_passes_each_seed_to_rcea_train_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines: list[str] = []
    ctx = _ctx(tmp_path, with_train_seeds(QUICK, 2), lines)
    # a finished seed is not retrained
    done = run_dir(ctx, TINY_S, "grpo", 0)
    (done / "final").mkdir(parents=True)
    (done / "final" / "config.json").write_text("{}")
    (done / "run.json").write_text(json.dumps({"train_seed": 0}))
    started: list[list[str]] = []
    logs: list[Path] = []

    def fake_many(jobs: list[Any], *, workers: int, on_done: Any = None) -> list[Any]:
        results = []
        for job in jobs:
            started.append(job.args)
            logs.append(job.log)
            res: dict[str, Any] = {"steps": QUICK.train_steps, "last": {"entropy": 0.5}}
            if "--train-seeds" in job.args:  # what `train run --train-seeds --json` answers
                res = {"ok": True, "train_seeds": [1], "runs": [res]}
            job.seconds = 1.0
            if on_done is not None:
                on_done(job, res)
            results.append(res)
        return results

    monkeypatch.setattr(ctx, "rcea_many", fake_many)
    out = step_train(ctx)
    grpo = run_dir(ctx, TINY_S, "grpo")
    seeded = [a for a in started if "--train-seeds" in a]
    assert len(seeded) == 1 and len(started) == 1 + 5
    args = seeded[0]
    assert args[args.index("--train-seeds") + 1] == "1"
    assert args[args.index("--out") + 1] == str(grpo)  # the command adds train-seed-1/
    assert args[args.index("--objective") + 1] == "grpo"
    dapo = next(a for a in started if "dapo" in a)
    assert dapo[dapo.index("--out") + 1] == str(run_dir(ctx, TINY_S, "dapo"))
    text = "\n".join(lines)
    assert "(1/7) tiny-s grpo/train-seed-0: trained earlier" in text
    assert "(2/7) tiny-s grpo/train-seed-1: 16 steps" in text
    assert "2 training seeds of one" in text
    assert out["runs"]["tiny-s"]["grpo/train-seed-1"] == str(grpo / "train-seed-1")
    # one log file per run, in the logs folder (no sub-folder)
    assert ctx.work / "logs" / "train-tiny-s-grpo-train-seed-1.log" in logs


def test_bad_train_seeds_option_is_refused() -> None:
    from rcea.app.cli import app

    res = CliRunner().invoke(app, ["demo", "--train-seeds", "0", "--no-serve"])
    assert res.exit_code == 1
    assert "--train-seeds must be >= 1" in res.output


MINI_SEEDS = replace(
    QUICK,
    name="mini-seeds",
    study="toy-mini-seeds",
    train_steps=2,
    save_steps=2,
    eval_steps=1,
    probe_k=16,
    probe_questions=8,
    bench_questions=4,
    passk_n=4,
    passk_k=(1, 4),
    n_min=2,
    train_seeds=2,
)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
def test_two_seeds_run_through_the_study_steps_into_the_replicates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_cache_dir: Path
) -> None:
    pytest.importorskip("trl")
    from sqlmodel import select

    from rcea.app.demo.study import (
        step_base,
        step_codebook,
        step_ingest,
        step_judge,
        step_measure,
        step_probe,
    )
    from rcea.study.report.build import build_report
    from rcea.study.report.schema import report_json
    from rcea.study.store import open_store, session_scope
    from rcea.study.store.models import Measurement, Trajectory

    data = tmp_path / "data"
    monkeypatch.setenv("RCEA_DATA_DIR", str(data))  # the `rcea` subprocesses' store
    monkeypatch.setenv("RCEA_DEMO_CACHE_DIR", str(demo_cache_dir))  # the quick base
    ctx = _ctx(tmp_path, MINI_SEEDS)
    ctx.cfg.ensure_data_dir()
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
    for seed in (0, 1):
        meta = json.loads((run_dir(ctx, TINY_S, "grpo", seed) / "run.json").read_text())
        assert meta["train_seed"] == seed and meta["config"]["training"]["seed"] == seed

    eng = open_store(ctx.cfg)
    with session_scope(eng) as s:
        stored = {(t.run, t.train_seed, t.step) for t in s.exec(select(Trajectory)).all()}
        meas = {(m.kind, m.run, m.train_seed) for m in s.exec(select(Measurement)).all()}
    assert stored == {("base", None, 0), ("grpo", 0, 2), ("grpo", 1, 2)} | {
        (o, None, 2) for o in OBJECTIVES[1:]
    }
    for kind in ("training_curve", "passk", "greedy_accuracy", "covariance_transition"):
        assert {(kind, "grpo", 0), (kind, "grpo", 1)} <= meas, kind
        assert (kind, "dapo", -1) in meas, kind

    with session_scope(eng) as s:
        report = report_json(
            build_report(
                s,
                study=MINI_SEEDS.study,
                partition=ctx.state.result("codebook")["partition_hash"],
                n_min=2,
                n_boot=200,
            )
        )
    rep = report["replicates"]
    assert rep is not None and rep["single_seed"] is False
    assert {(r["label"], r["train_seed"]) for r in rep["runs"]} == {
        ("grpo [train seed 0]", 0),
        ("grpo [train seed 1]", 1),
    }
    (group,) = [g for g in rep["groups"] if g["step"] == 2]
    assert (group["run"], group["model"], group["train_seeds"]) == ("grpo", "tiny-s", [0, 1])
    names = {q["quantity"] for q in group["quantities"]}
    assert "pass_at_1" in names, names
    pk = next(q for q in group["quantities"] if q["quantity"] == "pass_at_1")
    assert len([s for s in pk["seeds"] if s["value"] is not None]) == 2
    assert pk["mean"] is not None and pk["between_seed_sd"] is not None and pk["n_seeds"] == 2
