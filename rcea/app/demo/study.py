"""The study half of the demo: the base policy of every scale, the six objectives at every
scale, probing, ingest, measurements, the oracle judge and the oracle codebook cycle.
Everything of a scale lives under ``<work>/<model label>/`` and carries its model label.
Commands with torch imports run as ``rcea`` subprocesses (:class:`rcea.app.demo.context.RceaJob`);
store-only work runs in process."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from rcea.app.demo import cache
from rcea.app.demo.config import OBJECTIVES, ORACLE, PROBE_SPLIT, DemoSizes, PolicyScale
from rcea.app.demo.context import DEMO_ACTOR, DemoContext, DemoStepError, RceaJob, brief
from rcea.pipeline.policy.base import METADATA_FILE as BASE_REPORT
from rcea.pipeline.run_meta import seed_run_dir
from rcea.study import probe_set
from rcea.study.codebook import (
    BackendOptions,
    assign,
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
from rcea.study.codebook.approval import approve_extensions
from rcea.study.records.ingest import ingest_file
from rcea.study.store import session_scope

REPO = Path(__file__).resolve().parents[2]
TRAIN_CONFIG = REPO / "pipeline" / "training" / "configs" / "toy.toml"
VALIDITY_ORACLE = "rcea.pipeline.toy:validity_by_id"
PROBLEMS_ORACLE = "rcea.pipeline.toy:problem_by_id"
JUDGE_NAME = "toy-oracle"
PROBE_SEED = 2027  # the probe-set seed, the same at every scale


def scale_dir(ctx: DemoContext, scale: PolicyScale) -> Path:
    """``<work>/<model label>/``: everything of one policy scale (base, runs, configs,
    probe output)."""
    return ctx.work / scale.label


def base_dir(ctx: DemoContext, scale: PolicyScale) -> Path:
    return scale_dir(ctx, scale) / "base"


def base_recipe(sizes: DemoSizes, scale: PolicyScale) -> dict[str, Any]:
    """The ``rcea train build-base`` options (but ``--out``) of a scale's base: its recipe
    (:mod:`rcea.app.demo.cache`)."""
    return {
        "build_base": [
            "--seed",
            str(sizes.seed),
            "--sft-steps",
            str(sizes.sft_steps),
            "--threads",
            str(sizes.torch_threads),
            *scale.build_args(),
        ]
    }


def base_key(ctx: DemoContext, scale: PolicyScale) -> str:
    return cache.recipe_key("base", base_recipe(ctx.sizes, scale))


def step_base(ctx: DemoContext) -> dict[str, Any]:
    """The tiny base policy of every scale (``rcea train build-base`` with the scale's
    shape), ``train_workers`` at a time; a scale whose base exists is not rebuilt, and one
    whose recipe is in the opt-in demo cache (:mod:`rcea.app.demo.cache`) is copied from it."""
    todo = [sc for sc in ctx.sizes.scales if not (base_dir(ctx, sc) / BASE_REPORT).exists()]
    recipes = [base_recipe(ctx.sizes, sc) for sc in todo]
    with cache.entries([("base", r) for r in recipes]) as found:
        jobs: list[RceaJob] = []
        built: list[tuple[PolicyScale, dict[str, Any], cache.Entry | None]] = []
        for scale, recipe, entry in zip(todo, recipes, found, strict=True):
            out = base_dir(ctx, scale)
            if entry is not None and entry.fetch(out, ctx.work):
                ctx.say(f"{scale.label} base policy: copied from the demo cache ({entry.path})")
                continue
            args = ["train", "build-base", "--out", str(out), *recipe["build_base"], "--force"]
            jobs.append(RceaJob(ctx, args, f"base-{scale.label}"))
            built.append((scale, recipe, entry))
        if jobs:
            ctx.say(
                f"warm start of {len(jobs)} scale(s): {ctx.sizes.sft_steps} steps each "
                f"(≈ 40 ms per step for tiny-s on 2 cores), {ctx.sizes.train_workers} at a time…"
            )
            ctx.rcea_many(jobs, workers=ctx.sizes.train_workers)
        for scale, recipe, entry in built:
            if entry is not None:
                entry.store(base_dir(ctx, scale), ctx.work, recipe)
    out: dict[str, Any] = {}  # type: ignore[no-redef]  # out is rebound to the per-scale summary
    for scale in ctx.sizes.scales:
        path = base_dir(ctx, scale)
        data = json.loads((path / BASE_REPORT).read_text())
        ev = data.get("evaluation", data)
        ctx.say(
            f"{scale.label} base policy {path} ({data.get('n_parameters', 0):,} parameters): "
            f"probe accuracy {ev.get('accuracy', float('nan')):.2f}, "
            f"correct modes {ev.get('modes')}"
        )
        out[scale.label] = {  # type: ignore[index]  # out is rebound to the per-scale summary
            "path": str(path),
            "accuracy": ev.get("accuracy"),
            "n_parameters": data.get("n_parameters"),
        }
    return {"scales": out}


def train_config(ctx: DemoContext, scale: PolicyScale) -> Path:
    """``toy.toml`` with the scale's base model, the checkpoint spacing (``eval_steps``:
    every saved checkpoint is a point of the run's accuracy trace, the milestones a subset),
    the steps and thread count."""

    data = tomllib.loads(TRAIN_CONFIG.read_text(encoding="utf-8"))
    data["model"]["path"] = str(base_dir(ctx, scale))
    data["training"]["save_steps"] = ctx.sizes.eval_steps
    data["training"]["max_steps"] = ctx.sizes.train_steps
    data["training"]["torch_threads"] = ctx.sizes.torch_threads
    path = scale_dir(ctx, scale) / "train.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"# Written by rcea demo from {TRAIN_CONFIG.name} ({ctx.sizes.name} size, "
        f"scale {scale.label}).\n" + tomli_w.dumps(data),
        encoding="utf-8",
    )
    return path


def run_dir(
    ctx: DemoContext, scale: PolicyScale, objective: str, train_seed: int | None = None
) -> Path:
    """A run's output dir; a training seed's is ``runs/<objective>/train-seed-N``, where
    ``rcea train run --out runs/<objective> --train-seeds N`` writes it."""
    out = scale_dir(ctx, scale) / "runs" / objective
    return out if train_seed is None else seed_run_dir(out, train_seed)


def scale_runs(ctx: DemoContext, scale: PolicyScale) -> list[tuple[str, int | None]]:
    """(objective, training seed) of every run of ``scale``, in training order."""
    return [(o, t) for o in OBJECTIVES for t in ctx.sizes.training_seeds(scale, o)]


def run_name(objective: str, train_seed: int | None) -> str:
    """A run as the demo's lines and recipes name it."""
    return objective if train_seed is None else f"{objective}/train-seed-{train_seed}"


def _recipe_text(ctx: DemoContext, path: Path) -> Any:
    """A config file the demo wrote, as a recipe: parsed (comments go), the work dir
    written as ``<work>``."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return json.loads(cache.relative_to_work(json.dumps(data, sort_keys=True), ctx.work))


def train_recipe(
    ctx: DemoContext, scale: PolicyScale, objective: str, train_seed: int | None = None
) -> dict[str, Any]:
    """One (scale, objective[, training seed]) run's recipe: its base's key, the objective,
    the config (and the training seed, when it has one)."""
    return {
        "base": base_key(ctx, scale),
        "objective": objective,
        "config": _recipe_text(ctx, scale_dir(ctx, scale) / "train.toml"),
        **({} if train_seed is None else {"train_seed": train_seed}),
    }


def step_train(ctx: DemoContext) -> dict[str, Any]:
    """The six objectives at every scale, each ``train_steps`` steps from that scale's
    base, ``train_workers`` at a time (one torch thread each); with ``train_seeds`` > 1
    the replicated run at each of its training seeds (``rcea train run --train-seeds``).
    Resumable per run: a finished run has ``final/`` and ``run.json``; an interrupted one
    is restarted from scratch (same seed); one whose recipe is in the opt-in demo cache
    (:mod:`rcea.app.demo.cache`) is copied from it."""
    scales = ctx.sizes.scales
    n = sum(len(scale_runs(ctx, scale)) for scale in scales)
    todo: list[tuple[int, PolicyScale, str, int | None, Path]] = []
    i = 0
    for scale in scales:
        config = train_config(ctx, scale)
        for objective, seed in scale_runs(ctx, scale):
            i += 1
            rd = run_dir(ctx, scale, objective, seed)
            if (rd / "run.json").exists() and (rd / "final" / "config.json").exists():
                ctx.say(f"({i}/{n}) {scale.label} {run_name(objective, seed)}: trained earlier")
                continue
            todo.append((i, scale, objective, seed, config))
    recipes = [train_recipe(ctx, scale, o, t) for _i, scale, o, t, _c in todo]
    with cache.entries([("run", r) for r in recipes]) as found:
        jobs: list[RceaJob] = []
        names: dict[int, str] = {}
        built: list[tuple[Path, dict[str, Any], cache.Entry]] = []
        for (i, scale, objective, seed, config), recipe, entry in zip(
            todo, recipes, found, strict=True
        ):
            rd = run_dir(ctx, scale, objective, seed)
            name = f"{scale.label} {run_name(objective, seed)}"
            if entry is not None and entry.fetch(rd, ctx.work):
                ctx.say(f"({i}/{n}) {name}: copied from the demo cache")
                continue
            if rd.exists():
                shutil.rmtree(rd)
            args = ["train", "run", "--config", str(config), "--objective", objective]
            if seed is None:
                args += ["--out", str(rd)]
            else:  # the seed's run goes to <objective>/train-seed-N, its seed in run.json
                args += ["--out", str(run_dir(ctx, scale, objective)), "--train-seeds", str(seed)]
            log = f"train-{scale.label}-{run_name(objective, seed).replace('/', '-')}"
            job = RceaJob(ctx, args, log)
            names[id(job)] = f"({i}/{n}) {name}"
            jobs.append(job)
            if entry is not None:
                built.append((rd, recipe, entry))

        def done(job: RceaJob, res: Any) -> None:
            if "runs" in res:  # --train-seeds answers with one entry per seed (here one)
                res = res["runs"][0]
            last = res.get("last", {})
            ctx.say(
                f"{names[id(job)]}: {res.get('steps')} steps in {job.seconds:.0f} s, "
                f"last training entropy {last.get('entropy', 0):.3f}"
            )

        if jobs:
            seeds = (
                f", {ctx.sizes.train_seeds} training seeds of one" if ctx.sizes.replicated else ""
            )
            ctx.say(
                f"training {len(jobs)} run(s) ({len(scales)} scale(s) × {len(OBJECTIVES)} "
                f"objectives{seeds}), {ctx.sizes.train_workers} at a time…"
            )
            ctx.rcea_many(jobs, workers=ctx.sizes.train_workers, on_done=done)
        for rd, recipe, entry in built:
            entry.store(rd, ctx.work, recipe)
    return {
        "runs": {
            sc.label: {run_name(o, t): str(run_dir(ctx, sc, o, t)) for o, t in scale_runs(ctx, sc)}
            for sc in scales
        }
    }


# --------------------------------------------------------------------------- probing


def probe_config(ctx: DemoContext, scale: PolicyScale) -> Path:
    """The probe config of one scale: the 43 probe questions × ``probe_k`` samples at the
    scale's base and every milestone of its six runs (each training seed of the replicated
    one: its run.json carries the seed, which the probe reads), every checkpoint labelled
    with the scale's model label; pass@k and greedy accuracy on the eval split. The
    probe-set seed and questions are the same at every scale."""

    s = ctx.sizes
    milestones = [0.0] + [m / s.train_steps for m in s.milestones]
    data = {
        "probe": {"seed": PROBE_SEED, "k": s.probe_k, "torch_threads": s.torch_threads},
        "questions": {"source": "toy", "split": PROBE_SPLIT}
        | ({"n": s.probe_questions} if s.probe_questions else {}),
        "checkpoints": {
            "run_dirs": [str(run_dir(ctx, scale, o, t)) for o, t in scale_runs(ctx, scale)],
            "milestones": milestones,
            "model": scale.label,
            # Every run of a scale starts from that scale's warm-started base: probe it
            # once, as run "base" (checkpoint (base, <label>, 0)), and start every run's
            # covariance chain from it. Retention compares with it (same model).
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
    path = scale_dir(ctx, scale) / "probe.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"# Written by rcea demo ({s.name} size, scale {scale.label}).\n" + tomli_w.dumps(data),
        encoding="utf-8",
    )
    return path


def probe_dir(ctx: DemoContext, scale: PolicyScale) -> Path:
    return scale_dir(ctx, scale) / "probe"


def n_checkpoints(ctx: DemoContext, scale: PolicyScale) -> int:
    """Checkpoints probed at ``scale``: its shared base + every run's milestones."""
    return 1 + len(scale_runs(ctx, scale)) * len(ctx.sizes.milestones)


def bind_probe_set(ctx: DemoContext) -> None:
    """Record the study's probe set (event ``probe.probe_set``) once, before the scales
    are sampled in parallel: every ``rcea probe sample --study`` then finds it and only
    checks its seed, instead of two processes racing to record it."""
    with session_scope(ctx.engine()) as s:
        probe_set.bind_probe_set(
            s,
            study=ctx.study,
            probe_seed=PROBE_SEED,
            question_source=f"toy:{PROBE_SPLIT}",
            actor=DEMO_ACTOR,
        )


def _per_scale(ctx: DemoContext, stage: str, log: str, *, study: bool) -> dict[str, Any]:
    """``rcea probe STAGE`` for every scale, ``train_workers`` at a time (one torch thread
    each); returns model label → the command's JSON answer (and prints one line each)."""
    jobs = []
    for scale in ctx.sizes.scales:
        args = [
            "probe",
            stage,
            "--config",
            str(probe_config(ctx, scale)),
            "--out",
            str(probe_dir(ctx, scale)),
            *(["--study", ctx.study] if study else []),
        ]
        jobs.append(RceaJob(ctx, args, log))
    results = ctx.rcea_many(jobs, workers=ctx.sizes.train_workers)
    out = {}
    for scale, job, res in zip(ctx.sizes.scales, jobs, results, strict=True):
        ctx.say(f"{scale.label} probe {stage} in {job.seconds:.0f} s: {brief(res)}")
        out[scale.label] = res
    return out


def probe_recipe(ctx: DemoContext, scale: PolicyScale) -> dict[str, Any]:
    """A scale's probe output's recipe: the probe config and the keys of what it probes."""
    return {
        "config": _recipe_text(ctx, probe_config(ctx, scale)),
        "base": base_key(ctx, scale),
        "runs": {
            run_name(o, t): cache.recipe_key("run", train_recipe(ctx, scale, o, t))
            for o, t in scale_runs(ctx, scale)
        },
    }


def step_probe(ctx: DemoContext) -> dict[str, Any]:
    """``rcea probe sample`` then ``rcea probe entropy`` at every scale: the records of
    every checkpoint, one ``records.jsonl`` per scale. With the opt-in demo cache
    (:mod:`rcea.app.demo.cache`) a new probe directory starts as the cached output of the same
    recipe: both commands still run (binding the study), finding every unit done."""
    n_ckpt = sum(n_checkpoints(ctx, scale) for scale in ctx.sizes.scales)
    n_q = ctx.sizes.probe_questions or 43
    ctx.say(
        f"sampling {len(ctx.sizes.scales)} scale(s), {n_ckpt} checkpoints × {n_q} probe "
        f"questions × {ctx.sizes.probe_k}…"
    )
    bind_probe_set(ctx)
    scales = ctx.sizes.scales
    recipes = [probe_recipe(ctx, scale) for scale in scales]
    with cache.entries([("probe", r) for r in recipes]) as found:
        for scale, entry in zip(scales, found, strict=True):
            out = probe_dir(ctx, scale)
            if entry is not None and not out.exists() and entry.fetch(out, ctx.work):
                ctx.say(
                    f"{scale.label} probe output: copied from the demo cache (the probe "
                    "commands find every unit done and bind the study)"
                )
        _per_scale(ctx, "sample", "probe", study=True)
        _per_scale(ctx, "entropy", "probe", study=False)
        for scale, recipe, entry in zip(scales, recipes, found, strict=True):
            if entry is not None:
                entry.store(probe_dir(ctx, scale), ctx.work, recipe)
    records: dict[str, str] = {}
    for scale in ctx.sizes.scales:
        path = probe_dir(ctx, scale) / "records.jsonl"
        if not path.exists():
            raise DemoStepError(f"rcea probe entropy wrote no {path}")
        records[scale.label] = str(path)
    return {"records": records, "n_checkpoints": n_ckpt}


def step_ingest(ctx: DemoContext) -> dict[str, Any]:
    """Ingest every scale's probe records into the demo study, in scale order (a
    byte-identical file is a no-op)."""

    records = ctx.state.result("probe")["records"]
    for label in ctx.sizes.models:
        res = ingest_file(
            ctx.engine(),
            Path(records[label]),
            study=ctx.study,
            artifacts_dir=ctx.cfg.artifacts_dir,
            data_dir=ctx.cfg.data_dir,
            progress=False,
        )
        ctx.say(f"{label}: {res.summary()}")
    return {"records": records}


def step_measure(ctx: DemoContext) -> dict[str, Any]:
    """Training curves, greedy accuracy + pass@k and the covariance fit as measurements,
    each labelled with its scale's model label."""
    for scale in ctx.sizes.scales:
        runs = [str(run_dir(ctx, scale, o, t)) for o, t in scale_runs(ctx, scale)]
        curves = ctx.rcea(
            "probe", "curves", "--study", ctx.study, "--model", scale.label, *runs, log="measure"
        )
        ctx.say(f"{scale.label} training curves in {ctx.last_seconds:.0f} s: {brief(curves)}")
    _per_scale(ctx, "bench", "measure", study=True)
    _per_scale(ctx, "covariance", "measure", study=True)
    return {"ok": True, "models": ctx.sizes.models}


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

    eng = ctx.engine()
    backend = make_backend(ctx.cfg, BackendOptions(kind="oracle", oracle=ORACLE))
    kw = {"study": ctx.study, "backend": backend, "actor": DEMO_ACTOR}
    induce(eng, seed=2027, batch_size=12, sample_per_question=24, **kw)  # type: ignore[arg-type]  # the backend options are one dict of mixed types, checked where Settings builds them
    merge(eng, **kw)  # type: ignore[arg-type]  # the backend options are one dict of mixed types, checked where Settings builds them
    with session_scope(eng) as s:
        freeze_codebooks(s, study=ctx.study, actor=DEMO_ACTOR)
    rep = assign(eng, seed=2029, **kw)  # type: ignore[arg-type]  # the backend options are one dict of mixed types, checked where Settings builds them
    ctx.say(f"assigned: {rep.n_run} batch(es) run, {rep.n_skipped} done earlier")
    reconcile(eng, seed=2029, **kw)  # type: ignore[arg-type]  # the backend options are one dict of mixed types, checked where Settings builds them
    approved = 0
    for _round in range(3):
        with session_scope(eng) as s:
            pending = [e.id for e in request_extensions(s, study=ctx.study, actor=DEMO_ACTOR)]
        if not pending:
            break
        approve_extensions(
            eng,
            study=ctx.study,
            extension_ids=pending,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            actor=DEMO_ACTOR,
            reason="rcea demo: oracle-proposed mode approved automatically",
            backend=backend,
            seed=2029,
        )
        approved += len(pending)
    with session_scope(eng) as s:
        queue = [d.id for d in researcher_queue(s, study=ctx.study)]
        for d in queue:
            resolve_dispute(s, study=ctx.study, dispute_id=d, actor=DEMO_ACTOR, uncertain=True)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
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
