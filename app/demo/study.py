"""The study half of the demo: base policy, the six objectives, probing, ingest,
measurements, the oracle judge and the oracle codebook cycle. Commands with torch imports
run as ``rcea`` subprocesses (:class:`app.demo.context.RceaJob`); store-only work runs in
process."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path
from typing import Any

from app.demo.config import OBJECTIVES, ORACLE, PROBE_SPLIT
from app.demo.context import DEMO_ACTOR, DemoContext, DemoStepError, RceaJob, brief

REPO = Path(__file__).resolve().parents[2]
TRAIN_CONFIG = REPO / "pipeline" / "training" / "configs" / "toy.toml"
VALIDITY_ORACLE = "pipeline.toy:validity_by_id"
PROBLEMS_ORACLE = "pipeline.toy:problem_by_id"
JUDGE_NAME = "toy-oracle"


def step_base(ctx: DemoContext) -> dict[str, Any]:
    """The tiny base policy (``rcea train build-base``), once."""
    out = ctx.work / "base"
    report = out / "rcea_base.json"
    if not report.exists():
        ctx.say(f"warm start: {ctx.sizes.sft_steps} steps (≈ 40 ms each on 2 cores)…")
        ctx.rcea(
            "train",
            "build-base",
            "--out",
            str(out),
            "--seed",
            str(ctx.sizes.seed),
            "--sft-steps",
            str(ctx.sizes.sft_steps),
            "--threads",
            str(ctx.sizes.torch_threads),
            "--force",
            log="base",
        )
    data = json.loads(report.read_text())
    ev = data.get("evaluation", data)
    ctx.say(
        f"base policy {out}: probe accuracy {ev.get('accuracy', float('nan')):.2f}, "
        f"correct modes {ev.get('modes')}"
    )
    return {"path": str(out), "accuracy": ev.get("accuracy")}


def train_config(ctx: DemoContext) -> Path:
    """``toy.toml`` with the demo's base model, milestone spacing and thread count."""
    import tomli_w

    data = tomllib.loads(TRAIN_CONFIG.read_text(encoding="utf-8"))
    data["model"]["path"] = str(ctx.work / "base")
    data["training"]["save_steps"] = ctx.sizes.save_steps
    data["training"]["max_steps"] = ctx.sizes.train_steps
    data["training"]["torch_threads"] = ctx.sizes.torch_threads
    path = ctx.work / "train.toml"
    path.write_text(
        f"# Written by rcea demo from {TRAIN_CONFIG.name} ({ctx.sizes.name} size).\n"
        + tomli_w.dumps(data),
        encoding="utf-8",
    )
    return path


def run_dir(ctx: DemoContext, objective: str) -> Path:
    return ctx.work / "runs" / objective


def step_train(ctx: DemoContext) -> dict[str, Any]:
    """The six objectives, each ``train_steps`` steps from the base, ``train_workers`` at a
    time (one torch thread each). Resumable per objective: a finished run has ``final/``
    and ``run.json``; an interrupted one is restarted from scratch (same seed)."""
    config = train_config(ctx)
    n = len(OBJECTIVES)
    jobs: list[RceaJob] = []
    for i, objective in enumerate(OBJECTIVES, 1):
        rd = run_dir(ctx, objective)
        if (rd / "run.json").exists() and (rd / "final" / "config.json").exists():
            ctx.say(f"({i}/{n}) {objective}: trained earlier")
            continue
        if rd.exists():
            shutil.rmtree(rd)
        args = ["train", "run", "--config", str(config), "--objective", objective]
        jobs.append(RceaJob(ctx, [*args, "--out", str(rd)], f"train-{objective}"))

    def done(job: RceaJob, res: Any) -> None:
        objective = job.args[job.args.index("--objective") + 1]
        last = res.get("last", {})
        ctx.say(
            f"({OBJECTIVES.index(objective) + 1}/{n}) {objective}: {res.get('steps')} steps "
            f"in {job.seconds:.0f} s, last training entropy {last.get('entropy', 0):.3f}"
        )

    if jobs:
        ctx.say(f"training {len(jobs)} objective(s), {ctx.sizes.train_workers} at a time…")
        ctx.rcea_many(jobs, workers=ctx.sizes.train_workers, on_done=done)
    return {"runs": {o: str(run_dir(ctx, o)) for o in OBJECTIVES}}


# --------------------------------------------------------------------------- probing


def probe_config(ctx: DemoContext) -> Path:
    """The probe config: the 43 probe questions × ``probe_k`` samples at the base and
    every milestone of the six runs; pass@k and greedy accuracy on the eval split."""
    import tomli_w

    s = ctx.sizes
    milestones = [0.0] + [m / s.train_steps for m in s.milestones]
    data = {
        "probe": {"seed": 2027, "k": s.probe_k, "torch_threads": s.torch_threads},
        "questions": {"source": "toy", "split": PROBE_SPLIT}
        | ({"n": s.probe_questions} if s.probe_questions else {}),
        "checkpoints": {
            "run_dirs": [str(run_dir(ctx, o)) for o in OBJECTIVES],
            "milestones": milestones,
            "model": "tiny",
            # Every run starts from the same warm-started base: probe it once, as run
            # "base", and start every run's covariance chain from it.
            "base_run": "base",
        },
        "covariance": {"questions": 10, "trajectories": 2, "positions": 16, "seed": 0},
        "bench": {
            "sets": [
                {"name": "toy-eval", "source": "toy", "split": "eval", "n": s.bench_questions}
            ],
            "passk": {"n": s.passk_n, "k": list(s.passk_k)},
        },
    }
    path = ctx.work / "probe.toml"
    path.write_text(
        f"# Written by rcea demo ({s.name} size).\n" + tomli_w.dumps(data), encoding="utf-8"
    )
    return path


def probe_dir(ctx: DemoContext) -> Path:
    return ctx.work / "probe"


def step_probe(ctx: DemoContext) -> dict[str, Any]:
    """``rcea probe sample`` then ``rcea probe entropy``: the records of every checkpoint."""
    config = probe_config(ctx)
    n_ckpt = 1 + len(OBJECTIVES) * len(ctx.sizes.milestones)  # one shared base + milestones
    n_q = ctx.sizes.probe_questions or 43
    ctx.say(f"sampling {n_ckpt} checkpoints × {n_q} probe questions × {ctx.sizes.probe_k}…")
    common = ("--config", str(config), "--out", str(probe_dir(ctx)))
    sampled = ctx.rcea("probe", "sample", *common, "--study", ctx.study, log="probe")
    ctx.say(f"sampled in {ctx.last_seconds:.0f} s: {brief(sampled)}")
    ent = ctx.rcea("probe", "entropy", *common, log="probe")
    ctx.say(f"token entropies in {ctx.last_seconds:.0f} s: {brief(ent)}")
    records = probe_dir(ctx) / "records.jsonl"
    if not records.exists():
        raise DemoStepError(f"rcea probe entropy wrote no {records}")
    return {"records": str(records), "n_checkpoints": n_ckpt}


def step_ingest(ctx: DemoContext) -> dict[str, Any]:
    """Ingest the probe records into the demo study (a byte-identical file is a no-op)."""
    from app.ingest import ingest_file

    path = Path(ctx.state.result("probe")["records"])
    res = ingest_file(
        ctx.engine(),
        path,
        study=ctx.study,
        artifacts_dir=ctx.cfg.artifacts_dir,
        data_dir=ctx.cfg.data_dir,
        progress=False,
    )
    ctx.say(res.summary())
    return {"records": str(path)}


def step_measure(ctx: DemoContext) -> dict[str, Any]:
    """Training curves, greedy accuracy + pass@k and the covariance fit as measurements."""
    config = str(ctx.work / "probe.toml")
    common = ("--config", config, "--out", str(probe_dir(ctx)))
    runs = [str(run_dir(ctx, o)) for o in OBJECTIVES]
    out: dict[str, Any] = {}
    curves = ctx.rcea("probe", "curves", "--study", ctx.study, *runs, log="measure")
    ctx.say(f"training curves in {ctx.last_seconds:.0f} s: {brief(curves)}")
    bench = ctx.rcea("probe", "bench", *common, "--study", ctx.study, log="measure")
    ctx.say(f"greedy accuracy + pass@k in {ctx.last_seconds:.0f} s: {brief(bench)}")
    cov = ctx.rcea("probe", "covariance", *common, "--study", ctx.study, log="measure")
    ctx.say(f"covariance fit in {ctx.last_seconds:.0f} s: {brief(cov)}")
    out["ok"] = True
    return out


# --------------------------------------------------------------------------- judge


def step_judge(ctx: DemoContext) -> dict[str, Any]:
    """Problem texts, the frozen oracle judge and its verdicts on every verifier success."""
    ctx.rcea("judge", "problems", "--study", ctx.study, PROBLEMS_ORACLE, log="judge")
    frozen = ctx.rcea(
        "judge",
        "freeze",
        "--name",
        JUDGE_NAME,
        "--backend",
        "oracle",
        "--oracle",
        VALIDITY_ORACLE,
        "--reason",
        "rcea demo: the toy domain's process-validity oracle",
        log="judge",
    )
    res = ctx.rcea(
        "judge",
        "run",
        "--study",
        ctx.study,
        "--judge",
        JUDGE_NAME,
        "--backend",
        "oracle",
        "--oracle",
        VALIDITY_ORACLE,
        log="judge",
    )
    ctx.say(f"judge {JUDGE_NAME}: {brief(res)}")
    return {"judge": JUDGE_NAME, "frozen": brief(frozen)}


# --------------------------------------------------------------------------- codebook


def step_codebook(ctx: DemoContext) -> dict[str, Any]:
    """The codebook cycle with the toy oracle standing in for the LLM: induce → merge →
    freeze → assign ×2 → reconcile → extension review → export. The demo plays the
    researcher: it approves every extension the oracle proposes, marks what is left in the
    researcher queue uncertain, and exports with trajectories of questions without a
    codebook counted as uncertain (recorded as events, actor ``rcea-demo``)."""
    from app.codebook import (
        BackendOptions,
        assign,
        decide_extension,
        export_partition,
        freeze_codebooks,
        induce,
        make_backend,
        merge,
        reconcile,
        request_extensions,
        researcher_queue,
        resolve_dispute,
    )
    from app.store import session_scope

    eng = ctx.engine()
    backend = make_backend(ctx.cfg, BackendOptions(kind="oracle", oracle=ORACLE))
    kw = {"study": ctx.study, "backend": backend, "actor": DEMO_ACTOR}
    induce(eng, seed=2027, batch_size=12, sample_per_question=24, **kw)
    merge(eng, **kw)
    with session_scope(eng) as s:
        freeze_codebooks(s, study=ctx.study, actor=DEMO_ACTOR)
    rep = assign(eng, seed=2029, **kw)
    ctx.say(f"assigned: {rep.n_run} batch(es) run, {rep.n_skipped} done earlier")
    reconcile(eng, seed=2029, **kw)
    approved = 0
    for _round in range(3):
        with session_scope(eng) as s:
            pending = [e.id for e in request_extensions(s, study=ctx.study, actor=DEMO_ACTOR)]
            questions = []
            for ext_id in pending:
                ext, _v = decide_extension(
                    s,
                    study=ctx.study,
                    extension_id=ext_id,
                    approve=True,
                    actor=DEMO_ACTOR,
                    reason="rcea demo: oracle-proposed mode approved automatically",
                )
                questions.append(ext.question_id)
        if not pending:
            break
        approved += len(pending)
        assign(eng, seed=2029, questions=questions, **kw)
        reconcile(eng, seed=2029, questions=questions, **kw)
    with session_scope(eng) as s:
        queue = [d.id for d in researcher_queue(s, study=ctx.study)]
        for d in queue:
            resolve_dispute(s, study=ctx.study, dispute_id=d, actor=DEMO_ACTOR, uncertain=True)
    with session_scope(eng) as s:
        # A question whose few accepted trajectories all follow no known strategy gets no
        # codebook (the oracle induces no mode from them); as the researcher, the demo
        # counts such trajectories as uncertain (they cost coverage, which the gate sees).
        res = export_partition(
            s,
            study=ctx.study,
            actor=DEMO_ACTOR,
            artifacts_dir=ctx.cfg.artifacts_dir,
            allow_incomplete=True,
        )
    ctx.say(
        f"partition {res['partition_hash'][:12]}…: {res['n_modes']} modes, "
        f"{res['n_included']} included, {res['n_uncertain']} uncertain "
        f"({approved} extension(s) approved, {len(queue)} queue item(s) left uncertain)"
    )
    return {
        "partition_hash": res["partition_hash"],
        "n_included": res["n_included"],
        "n_uncertain": res["n_uncertain"],
        "extensions_approved": approved,
    }
