"""``rcea validate``, ``rcea ingest``, ``rcea studies``, ``rcea summary``, ``rcea db``,
``rcea config``."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import typer

from rcea.app.cli.common import emit, engine, fail, is_tty, settings, store_session
from rcea.app.cli.options import JSON_OPTION, STUDY_OPTION
from rcea.pipeline.importers.verl import dump_hint, looks_like_dump
from rcea.pipeline.records import RecordValidationError, read_records
from rcea.pipeline.safety import mask_url
from rcea.study.records.ingest import ingest_file, k_min_warnings
from rcea.study.store import (
    list_studies,
    make_engine,
    require_study,
    session_scope,
    study_summary,
)
from rcea.study.store.db import current_revision


def report_record_errors(
    exc: RecordValidationError, file: Path, as_json: bool, headline: str, **extra: object
) -> None:
    """A records file's errors, the one way: JSON, or each error on stderr (the first five
    beside the hint that the file looks like a trainer's dump) and ``headline``."""
    hint = dump_hint(file) if looks_like_dump(file) else None

    def show() -> None:
        shown = exc.errors[:5] if hint else exc.errors
        for err in shown:
            typer.echo(str(err), err=True)
        if len(shown) < len(exc.errors):
            typer.echo(f"... and {len(exc.errors) - len(shown)} more", err=True)
        typer.echo(f"{headline}: {len(exc.errors)} error(s) in {file}", err=True)
        if hint:
            typer.echo(hint, err=True)

    errors = [e.to_dict() for e in exc.errors]
    out = {"ok": False, "file": str(file), "n_errors": len(exc.errors), **extra, "errors": errors}
    emit({**out, **({"hint": hint} if hint else {})}, as_json, show)


def validate(
    file: Path = typer.Argument(..., help="records file (.jsonl or .parquet)"),
    allow_extra: bool = typer.Option(False, help="ignore fields outside the record schema"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Check a records file against the schema; name every bad line and field."""
    try:
        batch = read_records(file, allow_extra=allow_extra)
    except FileNotFoundError as exc:
        fail(str(exc), as_json=as_json)
    except RecordValidationError as exc:
        report_record_errors(exc, file, as_json, "invalid", truncated=exc.truncated)
        raise typer.Exit(1) from None
    emit(
        {
            "ok": True,
            "file": str(file),
            "n_records": len(batch),
            "n_questions": batch.n_questions,
        },
        as_json,
        lambda: f"valid: {len(batch)} records, {batch.n_questions} questions in {file}",
    )


def ingest(
    file: Path = typer.Argument(..., help="records file (.jsonl or .parquet)"),
    study: str = typer.Option(None, "--study", help="study name (default: the file's stem)"),
    allow_extra: bool = typer.Option(False, help="ignore fields outside the record schema"),
    train_seed: int = typer.Option(
        None,
        "--train-seed",
        help="the training seed (replicate) of the file's run, for records without "
        "train_seed; not the decoding seed (docs/estimators.md item 17)",
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Validate and store a records file in one transaction (all or nothing)."""

    cfg = settings()
    name = study or file.stem
    try:
        result = ingest_file(
            engine(),
            file,
            study=name,
            artifacts_dir=cfg.artifacts_dir,
            data_dir=cfg.data_dir,
            allow_extra=allow_extra,
            progress=is_tty() and not as_json,
            train_seed=train_seed,
        )
    except FileNotFoundError as exc:
        fail(str(exc), as_json=as_json)
    except RecordValidationError as exc:
        report_record_errors(exc, file, as_json, "nothing ingested", message="nothing was ingested")
        raise typer.Exit(1) from None
    except ValueError as exc:  # a study name the store refuses, a store error
        fail(str(exc), as_json=as_json)

    warnings = k_min_warnings(engine(), name)

    def show() -> None:
        typer.echo(result.summary())
        for line in warnings:
            typer.echo(f"warning: {line}", err=True)

    emit({"ok": True, **result.to_dict(), "warnings": warnings}, as_json, show)


def studies(as_json: bool = JSON_OPTION) -> None:
    """List the studies in the store."""

    with session_scope(engine()) as session:
        rows = [
            {"id": s.id, "name": s.name, "created_at": s.created_at.isoformat()}
            for s in list_studies(session)
        ]

    def show() -> None:
        if not rows:
            typer.echo("no studies yet: run `rcea ingest FILE --study NAME`")
        for r in rows:
            typer.echo(f"{r['id']:>4}  {r['name']}  (created {r['created_at']})")

    emit(rows, as_json, show)


def summary(
    study: str = typer.Argument(..., help="study name"), as_json: bool = JSON_OPTION
) -> None:
    """Counts of trajectories by run, model, step and reward."""

    with store_session(as_json) as session:
        st = require_study(session, name=study)
        data = study_summary(session, study_id=st.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional

    def show() -> None:
        typer.echo(
            f"study {data['study']}: {data['n_trajectories']} trajectories, "
            f"{data['n_questions']} questions, {data['n_ingests']} ingest(s)"
        )
        typer.echo(f"{'run':<16}{'model':<16}{'step':>8}{'n':>8}{'R=1':>8}{'R=0':>8}")
        for g in data["groups"]:
            typer.echo(
                f"{g['run']:<16}{g['model']:<16}{g['step']:>8}{g['n']:>8}"
                f"{g['n_success']:>8}{g['n_failure']:>8}"
            )

    emit(data, as_json, show)


db_app = typer.Typer(
    rich_markup_mode=None, help="Database schema (Alembic migrations).", no_args_is_help=True
)


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Migrate the configured database to the latest schema."""

    eng = engine()  # open_store migrates
    typer.echo(
        f"schema at revision {current_revision(eng)} ({mask_url(settings().resolved_database_url)})"
    )


@db_app.command("current")
def db_current() -> None:
    """Print the schema revision of the configured database."""

    typer.echo(current_revision(make_engine(settings().resolved_database_url)) or "empty")


def config(as_json: bool = JSON_OPTION) -> None:
    """Show the effective configuration (secrets only as set/unset)."""
    data = settings().public_dict()

    def show() -> None:
        for key, value in data.items():
            typer.echo(f"{key:<24} {value}")

    emit(data, as_json, show)


def status(study: str = STUDY_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Where a study stands, from import to verify, and the next command (from the store)."""

    # the publisher's decision brings matplotlib (figures): loaded by `rcea status` alone,
    # not by the other commands of this module
    from rcea.study.study_status import status_lines, study_steps

    with store_session(as_json) as s:
        steps = study_steps(s, study=study)

    def show() -> None:
        for line in status_lines(study, steps):
            typer.echo(line)

    emit({"study": study, "steps": [asdict(x) for x in steps]}, as_json, show)


def register(app: typer.Typer) -> None:
    app.command()(status)
    app.command()(validate)
    app.command()(ingest)
    app.command()(studies)
    app.command()(summary)
    app.command()(config)
    app.add_typer(db_app, name="db")
