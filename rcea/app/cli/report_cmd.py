"""``rcea report ...``: the study report (``build``), the gated bundle (``publish``) and its
store-free check (``verify``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from rcea.app.cli.common import (
    emit,
    engine,
    fail,
    is_tty,
    settings,
    store_session,
)
from rcea.app.cli.exit_codes import REFUSED
from rcea.app.cli.options import JSON_OPTION, STUDY_OPTION, grouped_options
from rcea.audits.inputs import check_output_file
from rcea.study.report import figures as report_figures
from rcea.study.report import paper
from rcea.study.report.build import build_report
from rcea.study.report.compute import FILL_TOKEN_ENTROPIES
from rcea.study.report.parameters import ReportParameters
from rcea.study.report.publication import PublishRefused, display_label
from rcea.study.report.publish import publish_report
from rcea.study.report.schema import report_json
from rcea.study.report.signing import SignatureError, generate_keypair
from rcea.study.report.sources import ReportSourceError, report_from_path
from rcea.study.report.verify import BundleError, verify_bundle
from rcea.study.settings import actor_name
from rcea.study.store import StoreError, session_scope

report_app = typer.Typer(
    rich_markup_mode=None,
    help="Study reports and the publish gate (audited numbers only).",
    no_args_is_help=True,
)

_RUBRIC = "default: the gate rubric's estimators section, else "
SEED_OPTION = typer.Option(None, help=f"seed of every bootstrap and rarefaction draw ({_RUBRIC}0)")
N_BOOT_OPTION = typer.Option(None, help=f"bootstrap resamples for every CI ({_RUBRIC}10000)")
K_MIN_OPTION = typer.Option(None, help=f"K_min gate of every conditional quantity ({_RUBRIC}8)")
N_MIN_OPTION = typer.Option(None, help=f"retention eligibility min(m_0, m_t) >= n_min ({_RUBRIC}8)")
N_DRAWS_OPTION = typer.Option(None, help=f"rarefaction draws per checkpoint ({_RUBRIC}20)")
CONFIDENCE_OPTION = typer.Option(None, help=f"confidence level of every CI ({_RUBRIC}0.95)")
BASE_STEP_OPTION = typer.Option(0, help="the base checkpoint's step (retention)")
PARTITION_OPTION = typer.Option(
    None,
    help="partition the mode numbers rest on: a content-hash prefix or 'latest' "
    "(default: the partition of the latest passing final gate)",
)
ASSOC_K_OPTION = typer.Option(
    None,
    "--association-k",
    help="k of the retention-pass@k Spearman (default: 64 when stored, else the largest k)",
)
ASSOC_BENCH_OPTION = typer.Option(
    None,
    "--association-benchmark",
    help="benchmark of the retention-pass@k Spearman (default: MATH500 when stored)",
)
ASSOC_POOLED_OPTION = typer.Option(
    False,
    "--association-pooled",
    help="also fit the association over every model scale together (labelled pooled)",
)
BASE_RUN_OPTION = typer.Option(
    "base", "--base-run", help="the run holding each model's shared base checkpoint"
)


#: The options of ``ReportParameters`` (build and publish): (parameter, field, type, option).
REPORT_PARAMETERS: tuple[tuple[str, str, type, Any], ...] = tuple(
    (name, name, kind, option)
    for name, kind, option in (
        ("seed", int, SEED_OPTION),
        ("n_boot", int, N_BOOT_OPTION),
        ("k_min", int, K_MIN_OPTION),
        ("n_min", int, N_MIN_OPTION),
        ("n_draws", int, N_DRAWS_OPTION),
        ("confidence", float, CONFIDENCE_OPTION),
        ("base_step", int, BASE_STEP_OPTION),
        ("base_run", str, BASE_RUN_OPTION),
        ("partition", str, PARTITION_OPTION),
        ("association_k", int, ASSOC_K_OPTION),
        ("association_benchmark", str, ASSOC_BENCH_OPTION),
        ("association_pooled", bool, ASSOC_POOLED_OPTION),
    )
)
#: Give build/publish the report options (before ``--json``) as one ``params``.
report_options = grouped_options(REPORT_PARAMETERS, ReportParameters, "params", ("as_json",))


def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _print_report(rep: dict[str, Any]) -> None:
    pair, val = rep["audits"]["pair"], rep["audits"]["validity"]
    typer.echo(f"report — study {rep['study']} ({rep['generated_at']})")
    typer.echo(
        f"pair audit: {pair['status']} (partition {str(pair['partition_hash'])[:12]}, "
        f"{pair['partition_source']})"
    )
    typer.echo(f"validity: {val['status']} (filter {val['filter']})")
    for imp in rep.get("imports", []):
        typer.echo(
            f"imported {imp['source']} as run {imp['run']}, model {imp['model']}: "
            f"score rule {imp['score_rule'] or 'n/a'}"
        )
    table = []
    for q in rep["quantities"]:
        where = " ".join(
            str(x) for x in (q["run"], q["model"], q["step"], q["key"]) if x is not None
        )
        ci = "" if q["ci_low"] is None else f"[{_fmt(q['ci_low'])}, {_fmt(q['ci_high'])}]"
        label = display_label(q) if q["publishable"] else "UNPUBLISHABLE"
        table.append((q["section"], q["name"], where, _fmt(q["value"]), ci, label))
    head = ("section", "quantity", "where", "value", "95% CI", "label")
    # Every column as wide as its widest cell: nothing is cut (a model name, a step).
    width = [max(len(r[i]) for r in [head, *table]) for i in range(len(head))]
    for r in [head, *table]:
        cells = [
            r[i].rjust(width[i]) if i == 3 else r[i].ljust(width[i]) for i in range(len(head) - 1)
        ]
        typer.echo("  ".join([*cells, r[-1]]).rstrip())
    for reason in {q["blocked_by"] for q in rep["quantities"] if q["blocked_by"]}:
        typer.echo(f"not publishable: {reason}")
    replicates = rep.get("replicates") or {}
    if replicates.get("sentence"):  # item 17 says a single seed in words, here too
        typer.echo(replicates["sentence"])
    lacking = [c for c in rep["checkpoints"] if c.get("entropy") is None]
    if lacking:
        where = ", ".join(f"{c['run']} {c['model']} {c['step']}" for c in lacking)
        typer.echo(f"token and sequence entropies missing at: {where}")

        typer.echo(FILL_TOKEN_ENTROPIES)


@report_app.command("build")
@report_options
def build(
    study: str = STUDY_OPTION,
    out: Path = typer.Option(None, "--out", help="also write the JSON report to this file"),
    as_json: bool = JSON_OPTION,
    *,
    params: ReportParameters,
) -> None:
    """Every RCEA quantity the store supports, per run and checkpoint, with the audit
    each depends on and whether it is publishable."""

    with store_session(as_json) as s:
        if out is not None:  # before the build records its attempt
            check_output_file(out)
        rep = report_json(
            build_report(s, study=study, params=params, progress=is_tty() and not as_json)
        )
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(rep, indent=2, allow_nan=False) + "\n", encoding="utf-8")

    def show() -> None:
        for line in rep.get("insufficient_evidence") or []:  # at the top, on stderr
            typer.echo(f"warning: {line}", err=True)
        _print_report(rep)
        if out is not None:
            typer.echo(f"wrote {out}")

    emit(rep, as_json, show)


@report_app.command("publish")
@report_options
def publish(
    study: str = STUDY_OPTION,
    out: Path = typer.Option(
        None, "--out", help="parent directory of the bundle (default: <data_dir>/reports)"
    ),
    entropy_only: bool = typer.Option(
        False,
        "--entropy-only",
        help="publish only the audit-independent numbers, labelled 'entropy-only (no audit)'",
    ),
    actor: str = typer.Option(
        None, "--actor", help="who publishes (default: $RCEA_ACTOR or the login name)"
    ),
    include_texts: bool = typer.Option(
        False,
        "--include-texts",
        help="also write the trajectory texts (texts.jsonl); never needed to verify",
    ),
    sign: Path = typer.Option(
        None,
        "--sign",
        help="ed25519 private key (PEM) that signs the bundle's hashes.json (signature.json)",
    ),
    as_json: bool = JSON_OPTION,
    *,
    params: ReportParameters,
) -> None:
    """Write a dated, self-contained bundle (HTML, JSON, figures, rubric, gate report,
    hashes). Refused (exit 2) while a retention/mode number rests on a partition without
    a passing final gate or a validity number on a judge without a completed calibration,
    unless --entropy-only."""

    target = out if out is not None else settings().data_dir / "reports"
    try:
        with session_scope(engine()) as s:
            res = publish_report(
                s,
                study=study,
                out_dir=target,
                actor=actor_name(actor),
                entropy_only=entropy_only,
                include_texts=include_texts,
                sign_key=sign,
                params=params,
                progress=is_tty() and not as_json,
            )
    except PublishRefused as exc:
        fail(str(exc), code=REFUSED, as_json=as_json, reasons=exc.reasons)
    except (StoreError, ValueError, OSError) as exc:  # SignatureError is a ValueError
        fail(str(exc), as_json=as_json)

    def show() -> None:
        typer.echo(
            f"published {res['n_quantities']} quantities ({res['scope']}) to {res['bundle']}"
        )
        for name in res["files"]:
            typer.echo(f"  {name}")

    emit({"ok": True, **res}, as_json, show)


@report_app.command("verify")
def verify(
    bundle: Path = typer.Argument(..., help="a bundle directory written by `rcea report publish`"),
    key: Path = typer.Option(
        None, "--key", help="ed25519 public key (PEM): also check the bundle's signature"
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Re-derive every published number of BUNDLE from the bundle alone (no store, no
    Label Studio) with the same rcea/audits/ functions and seeds, and compare: exact for
    counts and hashes, 1e-9 relative for floats. Exit 0 with a one-line summary, or 1
    naming every mismatch (2: not a readable bundle)."""

    try:
        res = verify_bundle(bundle, public_key=key)
    except BundleError as exc:
        fail(str(exc), code=2, as_json=as_json)

    def show() -> None:
        for line in res.mismatches:
            typer.echo(f"mismatch: {line}")
        typer.echo(res.summary())

    emit(res.to_dict(), as_json, show)
    if not res.ok:
        raise typer.Exit(1)


SOURCE_ARGUMENT = typer.Argument(
    ...,
    help="a published bundle directory (verified first), a report JSON from "
    "`rcea report build --out`, or a study name (its report is built from the store)",
)
OUT_DIR_OPTION = typer.Option(..., "--out", help="directory to write the files into")


def _report_of(source: str, as_json: bool) -> dict[str, Any]:
    path = Path(source)
    # a study name has no slash; anything path-like is read as a file, so a mistyped
    # path says "no such file" rather than "no such study"
    if path.exists() or "/" in source or source.endswith(".json"):
        try:
            return report_from_path(path)
        except ReportSourceError as exc:
            fail(str(exc), as_json=as_json)
    with store_session(as_json) as s:
        return report_json(build_report(s, study=source, params=ReportParameters()))


def _write_files(out: Path, files: dict[str, bytes], as_json: bool) -> list[str]:
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (out / name).write_bytes(data)
    except OSError as exc:
        fail(f"{out}: cannot write ({exc.strerror or exc})", as_json=as_json)
    return [str((out / name).resolve()) for name in files]


@report_app.command("tables")
def tables(
    source: str = SOURCE_ARGUMENT,
    fmt: str = typer.Option("latex", "--format", help="latex (booktabs), markdown or csv"),
    out: Path = OUT_DIR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """The report's numbers as tables a paper can include: one table per section, every
    number with its CI and its label (a audited, u unaudited, * insufficient evidence, b
    blocked), footnotes for insufficient evidence; CSV is the long form, one row per
    number. Writes OUT/rcea-tables.{tex,md,csv}."""

    if fmt not in paper.FORMATS:
        fail(f"unknown --format {fmt!r}: use latex, markdown or csv", as_json=as_json)
    rep = _report_of(source, as_json)
    name = f"rcea-tables{paper.FORMATS[fmt]}"
    written = _write_files(out, {name: paper.render_tables(rep, fmt).encode()}, as_json)
    emit(
        {"ok": True, "study": rep["study"], "format": fmt, "files": written},
        as_json,
        lambda: f"wrote {written[0]} (study {rep['study']})",
    )


@report_app.command("figures")
def figures(
    source: str = SOURCE_ARGUMENT,
    fmt: str = typer.Option("pdf", "--format", help="pdf, svg or png"),
    out: Path = OUT_DIR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """The report's figures, one file per figure (colour-blind-safe): pass@k against k for
    base vs trained, entropy by outcome over steps, retention with CIs, the covariance fit
    scatter, the paired ratio, accuracy and pass@k, training entropy. Only figures whose
    data the report holds are drawn; a bundle gives the same figures every time."""

    if fmt not in report_figures.FORMATS:
        fail(f"unknown --format {fmt!r}: use pdf, svg or png", as_json=as_json)
    rep = _report_of(source, as_json)
    drawn = report_figures.make_figures(rep, fmt)
    written = _write_files(out, {f"{k}.{fmt}": v for k, v in drawn.items()}, as_json)
    emit(
        {"ok": True, "study": rep["study"], "format": fmt, "files": written},
        as_json,
        lambda: "\n".join([f"wrote {len(written)} figure(s) (study {rep['study']}):", *written]),
    )


@report_app.command("keygen")
def keygen(
    private: Path = typer.Option(..., "--private", help="where to write the private key (PEM)"),
    public: Path = typer.Option(..., "--public", help="where to write the public key (PEM)"),
) -> None:
    """Make an ed25519 key pair for `rcea report publish --sign` / `verify --key`."""

    for path in (private, public):
        if path.exists():
            fail(f"{path} exists: not overwriting a key")
    try:
        fp = generate_keypair(private, public)
    except SignatureError as exc:
        fail(str(exc))
    private.chmod(0o600)
    typer.echo(f"wrote {private} and {public} (ed25519 key {fp})")


def register(app: typer.Typer) -> None:
    """Add the ``report`` command group to ``app``."""
    app.add_typer(report_app, name="report")
