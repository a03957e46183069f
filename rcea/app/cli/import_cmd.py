"""``rcea import verl|trl|lm-eval|table`` and ``rcea export``: bring your own study in (and
take it out) through the interchange schema and the one transactional ingest."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from rcea.app.cli import import_trainlog
from rcea.app.cli.common import (
    domain_errors,
    emit,
    engine,
    fail,
    is_tty,
    progress_forced,
    settings,
)
from rcea.app.cli.options import JSON_OPTION
from rcea.pipeline.importers.lm_eval import LmEvalOptions
from rcea.pipeline.importers.table import TableSpec, TableSpecError, kind_of, parse_pairs
from rcea.pipeline.importers.trl import TrlOptions
from rcea.pipeline.importers.verl import VerlOptions
from rcea.pipeline.records import RecordValidationError
from rcea.pipeline.safety import path_under
from rcea.study.records.export import FORMATS, export_study
from rcea.study.records.imports import ImportResult, ReimportError, evidence_warnings
from rcea.study.records.imports import import_lm_eval as run_lm_eval_import
from rcea.study.records.imports import import_table as run_table_import
from rcea.study.records.imports import import_trl as run_trl_import
from rcea.study.records.imports import import_verl as run_import
from rcea.study.records.ingest import k_min_warnings

import_app = typer.Typer(
    rich_markup_mode=None,
    help="Import a trainer's rollouts or any table as interchange records (all or nothing).",
    no_args_is_help=True,
)


def _report_invalid(exc: RecordValidationError, source: Path, as_json: bool) -> None:
    def show() -> None:
        for err in exc.errors:
            typer.echo(str(err), err=True)
        cut = " (stopped early)" if exc.truncated else ""
        typer.echo(f"nothing imported: {len(exc.errors)} error(s){cut} in {source}", err=True)

    emit(
        {
            "ok": False,
            "source": str(source),
            "n_errors": len(exc.errors),
            "truncated": exc.truncated,
            "errors": [e.to_dict() for e in exc.errors],
            "message": "nothing was imported",
        },
        as_json,
        show,
    )
    raise typer.Exit(1)


def _progress(as_json: bool) -> bool:
    return (is_tty() and not as_json) or progress_forced()


def _import_and_report(
    run: Callable[..., ImportResult],
    args: tuple[Any, ...],
    source: Path,
    *,
    study: str,
    expected: str,
    as_json: bool,
    **extra: Any,
) -> None:
    """Every import the one way: run ``run(engine, *args, …)``; bad records are listed by
    file/line/field, a re-import under other options names the earlier ones and a free
    study name, any other refusal is one line; then the summary, the notes, the import's
    and the study's warnings (stderr) and the files left out (not named ``expected``)."""
    cfg = settings()
    try:
        result = run(
            engine(),
            *args,
            study=study,
            artifacts_dir=cfg.artifacts_dir,
            data_dir=cfg.data_dir,
            progress=_progress(as_json),
            **extra,
        )
    except RecordValidationError as exc:
        _report_invalid(exc, source, as_json)
    except ReimportError as exc:
        fail(
            str(exc),
            as_json=as_json,
            earlier_options=exc.earlier,
            suggested_study=exc.suggested_study,
        )
    except (FileNotFoundError, ValueError) as exc:  # a bad option, --problems-out, a spec
        fail(str(exc), as_json=as_json)

    warnings = (
        result.warnings + k_min_warnings(engine(), study) + evidence_warnings(engine(), study)
    )

    def show() -> None:
        typer.echo(result.summary())
        for note in result.notes():
            typer.echo(note)
        for line in warnings:
            typer.echo(f"warning: {line}", err=True)
        if result.ignored:
            typer.echo(
                f"ignored {len(result.ignored)} file(s) not named {expected}: "
                + ", ".join(Path(p).name for p in result.ignored[:5])
                + (" …" if len(result.ignored) > 5 else ""),
                err=True,
            )

    emit({"ok": True, **result.to_dict(), "warnings": warnings}, as_json, show)


#: options every rollout importer (verl, TRL) shares, declared once
STUDY_INTO_OPTION = typer.Option(..., "--study", help="study to import into (created if new)")
RUN_OPTION = typer.Option(..., "--run", help="run name (provenance; e.g. grpo)")
MODEL_OPTION = typer.Option(..., "--model", help="model name (provenance; the logs have none)")
TRAIN_SEED_OPTION = typer.Option(
    None,
    "--train-seed",
    help="the training seed (replicate) of the run, part of its identity; not the decoding "
    "seed each record carries (docs/estimators.md item 17)",
)
CHAT_TEMPLATE_OPTION = typer.Option(
    "auto",
    "--chat-template",
    help="strip this chat template from a text prompt for the question: auto|qwen|llama3|none",
)
QUESTION_REGEX_OPTION = typer.Option(
    None,
    "--question-regex",
    help="regex with one group capturing the question inside the prompt (overrides the template)",
)
SKIP_EMPTY_OPTION = typer.Option(
    False, "--skip-empty-output", help="leave out samples with an empty completion (counted)"
)


@import_app.command("verl")
def import_verl(
    directory: Path = typer.Argument(
        ..., help="verl rollout_data_dir / validation_data_dir (or one STEP.jsonl file)"
    ),
    study: str = STUDY_INTO_OPTION,
    run: str = RUN_OPTION,
    model: str = MODEL_OPTION,
    train_seed: int = TRAIN_SEED_OPTION,
    reward_threshold: float = typer.Option(
        None,
        "--reward-threshold",
        help="R = 1 when score (or --reward-key) > this; needed when scores are not all 0/1",
    ),
    reward_key: str = typer.Option(
        None,
        "--reward-key",
        help="reward extra holding a 0/1/true/false correctness (e.g. DAPO's acc) for R",
    ),
    question_key: str = typer.Option(
        None, "--question-key", help="key holding the question id (default: hash of the prompt)"
    ),
    answer_key: str = typer.Option(None, "--answer-key", help="key holding the extracted answer"),
    validity_key: str = typer.Option(
        None, "--validity-key", help="key holding a 0/1 process-validity verdict"
    ),
    chat_template: str = CHAT_TEMPLATE_OPTION,
    question_regex: str = QUESTION_REGEX_OPTION,
    skip_empty_output: bool = SKIP_EMPTY_OPTION,
    multi_turn: str = typer.Option(
        "refuse",
        "--multi-turn",
        help="agent-loop transcripts (num_turns > 2 or tool calls): refuse (default) | "
        "last-turn (the final assistant turn) | transcript (every turn, shown as turns)",
    ),
    problems_out: Path = typer.Option(
        None,
        "--problems-out",
        help="also write the question texts as JSONL for `rcea judge problems`",
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Import verl `{global_step}.jsonl` dumps; files already imported are skipped."""

    with domain_errors(as_json):
        opts = VerlOptions(
            run=run,
            model=model,
            train_seed=train_seed,
            reward_threshold=reward_threshold,
            reward_key=reward_key,
            question_key=question_key,
            answer_key=answer_key,
            validity_key=validity_key,
            chat_template=chat_template,
            question_regex=question_regex,
            skip_empty_output=skip_empty_output,
            multi_turn=multi_turn,
        )
    _import_and_report(
        run_import,
        (directory, opts),
        directory,
        study=study,
        expected="STEP.jsonl",
        as_json=as_json,
        problems_out=problems_out,
    )


@import_app.command("trl")
def import_trl(
    directory: Path = typer.Argument(
        ...,
        help="TRL GRPOTrainer output_dir (its completions/ folder, written with "
        "log_completions=True), the folder itself, or one completions_STEP.parquet",
    ),
    study: str = STUDY_INTO_OPTION,
    run: str = RUN_OPTION,
    model: str = MODEL_OPTION,
    train_seed: int = TRAIN_SEED_OPTION,
    reward_column: str = typer.Option(
        None,
        "--reward-column",
        help="the reward function column that is the verifier outcome (needed when the logs "
        "have several reward columns)",
    ),
    reward_threshold: float = typer.Option(
        None,
        "--reward-threshold",
        help="R = 1 when the reward column > this; needed when its values are not all 0/1",
    ),
    chat_template: str = CHAT_TEMPLATE_OPTION,
    question_regex: str = QUESTION_REGEX_OPTION,
    skip_empty_output: bool = SKIP_EMPTY_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Import TRL's completion logs (completions_{step}.parquet); prompt groups are rebuilt
    from identical questions within a step; files already imported are skipped, and a file
    that re-logs the previous step's generation batch is skipped and listed."""

    with domain_errors(as_json):
        opts = TrlOptions(
            run=run,
            model=model,
            train_seed=train_seed,
            reward_column=reward_column,
            reward_threshold=reward_threshold,
            chat_template=chat_template,
            question_regex=question_regex,
            skip_empty_output=skip_empty_output,
        )
    _import_and_report(
        run_trl_import,
        (directory, opts),
        directory,
        study=study,
        expected="completions_STEP.parquet",
        as_json=as_json,
    )


@import_app.command("lm-eval")
def import_lm_eval(
    files: list[Path] = typer.Argument(
        ...,
        help="lm-eval --log_samples files (samples_TASK_TIMESTAMP.jsonl) or the folders "
        "holding them",
    ),
    study: str = typer.Option(..., "--study", help="study to import into (created if new)"),
    run: str = typer.Option(..., "--run", help="run name (provenance; e.g. grpo)"),
    model: str = typer.Option(..., "--model", help="model name (provenance; e.g. qwen2.5-1.5b)"),
    train_seed: int = TRAIN_SEED_OPTION,
    step: int = typer.Option(
        ..., "--step", help="the training step of the evaluated checkpoint (0 for the base)"
    ),
    metric: str = typer.Option(
        None,
        "--metric",
        help="the metric key that is the outcome (e.g. exact_match); needed when the lines "
        "name several metrics",
    ),
    metric_threshold: float = typer.Option(
        None,
        "--metric-threshold",
        help="R = 1 when the metric > this; needed when its values are not all 0/1",
    ),
    responses: str = typer.Option(
        "resps",
        "--responses",
        help="resps (the raw generations, default) | filtered (filtered_resps: what the "
        "filter kept, e.g. the extracted answer)",
    ),
    flt: str = typer.Option(
        None,
        "--filter",
        help="the filter whose lines are imported (lm-eval logs every document once per "
        "filter); needed when the files have several",
    ),
    question_key: str = typer.Option(
        None,
        "--question-key",
        help="doc key holding the question text (its id is then the one verl/TRL imports "
        "give); default: the prompt, id from doc_hash",
    ),
    skip_empty_output: bool = typer.Option(
        False, "--skip-empty-output", help="leave out empty responses (counted)"
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Import lm-evaluation-harness --log_samples files of one checkpoint: one question per
    document, one trajectory per response, the outcome from a named metric; files already
    imported are skipped."""

    with domain_errors(as_json):
        opts = LmEvalOptions(
            run=run,
            model=model,
            train_seed=train_seed,
            step=step,
            metric=metric,
            metric_threshold=metric_threshold,
            responses=responses,
            filter=flt,
            question_key=question_key,
            skip_empty_output=skip_empty_output,
        )
    source = Path(files[0]) if len(files) == 1 else Path(", ".join(map(str, files)))
    _import_and_report(
        run_lm_eval_import,
        (list(files), opts),
        source,
        study=study,
        expected="samples_TASK_TIMESTAMP.jsonl",
        as_json=as_json,
    )


@import_app.command("table")
def import_table(
    file: Path = typer.Argument(..., help="a .jsonl, .parquet, .csv or .tsv file"),
    study: str = typer.Option(..., "--study", help="study to import into (created if new)"),
    mapping: list[str] = typer.Option(
        [], "--map", help="FIELD=COLUMN: the column that fills a record field (repeatable)"
    ),
    consts: list[str] = typer.Option(
        [], "--const", help="FIELD=VALUE: a value for every row, for a field the file lacks"
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Import any table whose columns are named differently from the record schema."""

    try:
        spec = TableSpec(parse_pairs(mapping, "--map"), parse_pairs(consts, "--const"))
        kind_of(file)
    except TableSpecError as exc:
        fail(str(exc), as_json=as_json)
    _import_and_report(
        run_table_import, (file, spec), file, study=study, expected="", as_json=as_json
    )


def export(
    study: str = typer.Argument(..., help="study name"),
    fmt: str = typer.Option(
        None, "--format", help="jsonl or parquet (default: from --out's suffix, else jsonl)"
    ),
    out: Path = typer.Option(None, "--out", help="output file (default: STUDY.FORMAT here)"),
    force: bool = typer.Option(False, "--force", help="overwrite an existing output file"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Write a study's trajectories back in the interchange schema (`rcea ingest` reads it)."""

    suffix_fmt = None
    if out is not None:
        suffix_fmt = {".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl"}.get(
            out.suffix.lower()
        )
    fmt = fmt or suffix_fmt or "jsonl"
    if fmt not in FORMATS:
        fail(f"unknown --format {fmt!r}: use jsonl or parquet", as_json=as_json)
    if suffix_fmt is not None and suffix_fmt != fmt:
        fail(f"--out {out} is a .{suffix_fmt} name but --format is {fmt}", as_json=as_json)
    if out is None:
        try:
            out = path_under(Path.cwd(), study, suffix=f".{fmt}")
        except ValueError as exc:
            fail(f"{exc}; give --out", as_json=as_json)
    if out.exists() and not force:
        fail(f"{out} exists: pass --force to overwrite it", as_json=as_json)
    with domain_errors(as_json):
        result = export_study(
            engine(), study, out, fmt=fmt, data_dir=settings().data_dir, progress=_progress(as_json)
        )
    emit({"ok": True, **result.__dict__}, as_json, lambda: result.summary())


def register(app: typer.Typer) -> None:
    import_trainlog.register(import_app)
    app.add_typer(import_app, name="import")
    app.command()(export)
