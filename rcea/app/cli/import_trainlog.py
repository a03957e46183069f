"""``rcea import trainlog``: a run trained elsewhere comes in through its TensorBoard logs or
TRL's ``trainer_state.json`` (rcea.pipeline.importers.trainlog): its entropy and accuracy
traces as a study's ``training_curve`` / ``accuracy_trace`` measurements (the report's
``entropy_law`` section reads them) or as a TRACE file for ``rcea stats entropy-law``."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import typer

from rcea.app.cli.common import domain_errors, emit, engine, fail
from rcea.app.cli.options import JSON_OPTION
from rcea.pipeline.importers.trainlog import TrainLog, TrainLogError, read_trainlog
from rcea.pipeline.run_meta import recorded_train_seed
from rcea.study.store import get_or_create_study, session_scope
from rcea.study.store.measurements import record_measurement

TRACE_HEADER = (
    "run",
    "model",
    "seed",
    "step",
    "entropy",
    "entropy_success",
    "entropy_failure",
    "accuracy",
    "n_params",
)
SOURCE = "import trainlog"


def record_trainlog(
    log: TrainLog,
    study: str,
    *,
    run: str,
    model: str,
    seed: int | None,
    n_params: float | None,
) -> int:
    """Record ``log`` in ``study`` (replacing an earlier import of the same run, model and
    training seed ``seed``: two seeds' traces are two runs, docs/estimators.md item 17):
    one ``training_curve`` and one ``accuracy_trace`` per mapped benchmark, each with the
    source file and the key mapping. Returns the number of measurements."""
    meta = {"source": log.source, "flavour": log.flavour, "mapping": log.mapping}
    with session_scope(engine()) as s:
        sid = get_or_create_study(s, name=study).id
        assert sid is not None  # stored rows have ids; SQLModel types keys Optional
        payload: dict[str, Any] = {"points": log.curve_points(), "trainlog": meta}
        if seed is not None:
            payload["seed"] = seed
        if n_params is not None:
            payload["n_params"] = n_params
        record_measurement(
            s, study_id=sid, kind="training_curve", run=run, model=model, payload=payload,
            source=SOURCE, train_seed=seed,
        )  # fmt: skip
        acc = log.accuracy_points()
        for bench, points in acc.items():
            record_measurement(
                s, study_id=sid, kind="accuracy_trace", run=run, model=model, key=bench,
                payload={"points": points, "trainlog": meta}, source=SOURCE, train_seed=seed,
            )  # fmt: skip
    return 1 + len(acc)


def register(import_app: typer.Typer) -> None:
    """Add ``trainlog`` to ``rcea import``."""
    import_app.command("trainlog")(import_trainlog)


def write_trace(rows: list[dict[str, Any]], out: Path) -> None:
    with out.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=TRACE_HEADER)
        writer.writeheader()
        writer.writerows(rows)


def import_trainlog(
    path: Path = typer.Argument(
        ..., help="a run's TensorBoard event folder or file, or a trainer_state.json"
    ),
    run: str = typer.Option(None, "--run", help="run name (default: the folder's name)"),
    model: str = typer.Option(..., "--model", help="model (scale) label"),
    study: str = typer.Option(None, "--study", help="record the traces in this study"),
    out: Path = typer.Option(None, "--out", help="write a TRACE CSV (rcea stats entropy-law)"),
    seed: int = typer.Option(
        None,
        "--train-seed",
        "--seed",
        help="the run's training seed (replicate): part of its identity, the TRACE's seed "
        "column (--seed: the earlier name); default: the one the run's run.json records "
        "(`rcea train run --train-seeds`), if any; a different value is refused",
    ),
    n_params: float = typer.Option(None, "--n-params", help="non-embedding parameters"),
    entropy_key: str = typer.Option(None, "--entropy-key", help="the global entropy's key"),
    accuracy_key: list[str] = typer.Option(
        [], "--accuracy-key", help="a validation accuracy key (repeatable: one per benchmark)"
    ),
    success_key: str = typer.Option(None, "--success-key", help="success-conditioned entropy"),
    failure_key: str = typer.Option(None, "--failure-key", help="failure-conditioned entropy"),
    force: bool = typer.Option(False, "--force", help="overwrite an existing --out file"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Import the entropy and accuracy traces of a run trained elsewhere (verl's or TRL's
    TensorBoard logs, TRL's trainer_state.json), with the key mapping recorded."""
    if study is None and out is None:
        fail("give --study (record in a study) and/or --out (write a TRACE file)", as_json=as_json)
    if out is not None and out.exists() and not force:
        fail(f"{out} exists: pass --force to overwrite it", as_json=as_json)
    if n_params is not None and not n_params > 0:
        fail("--n-params must be positive", as_json=as_json)
    if seed is not None and seed < 0:
        fail(f"--train-seed must be an integer >= 0, got {seed}", as_json=as_json)
    recorded = recorded_train_seed(path)
    if recorded is not None and seed is not None and recorded != seed:
        fail(
            f"{path}: its run's run.json records training seed {recorded}, but --train-seed "
            f"is {seed}",
            as_json=as_json,
        )
    seed = recorded if recorded is not None else seed
    try:
        log = read_trainlog(
            path,
            entropy_key=entropy_key,
            accuracy_keys=accuracy_key,
            success_key=success_key,
            failure_key=failure_key,
        )
    except TrainLogError as exc:
        fail(str(exc), as_json=as_json)
    name = run or (path.parent.name if path.is_file() else path.name)
    rows = log.trace_rows(name, model, seed=seed, n_params=n_params)
    recorded = 0
    if study is not None:
        with domain_errors(as_json):
            recorded = record_trainlog(log, study, run=name, model=model, seed=seed,
                                       n_params=n_params)  # fmt: skip
    if out is not None:
        write_trace(rows, out)
    data = {
        "ok": True,
        "source": log.source,
        "flavour": log.flavour,
        "mapping": log.mapping,
        "run": name,
        "model": model,
        "train_seed": seed,
        "n_entropy_points": {k: len(v) for k, v in log.entropy.items()},
        "n_accuracy_points": {k: len(v) for k, v in log.accuracy_points().items()},
        "study": study,
        "recorded": recorded,
        "out": str(out) if out is not None else None,
    }

    def text() -> str:
        replicate = "" if seed is None else f", train seed {seed}"
        lines = [f"{log.flavour} log {log.source}: run {name}, model {model}{replicate}"]
        for kind in ("global", "success", "failure"):
            if log.mapping.get(kind):
                lines.append(f"  {kind} entropy <- {log.mapping[kind]}")
        lines.append(f"  accuracy ({log.mapping['accuracy_kind']}) <- "
                     + ", ".join(log.mapping["accuracy"]))  # fmt: skip
        if study is not None:
            lines.append(f"recorded {recorded} measurement(s) in study {study}; next: "
                         f"rcea stats entropy-law --study {study}")  # fmt: skip
        if out is not None:
            lines.append(f"wrote {len(rows)} rows to {out}; next: rcea stats entropy-law {out}")
        return "\n".join(lines)

    emit(data, as_json, text)
