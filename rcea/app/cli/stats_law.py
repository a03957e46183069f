"""``rcea stats entropy-law`` and ``rcea stats entropy-order``: the entropy–performance law
and the RQ1 ordering test (docs/estimators.md item 18) on files or a study's stored traces
(docs/stats.md)."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import typer

from rcea.app.cli.common import domain_errors, emit, engine
from rcea.app.cli.options import JSON_OPTION
from rcea.audits.entropy_law import DEFAULT_FIT_FRACTION
from rcea.pipeline.jsonl import iter_json_objects
from rcea.study.report.entropy_law import (
    ORDER_METRICS,
    Trace,
    law_results,
    order_sentence,
    ordering_results,
    traces_from_measurements,
)
from rcea.study.report.replicates import measurement_run
from rcea.study.store import require_study, session_scope
from rcea.study.store.measurements import list_measurements

TRACE_COLUMNS = ("run", "model", "step", "entropy", "accuracy")


class InputError(ValueError):
    """A bad input file: the message names the file, the line and the field."""


def _run(as_json: bool, fn: Any) -> None:
    with domain_errors(as_json, InputError):
        fn()


def fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def register(stats_app: typer.Typer) -> None:
    """Add ``entropy-law`` and ``entropy-order`` to ``rcea stats``."""
    stats_app.command("entropy-law")(entropy_law)
    stats_app.command("entropy-order")(entropy_order_cmd)


ENTROPY_COLUMNS = {"global": "entropy", "success": "entropy_success", "failure": "entropy_failure"}
ENDPOINT_COLUMNS = ("run", "model", "entropy")


def read_table(
    path: Path, required: tuple[str, ...], *, per_row: tuple[str, ...] | None = None
) -> list[tuple[int, dict[str, Any]]]:
    """Rows of a CSV (header line 1) or JSONL file with their 1-based line numbers; an
    empty CSV cell or an absent/``null`` JSON value reads as None. A missing file, a
    missing column (CSV: in the header; JSONL: ``per_row`` (default ``required``) in
    every object, the rest in some object) or no rows raise ``InputError`` naming the
    file and line."""
    if not path.exists():
        raise InputError(f"{path}: no such file")
    rows: list[tuple[int, dict[str, Any]]] = []
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        each = required if per_row is None else per_row
        for line, obj in iter_json_objects(path, error=InputError):
            missing = [c for c in each if c not in obj]
            if missing:
                raise InputError(f"{path}:line {line}: missing field(s) {', '.join(missing)}")
            rows.append((line, obj))
        seen = set().union(*(obj.keys() for _, obj in rows))
        absent = [c for c in required if c not in seen]
        if rows and absent:
            raise InputError(f"{path}: no line has the field(s) {', '.join(absent)}")
    else:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            missing = [c for c in required if c not in header]
            if missing:
                raise InputError(
                    f"{path}:line 1: missing column(s) {', '.join(missing)} "
                    f"(have: {', '.join(header) or 'none'})"
                )
            for row in reader:
                rows.append(
                    (
                        reader.line_num,
                        {k: (v.strip() or None) if v else None for k, v in row.items() if k},
                    )
                )
    if not rows:
        raise InputError(f"{path}: no data rows")
    return rows


def _number(path: Path, line: int, row: dict[str, Any], col: str) -> float | None:
    value = row.get(col)
    if value is None:
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{path}:line {line}: {col}: expected a number, got {value!r}") from None
    if math.isinf(x):
        raise InputError(f"{path}:line {line}: {col}: must be finite, got {value!r}")
    return x


def _integer(path: Path, line: int, row: dict[str, Any], col: str) -> int | None:
    x = _number(path, line, row, col)
    if x is None:
        return None
    if x != round(x) or math.isnan(x):
        raise InputError(f"{path}:line {line}: {col}: expected an integer, got {row[col]!r}")
    return int(x)


def _text(path: Path, line: int, row: dict[str, Any], col: str) -> str:
    value = row.get(col)
    if value is None or str(value) == "":
        raise InputError(f"{path}:line {line}: {col}: empty")
    return str(value)


def read_traces(path: Path) -> list[Trace]:
    """The traces of a TRACE file: one per (run, model, seed), rows in any order; a row
    carries an entropy, an accuracy or both (uneven logging); docs/stats.md."""
    # a line may log an entropy, an accuracy or both (uneven logging)
    rows = read_table(path, TRACE_COLUMNS, per_row=("run", "model", "step"))
    traces: dict[tuple[str, str, int | None], Trace] = {}
    n_params_line: dict[tuple[str, str], tuple[float, int]] = {}
    for line, row in rows:
        run, model = _text(path, line, row, "run"), _text(path, line, row, "model")
        step = _integer(path, line, row, "step")
        if step is None or step < 0:
            raise InputError(f"{path}:line {line}: step: expected a non-negative integer")
        seed = _integer(path, line, row, "seed")
        t = traces.setdefault((run, model, seed), Trace(run=run, model=model, seed=seed))
        n_params = _number(path, line, row, "n_params")
        if n_params is not None:
            if not n_params > 0:
                raise InputError(f"{path}:line {line}: n_params: must be positive")
            first = n_params_line.setdefault((run, model), (n_params, line))
            if first[0] != n_params:
                raise InputError(
                    f"{path}:line {line}: n_params: {n_params:g} differs from {first[0]:g} "
                    f"given for run {run}, model {model} on line {first[1]}"
                )
            t.n_params = n_params
        for kind, col in ENTROPY_COLUMNS.items():
            h = _number(path, line, row, col)
            if h is not None:
                t.entropy.setdefault(kind, []).append((step, h))
                t.entropy_keys[kind] = col
        acc = _number(path, line, row, "accuracy")
        if acc is not None:
            if not 0.0 <= acc <= 1.0:
                raise InputError(f"{path}:line {line}: accuracy: must lie in [0, 1], got {acc}")
            if any(s == step for s, _ in t.accuracy):
                raise InputError(
                    f"{path}:line {line}: accuracy: a second value at step {step} for "
                    f"run {run}, model {model}" + ("" if seed is None else f", seed {seed}")
                )
            t.accuracy.append((step, acc))
    return list(traces.values())


def _study_traces(study: str) -> list[Trace]:
    with session_scope(engine()) as session:
        sid = require_study(session, name=study).id
        assert sid is not None  # stored rows have ids; SQLModel types keys Optional
        rows = {
            kind: [
                {
                    "run": measurement_run(m.run, m.train_seed),  # one trace per training seed
                    "model": m.model,
                    "key": m.key,
                    "payload": m.payload,
                }
                for m in list_measurements(session, study_id=sid, kind=kind)
            ]
            for kind in ("training_curve", "accuracy_trace")
        }
    traces, missing = traces_from_measurements(rows["training_curve"], rows["accuracy_trace"])
    for line in missing:
        typer.echo(f"warning: {line}", err=True)
    if not traces:
        raise InputError(
            f"study {study}: no training curve with an accuracy trace "
            "(record them with `rcea probe curves` and `rcea probe bench`)"
        )
    return traces


def entropy_law(
    trace: Path = typer.Argument(
        None,
        help="CSV/JSONL: run,model,step,entropy,accuracy [,seed,entropy_success,"
        "entropy_failure,n_params]",
    ),
    study: str = typer.Option(None, "--study", help="a study's stored traces instead of a file"),
    fit_fraction: float = typer.Option(
        DEFAULT_FIT_FRACTION,
        "--fit-fraction",
        help="the early fit uses the steps up to this fraction of the last validation step",
    ),
    points: bool = typer.Option(False, "--points", help="include the paired points in JSON"),
    as_json: bool = JSON_OPTION,
) -> None:
    """The entropy–performance law R = −a·exp(H) + b per run, its early-fit prediction,
    the log-linear scaling across sizes and the comparison of global, success- and
    failure-conditioned entropy (docs/estimators.md item 18)."""

    def go() -> None:
        if (trace is None) == (study is None):
            raise InputError("give a TRACE file or --study (one of them)")
        if not 0.0 < fit_fraction < 1.0:
            raise InputError(f"--fit-fraction must lie in (0, 1), got {fit_fraction}")
        traces = read_traces(trace) if trace is not None else _study_traces(study)
        try:
            data = law_results(traces, fit_fraction=fit_fraction, include_points=points)
        except ValueError as exc:
            raise InputError(f"{trace or study}: {exc}") from None

        def show() -> None:
            _print_law(data)

        emit(data, as_json, show)

    _run(as_json, go)


def _print_law(data: dict[str, Any]) -> None:
    typer.echo(f"R = -a·exp(H) + b  (early fit on the first {data['fit_fraction']:g} of steps)")
    typer.echo(
        f"  {'run':<28}{'entropy':<9}{'a':>9}{'b':>9}{'R²':>8}{'RMSE':>9}{'ceiling':>9}"
        f"{'n':>5}{'early RMSE':>12}"
    )
    for r in data["runs"]:
        for kind, law in r["entropies"].items():
            if law is None:
                continue
            typer.echo(
                f"  {r['label']:<28}{kind:<9}{fmt(law['a']):>9}{fmt(law['b']):>9}"
                f"{fmt(law['r2']):>8}{fmt(law['rmse']):>9}{fmt(law['ceiling']):>9}"
                f"{law['n']:>5}{fmt(law['early_fit_rmse']):>12}"
            )
    for r in data["runs"]:
        for kind, law in r["entropies"].items():
            if law is not None and law["reason"]:
                typer.echo(f"  n/a {r['label']} {kind}: {law['reason']}")
    for s in data["scaling"]:
        if s["predicted_ceiling"] is None:
            typer.echo(f"scaling {s['run']}: {s['reason']}")
            continue
        typer.echo(
            f"scaling {s['run']}: {s['largest']} ceiling predicted {fmt(s['predicted_ceiling'])}"
            f", fitted {fmt(s['fitted_ceiling'])} (error {fmt(s['ceiling_error'])})"
        )
    typer.echo(data["comparison"]["sentence"])


def read_endpoints(path: Path) -> list[dict[str, Any]]:
    """The ENDPOINTS rows: run, model, entropy, any of the metrics, optional ``failed``."""
    rows = read_table(path, ENDPOINT_COLUMNS)
    header = set().union(*(r.keys() for _, r in rows))
    if not any(m in header for m in ORDER_METRICS):
        raise InputError(f"{path}:line 1: needs at least one of {', '.join(ORDER_METRICS)}")
    out = []
    seen: dict[tuple[str, str], int] = {}
    for line, row in rows:
        run, model = _text(path, line, row, "run"), _text(path, line, row, "model")
        if (run, model) in seen:
            raise InputError(
                f"{path}:line {line}: run {run}, model {model} already on line "
                f"{seen[(run, model)]} (one endpoint per run and model)"
            )
        seen[(run, model)] = line
        h = _number(path, line, row, "entropy")
        if h is None or math.isnan(h):
            raise InputError(f"{path}:line {line}: entropy: empty")
        item: dict[str, Any] = {"run": run, "model": model, "entropy": h}
        for m in ORDER_METRICS:
            v = _number(path, line, row, m)
            item[m] = None if v is None or math.isnan(v) else v
        failed = row.get("failed")
        text = "" if failed is None else str(failed).strip().lower()
        if text not in ("", "0", "1", "true", "false", "yes", "no"):
            raise InputError(f"{path}:line {line}: failed: expected true/false, got {failed!r}")
        item["failed"] = text in ("1", "true", "yes")
        out.append(item)
    return out


def entropy_order_cmd(
    endpoints: Path = typer.Argument(
        ...,
        help="CSV/JSONL: run,model,entropy and any of greedy_accuracy,macro_accuracy,"
        "pass_at_k [,failed]",
    ),
    seed: int = typer.Option(0, help="seed of the random orderings above 9 runs (recorded)"),
    as_json: bool = JSON_OPTION,
) -> None:
    """RQ1: per model scale, Kendall τ-b between endpoint global entropy and each
    performance metric over the non-failed runs, with the exact permutation p-value and
    the rank table (docs/estimators.md item 18)."""

    def go() -> None:
        data = ordering_results(read_endpoints(endpoints), seed=seed)
        data["sentence"] = order_sentence(data)

        def show() -> None:
            for model, res in data["by_model"].items():
                typer.echo(
                    f"model {model}"
                    + (f" (excluded: {', '.join(res['excluded'])})" if res["excluded"] else "")
                )
                for m in res["metrics"]:
                    typer.echo(
                        f"  {m['metric']:<18} tau_b {fmt(m['kendall_tau']):>8}  "
                        f"p {fmt(m['p_value']):>8} ({m['p_method']}, n = {m['n']})"
                    )
                cols = ["entropy", *data["metrics"]]
                typer.echo("  " + f"{'run':<16}" + "".join(f"{c:>20}" for c in cols))
                for row in res["rank_table"]:
                    cells = "".join(
                        f"{fmt(row.get(c)) + ' (' + fmt(row.get(c + '_rank')) + ')':>20}"
                        for c in cols
                    )
                    typer.echo(f"  {row['run']:<16}{cells}")
            typer.echo(data["sentence"])

        emit(data, as_json, show)

    _run(as_json, go)
