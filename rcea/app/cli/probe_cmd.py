"""``rcea probe ...``: checkpoints → records, token artifacts and measurements.

* ``sample``     K samples per fixed-probe question per checkpoint → ``DIR/records``;
* ``entropy``    teacher-forced token entropies/log-probs → ``DIR/tokens`` + records;
* ``covariance`` predicted vs observed Δh per transition → ``DIR/TRANSITIONS.csv``, tail;
* ``bench``      greedy accuracy, accuracy traces, pass@k → ``DIR/RESULTS.csv``;
* ``curves``     training ``curves.jsonl`` of run dirs → ``training_curve`` measurements;
* ``score``      teacher-forced scores of a study's existing trajectories, written back;
* ``status``     what the manifest of an output dir says is done.

``--study S`` binds the study to the probe-set seed (event ``probe.probe_set``, refused
when the study was probed with another seed) and records the stage's measurements
(``rcea.study.store.measurements``) in one transaction. Torch/Transformers are imported inside
the commands.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import typer

from rcea.app.cli.common import (
    domain_errors,
    emit,
    engine,
    fail,
    is_tty,
    progress_forced,
    settings,
)
from rcea.app.cli.options import ACTOR_OPTION, JSON_OPTION
from rcea.pipeline import probe
from rcea.pipeline.chat import PromptFormat
from rcea.pipeline.probe import (
    ConfigError,
    DatasetError,
    StageOrderError,
    load_config,
    training_curve,
)
from rcea.pipeline.probe.common import question_source
from rcea.pipeline.probe.config import checkpoint_train_seed
from rcea.pipeline.probe.manifest import MANIFEST_FILE
from rcea.pipeline.probe.score import Scorer
from rcea.pipeline.probe.shard import current_shard
from rcea.study.probe_set import ProbeSetMismatch, bind_probe_set
from rcea.study.records.scoring import score_trajectories
from rcea.study.settings import actor_name
from rcea.study.store import get_or_create_study, session_scope
from rcea.study.store.measurements import record_measurement

probe_app = typer.Typer(
    rich_markup_mode=None,
    help="Probe checkpoints: sampling, teacher-forced entropy, covariance, benchmarks.",
    no_args_is_help=True,
)

CONFIG_OPTION = typer.Option(..., "--config", help="probe config (TOML)")
OUT_OPTION = typer.Option(..., "--out", help="output directory (resumable)")
STUDY_OPTION = typer.Option(
    None, "--study", help="also record results in this study (created if missing)"
)
QUESTIONS_OPTION = typer.Option(None, "--questions", help="override [questions] n")
SEED_OPTION = typer.Option(None, "--seed", help="override [probe] seed (the probe-set seed)")
TRAIN_SEED_OPTION = typer.Option(
    None,
    "--train-seed",
    help="override \\[checkpoints] train_seed: the training seed (replicate) of the run dirs' "
    "checkpoints, read from their run.json when `rcea train run --train-seeds` wrote it (a "
    "different value is refused); not the probe-set or decoding seed",
)
THREADS_OPTION = typer.Option(None, "--threads", help="override [probe] torch_threads")
NO_CHAT_OPTION = typer.Option(
    False,
    "--no-chat-template",
    help='\\[chat] template = "none": raw prompt text even when the tokenizer has a chat '
    "template (base models)",
)
SYSTEM_OPTION = typer.Option(
    None, "--system-prompt", help="override \\[chat] system (the system prompt)"
)


def _load(config: Path, as_json: bool, **overrides: Any) -> Any:
    try:
        return load_config(config, **overrides)
    except ConfigError as exc:
        fail(str(exc), as_json=as_json)


def _errors() -> tuple[type[Exception], ...]:
    return (
        ConfigError,
        DatasetError,
        probe.ProbeSetMismatch,  # the manifest's (rcea.pipeline.probe.manifest), not the study's
        StageOrderError,
        FileNotFoundError,
        RuntimeError,
    )


def _bind_study(study: str, cfg: Any, actor: str | None, as_json: bool) -> None:
    """First use: record the probe set; later: refuse another probe-set seed."""
    try:
        with session_scope(engine()) as s:
            bind_probe_set(
                s,
                study=study,
                probe_seed=cfg.probe.seed,
                question_source=question_source(cfg),
                actor=actor_name(actor),
            )
    except ProbeSetMismatch as exc:
        fail(str(exc), as_json=as_json)


def _record(study: str, measurements: list[Any], source: str) -> int:

    with session_scope(engine()) as s:
        st = get_or_create_study(s, name=study)
        for m in measurements:
            record_measurement(
                s,
                study_id=st.id,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
                kind=m.kind,
                payload=m.payload,
                run=m.run,
                model=m.model,
                step=m.step,
                key=m.key,
                source=source,
                train_seed=m.train_seed,
            )
    return len(measurements)


def _stage(
    name: str,
    config: Path,
    out: Path,
    study: str | None,
    actor: str | None,
    as_json: bool,
    overrides: dict[str, Any],
) -> None:
    cfg = _load(config, as_json, **overrides)
    # under accelerate launch (entropy, covariance: rcea.pipeline.probe.shard) rank 0 alone
    # touches the store and reports; the other ranks compute their share and stay quiet
    main = int(os.environ.get("RANK", "0") or 0) == 0
    if name in ("sample", "bench") and int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
        fail(
            f"probe {name} does not shard over processes (every rank would redo and rewrite "
            "the same units); run it without accelerate launch — entropy and covariance shard",
            as_json=as_json,
        )
    if study and main:
        _bind_study(study, cfg, actor, as_json)
    fn = {
        "sample": probe.run_sample,
        "entropy": probe.run_entropy,
        "covariance": probe.run_covariance,
        "bench": probe.run_bench,
    }[name]
    with domain_errors(as_json, *_errors()):
        result = fn(cfg, out, progress=(not as_json and is_tty()) or progress_forced())
    if not (main and result.main_process):
        return
    data = {"ok": True, **result.to_dict()}
    if study and result.measurements:
        data["recorded"] = _record(study, result.measurements, f"probe {name}: {out}")
        data["study"] = study

    def show() -> None:
        typer.echo(
            f"probe {name}: {result.units_run} unit(s) run, {result.units_skipped} already done, "
            f"{result.seconds:.1f} s (probe-set seed {result.probe_seed})"
        )
        for f in result.files:
            typer.echo(f"  {f}")
        if "recorded" in data:
            typer.echo(f"  recorded {data['recorded']} measurement(s) in study {study!r}")

    emit(data, as_json, show)


@probe_app.command("sample")
def sample_cmd(
    config: Path = CONFIG_OPTION,
    out: Path = OUT_OPTION,
    study: str = STUDY_OPTION,
    k: int = typer.Option(None, "--k", help="override [probe] k (samples per question)"),
    questions: int = QUESTIONS_OPTION,
    max_new_tokens: int = typer.Option(None, help="override [probe] max_new_tokens"),
    temperature: float = typer.Option(None, help="override [probe] temperature"),
    seed: int = SEED_OPTION,
    train_seed: int = TRAIN_SEED_OPTION,
    backend: str = typer.Option(
        None, help="override [probe] backend: auto|transformers|vllm|server"
    ),
    base_url: str = typer.Option(
        None,
        "--base-url",
        help="override \\[server] base_url (backend server: the OpenAI-compatible endpoint, "
        "e.g. http://gpu-node:8000/v1)",
    ),
    threads: int = THREADS_OPTION,
    no_chat_template: bool = NO_CHAT_OPTION,
    system_prompt: str = SYSTEM_OPTION,
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Draw K samples per fixed-probe question at every checkpoint; write records.

    Prompts go through each checkpoint tokenizer's chat template (add_generation_prompt)
    when it has one, unless --no-chat-template (docs/real-models.md). With backend
    "server" the samples come from an OpenAI-compatible server (vllm serve) through its
    completions endpoint with sampled-token log-probs (docs/probing.md)."""
    _stage(
        "sample",
        config,
        out,
        study,
        actor,
        as_json,
        {
            "probe.k": k,
            "questions.n": questions,
            "probe.max_new_tokens": max_new_tokens,
            "probe.temperature": temperature,
            "probe.seed": seed,
            "checkpoints.train_seed": train_seed,
            "probe.backend": backend,
            "server.base_url": base_url,
            "probe.torch_threads": threads,
            "chat.template": "none" if no_chat_template else None,
            "chat.system": system_prompt,
        },
    )


@probe_app.command("entropy")
def entropy_cmd(
    config: Path = CONFIG_OPTION,
    out: Path = OUT_OPTION,
    chunk_size: int = typer.Option(None, help="override [entropy] chunk_size (positions)"),
    batch_size: int = typer.Option(None, help="override [entropy] batch_size (sequences)"),
    seed: int = SEED_OPTION,
    train_seed: int = TRAIN_SEED_OPTION,
    threads: int = THREADS_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Teacher-forced token entropies and log-probs of every sample (Parquet + records).

    Sharded: `accelerate launch --multi_gpu --num_processes N $(which rcea) probe entropy`
    splits the checkpoint × question units over N ranks (GPUs, or gloo CPU processes);
    rank 0 merges (docs/scaling-out.md)."""
    _stage(
        "entropy",
        config,
        out,
        None,
        None,
        as_json,
        {
            "entropy.chunk_size": chunk_size,
            "entropy.batch_size": batch_size,
            "probe.seed": seed,
            "checkpoints.train_seed": train_seed,
            "probe.torch_threads": threads,
        },
    )


@probe_app.command("covariance")
def covariance_cmd(
    config: Path = CONFIG_OPTION,
    out: Path = OUT_OPTION,
    study: str = STUDY_OPTION,
    questions: int = typer.Option(None, "--questions", help="override [covariance] questions"),
    trajectories: int = typer.Option(None, help="override [covariance] trajectories (M)"),
    positions: int = typer.Option(None, help="override [covariance] positions (P)"),
    seed: int = SEED_OPTION,
    train_seed: int = TRAIN_SEED_OPTION,
    threads: int = THREADS_OPTION,
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Predicted vs observed entropy change per adjacent transition (TRANSITIONS.csv) and
    the endpoint reward-stratified tail.

    Sharded: `accelerate launch --multi_gpu --num_processes N $(which rcea) probe covariance`
    splits the transition × question units over N ranks (GPUs, or gloo CPU processes);
    rank 0 merges and records --study once."""
    _stage(
        "covariance",
        config,
        out,
        study,
        actor,
        as_json,
        {
            "covariance.questions": questions,
            "covariance.trajectories": trajectories,
            "covariance.positions": positions,
            "probe.seed": seed,
            "checkpoints.train_seed": train_seed,
            "probe.torch_threads": threads,
        },
    )


def _k_list(value: str | None, as_json: bool) -> list[int] | None:
    if value is None:
        return None
    try:
        return [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        fail(f"--k: expected comma-separated integers, got {value!r}", as_json=as_json)


@probe_app.command("bench")
def bench_cmd(
    config: Path = CONFIG_OPTION,
    out: Path = OUT_OPTION,
    study: str = STUDY_OPTION,
    n: int = typer.Option(None, "--n", help="override [bench.passk] n (samples per question)"),
    k: str = typer.Option(None, "--k", help="override [bench.passk] k, e.g. 1,4,16"),
    max_new_tokens: int = typer.Option(None, help="override [bench] max_new_tokens"),
    no_trace: bool = typer.Option(False, "--no-trace", help="skip the dense accuracy trace"),
    seed: int = SEED_OPTION,
    train_seed: int = TRAIN_SEED_OPTION,
    threads: int = THREADS_OPTION,
    no_chat_template: bool = NO_CHAT_OPTION,
    system_prompt: str = SYSTEM_OPTION,
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Greedy accuracy per set at the milestones, dense accuracy traces, pass@k."""
    _stage(
        "bench",
        config,
        out,
        study,
        actor,
        as_json,
        {
            "bench.passk.n": n,
            "bench.passk.k": _k_list(k, as_json),
            "bench.max_new_tokens": max_new_tokens,
            "bench.trace": False if no_trace else None,
            "probe.seed": seed,
            "checkpoints.train_seed": train_seed,
            "probe.torch_threads": threads,
            "chat.template": "none" if no_chat_template else None,
            "chat.system": system_prompt,
        },
    )


@probe_app.command("curves")
def curves_cmd(
    run_dirs: list[Path] = typer.Argument(..., help="training run dirs (curves.jsonl)"),
    study: str = typer.Option(..., "--study", help="study to record the curves in"),
    model: str = typer.Option("tiny", "--model", help="model label of these runs"),
    train_seed: int = typer.Option(
        None,
        "--train-seed",
        help="training seed of these runs (default: each run.json's, if it records one; a "
        "different value is refused)",
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Record each run dir's training curve as a ``training_curve`` measurement (keyed by
    the run's training seed when it has one)."""
    if train_seed is not None and train_seed < 0:
        fail(f"--train-seed must be an integer >= 0, got {train_seed}", as_json=as_json)
    try:
        rows = [training_curve(d, model=model, train_seed=train_seed) for d in run_dirs]
    except ConfigError as exc:
        fail(str(exc), as_json=as_json)
    n = _record(study, rows, "probe curves")
    data = {
        "ok": True,
        "study": study,
        "recorded": n,
        "runs": [
            {
                "run": r.run,
                "train_seed": r.train_seed,
                "model": r.model,
                "points": len(r.payload["points"]),
            }
            for r in rows
        ],
    }

    def show() -> None:
        for r in data["runs"]:  # type: ignore[attr-defined]  # a value of a JSON/dict of mixed types; its shape is checked where it is written
            seed = "" if r["train_seed"] is None else f" [train seed {r['train_seed']}]"
            typer.echo(f"training_curve {r['run']}{seed} ({r['model']}): {r['points']} points")

    emit(data, as_json, show)


@probe_app.command("score")
def score(
    study: str = typer.Option(..., "--study", help="the study whose trajectories are scored"),
    run: str = typer.Option(..., "--run", help="run of the trajectories"),
    model: str = typer.Option(..., "--model", help="model of the trajectories"),
    step: int = typer.Option(..., "--step", help="step of the trajectories"),
    train_seed: int = typer.Option(
        None,
        "--train-seed",
        help="training seed of the trajectories (default: the one the checkpoint's run.json "
        "records, if any; a different value is refused)",
    ),
    checkpoint: Path = typer.Option(
        ..., "--checkpoint", help="local Hugging Face checkpoint that produced them"
    ),
    chat_template: str = typer.Option(
        "auto", "--chat-template", help="auto: the checkpoint's chat template; none: raw"
    ),
    system: str = typer.Option(None, "--system", help="system message of the chat prompt"),
    batch: int = typer.Option(64, "--batch", min=1, help="trajectories per committed batch"),
    batch_size: int = typer.Option(8, "--batch-size", min=1, help="sequences per forward"),
    chunk_size: int = typer.Option(128, "--chunk-size", min=1, help="positions per kernel chunk"),
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Teacher-forced token entropies, chosen-token log-probs and seq_logprob of a study's
    EXISTING trajectories of (run, model, step) under CHECKPOINT (prompt rebuilt from the
    stored question and the chat template), written back; resumable; shards under
    `accelerate launch` (each rank scores its block of the batches, one version)."""
    if not checkpoint.is_dir():
        fail(f"{checkpoint}: no such checkpoint directory", as_json=as_json)
    with domain_errors(as_json, ConfigError):
        seed = checkpoint_train_seed(checkpoint, train_seed)
    with domain_errors(as_json, OSError):
        # before the checkpoint loads: under a GPU launch it pins this rank's device
        shard = current_shard()
        fmt = PromptFormat(chat_template, system)
        scorer = Scorer(
            str(checkpoint), prompt_format=fmt, chunk_size=chunk_size, batch_size=batch_size
        )
        cfg = settings()
        res = score_trajectories(
            engine(),
            scorer,
            study=study,
            run=run,
            model=model,
            step=step,
            artifacts_dir=cfg.artifacts_dir,
            data_dir=cfg.data_dir,
            batch=batch,
            actor=actor_name(actor),
            progress=(is_tty() and not as_json) or progress_forced(),
            shard=shard,
            train_seed=seed,
        )
    if not res.main_process:
        return  # rank 0 reports the launch's totals
    emit({"ok": True, **res.to_dict()}, as_json, lambda: res.summary())


@probe_app.command("status")
def status_cmd(
    out: Path = typer.Option(..., "--out", help="probe output directory"),
    as_json: bool = JSON_OPTION,
) -> None:
    """The probe-set seed and the finished units per stage and checkpoint."""

    path = out / MANIFEST_FILE
    if not path.exists():
        fail(f"{path}: no manifest (nothing probed in this directory yet)", as_json=as_json)
    data = json.loads(path.read_text(encoding="utf-8"))
    counts = {
        stage: {group: len(units) for group, units in groups.items()}
        for stage, groups in data.get("done", {}).items()
    }
    summary = {
        "ok": True,
        "probe_seed": data["probe_seed"],
        "question_source": data["question_source"],
        "n_questions": len(data.get("questions", [])),
        "done": counts,
    }

    def show() -> None:
        typer.echo(f"probe-set seed {summary['probe_seed']}, {summary['question_source']}")
        for stage, groups in counts.items():
            for group, n in groups.items():
                typer.echo(f"  {stage:<11}{group:<40}{n} unit(s)")

    emit(summary, as_json, show)


def register(app: typer.Typer) -> None:
    """Add the ``probe`` command group to ``app``."""
    app.add_typer(probe_app, name="probe")
