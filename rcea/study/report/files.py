"""What ``rcea stats`` reads from files, one function per question: a records file's
columns and one checkpoint of them, the modes of every checkpoint, the pairs of an
agreement CSV, a partition's automatic coverage, pass@k counts, covariance-fit
transitions, the training seeds of a records file and a probe's per-trajectory tail sums.
Each returns the estimators' arguments; every problem raises :class:`InputError` naming
the file, the line and the column. Checkpoints are selected as the report selects them
(:mod:`rcea.study.report.estimates`): a checkpoint is (run, model, step) and two models
are never pooled silently.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rcea.audits.inputs import check_input_file, iter_json_lines
from rcea.audits.inputs import read_csv as read_input_csv
from rcea.pipeline.records import RecordValidationError, read_records
from rcea.study.report.estimates import UNCERTAIN, CheckpointKey, ModesByCheckpoint, mode_label
from rcea.study.report.mode_tail import SUM_FIELDS
from rcea.study.report.replicates import run_of, seeded_columns, seeded_run

#: The model label of a checkpoint pooled over models (``--pool-models``).
POOLED = "pooled"
#: An agreement CSV's labels.
LABELS = ("same", "different")


class InputError(ValueError):
    """A bad input file: the message names the file, the line and the column."""


def read_csv(path: Path, required: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    """Rows with their 1-based line numbers, read through :mod:`rcea.audits.inputs` (a
    regular UTF-8 file, a BOM dropped, each column named once, no row longer than the
    header, bounded cells); every problem raises ``InputError`` naming file and line."""
    if not path.exists():
        raise InputError(f"{path}: no such file")
    try:
        header, found = read_input_csv(path)
    except ValueError as exc:  # rcea.audits.inputs.InputError
        raise InputError(str(exc)) from None
    missing = [c for c in required if c not in header]
    if missing:
        raise InputError(
            f"{path}:line 1: missing column(s) {', '.join(missing)} "
            f"(have: {', '.join(_short(h) for h in header) or 'none'})"
        )
    # a short row's missing cells are empty, as csv.DictReader reads them
    rows = [(line, {h: row.get(h, "").strip() for h in header}) for line, row in found]
    if not rows:
        raise InputError(f"{path}: no data rows")
    return rows


def _short(name: str, width: int = 40) -> str:
    """A column name as an error shows it: a 200 KiB header cell is not echoed whole."""
    return name if len(name) <= width else f"{name[:width]}… ({len(name):,} characters)"


def _int_cell(path: Path, line: int, row: dict[str, str], col: str) -> int:
    try:
        return int(row[col])
    except ValueError:
        raise InputError(
            f"{path}:line {line}: {col}: expected an integer, got {row[col]!r}"
        ) from None


def _float_cell(path: Path, line: int, row: dict[str, str], col: str) -> float:
    try:
        value = float(row[col])
    except ValueError:
        raise InputError(
            f"{path}:line {line}: {col}: expected a number, got {row[col]!r}"
        ) from None
    if not math.isfinite(value):
        raise InputError(f"{path}:line {line}: {col}: must be finite, got {row[col]!r}")
    return value


# --------------------------------------------------------------------------- records


def load_records(path: Path) -> dict[str, list[Any]]:
    """The file's columns, a run with a training seed under its seeded label
    (``RUN [train seed N]``: docs/estimators.md item 17, seeds are never pooled)."""
    try:
        return seeded_columns(read_records(path).columns)
    except FileNotFoundError as exc:
        raise InputError(str(exc)) from None
    except RecordValidationError as exc:
        raise InputError(str(exc)) from None
    except ValueError as exc:  # a run named like another run's seeded label
        raise InputError(f"{path}: {exc}") from None


def models_error(path: Path, models: list[str], pool_flag: str) -> InputError:
    return InputError(
        f"{path} holds records of {len(models)} models ({', '.join(map(str, models))}); a "
        f"checkpoint is (run, model, step) and models are never pooled silently: choose one "
        f"with --model, or pass {pool_flag}"
    )


def select_checkpoint(
    path: Path,
    cols: dict[str, list[Any]],
    *,
    run: str | None,
    model: str | None,
    step: int | None,
    pool: bool = False,
) -> list[int]:
    """The row indices of the one checkpoint that ``run``/``model``/``step`` name (each
    ``None`` = any); several models only with ``pool``, never several (run, step)."""
    n = len(cols["run"])
    idx = [
        i
        for i in range(n)
        if (run is None or cols["run"][i] == run)
        and (model is None or cols["model"][i] == model)
        and (step is None or cols["step"][i] == step)
    ]
    if not idx:
        raise InputError(f"{path}: no records with run={run!r} model={model!r} step={step!r}")
    models = sorted({cols["model"][i] for i in idx})
    if len(models) > 1 and not pool:
        raise models_error(path, models, "--pool-models")
    found = sorted({(cols["run"][i], cols["step"][i]) for i in idx})
    if len(found) > 1:
        listing = ", ".join(f"--run {r} --step {s}" for r, s in found[:10])
        raise InputError(f"{path} holds {len(found)} checkpoints; choose one: {listing}")
    return idx


def checkpoint_modes(
    path: Path, cols: dict[str, list[Any]], *, model: str | None, all_models: bool
) -> ModesByCheckpoint:
    """Checkpoint → question → mode labels of the included trajectories (R = 1 and
    validity 1; missing, empty or ``uncertain`` modes as ``uncertain``) of ``model``, or
    of every model with ``all_models``; a successful record without a validity verdict
    is refused."""
    if all_models and model is not None:
        raise InputError("--all-models and --model exclude each other")
    rows = [i for i in range(len(cols["run"])) if model is None or cols["model"][i] == model]
    if not rows:
        raise InputError(f"{path}: no records with model={model!r}")
    models = sorted({cols["model"][i] for i in rows})
    if len(models) > 1 and not all_models:
        raise models_error(path, models, "--all-models")
    require_validity(path, cols, rows)
    modes: dict[tuple[str, str, int], dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for i in rows:
        if cols["reward"][i] != 1 or cols["validity"][i] != 1:
            continue
        key = (cols["run"][i], cols["model"][i], cols["step"][i])
        modes[key][cols["question_id"][i]].append(mode_label(cols["mode"][i]))
    return modes


def require_validity(path: Path, cols: dict[str, list[Any]], rows: list[int]) -> None:
    """Refuse ``rows`` when a success among them has no validity verdict: C (the accepted
    successes) is undefined for it."""
    no_validity = [i for i in rows if cols["reward"][i] == 1 and cols["validity"][i] is None]
    if no_validity:
        raise InputError(
            f"{path}: {len(no_validity)} successful record(s) have no validity verdict "
            f"(first: {cols['trajectory_id'][no_validity[0]]})"
        )


def has_modes(cols: dict[str, list[Any]]) -> bool:
    """Whether any record carries a mode label (other than empty or ``uncertain``)."""
    return any(mode_label(m) != UNCERTAIN for m in cols["mode"])


def records_rows(cols: dict[str, list[Any]], idx: list[int] | None = None) -> list[dict[str, Any]]:
    """The records (rows ``idx``, else all) as trajectory dicts, in file order."""
    names = list(cols)
    return [
        {c: cols[c][i] for c in names} for i in (range(len(cols["run"])) if idx is None else idx)
    ]


def checkpoint_rows(cols: dict[str, list[Any]]) -> dict[CheckpointKey, list[dict[str, Any]]]:
    """The records as trajectory dicts per (run, model, step), each in file order: what
    the report's per-checkpoint rules take."""
    out: dict[CheckpointKey, list[dict[str, Any]]] = defaultdict(list)
    for row in records_rows(cols):
        out[(row["run"], row["model"], row["step"])].append(row)
    return dict(out)


def seed_identities(cols: dict[str, list[Any]]) -> dict[str, tuple[str, int]]:
    """The seeded run labels of :func:`load_records`' columns → (run, training seed)."""
    seeds = cols.get("train_seed") or [None] * len(cols["run"])
    return {
        label: (run_of(label, t), t)
        for label, t in zip(cols["run"], seeds, strict=True)
        if t is not None
    }


def read_tail_trajectories(path: Path) -> list[dict[str, Any]]:
    """The ``tail_trajectories`` measurements of a probe's
    ``covariance/tail_trajectories.jsonl`` (one endpoint a line, as ``rcea probe
    covariance`` records it: ``kind``, ``run``, ``model``, ``step``, ``train_seed``,
    ``payload`` with ``quantile`` and the per-trajectory lists
    :data:`rcea.study.report.mode_tail.SUM_FIELDS` of one length), each with its run
    under its seeded label and ``where`` naming the file and line; one endpoint twice is
    refused."""
    try:  # a missing, unreadable or non-UTF-8 file: one line naming it
        check_input_file(path)
        lines = list(iter_json_lines(path))
    except (FileNotFoundError, ValueError) as exc:
        raise InputError(str(exc)) from None
    out: list[dict[str, Any]] = []
    seen: dict[tuple[str, str, int], int] = {}
    for line, value in lines:
        if isinstance(value, Exception):
            raise InputError(str(value))
        out.append(_tail_line(path, line, value, seen))
    if not out:
        raise InputError(f"{path}: no endpoints (an empty file)")
    return out


def _tail_line(
    path: Path, line: int, m: Any, seen: dict[tuple[str, str, int], int]
) -> dict[str, Any]:
    """One line of a ``tail_trajectories`` file, checked field by field."""

    def bad(field: str, msg: str) -> InputError:
        return InputError(f"{path}:line {line}: {field}: {msg}")

    if not isinstance(m, dict):
        raise bad("line", "expected a JSON object (one endpoint)")
    if m.get("kind", "tail_trajectories") != "tail_trajectories":
        raise bad("kind", f"expected 'tail_trajectories', got {m['kind']!r}")
    for name in ("run", "model"):
        if not isinstance(m.get(name), str) or not m[name]:
            raise bad(name, f"expected a non-empty string, got {m.get(name)!r}")
    for name in ("step", "train_seed"):
        v = m.get(name)
        if name == "train_seed" and v is None:
            continue
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise bad(name, f"expected an integer >= 0, got {v!r}")
    p = m.get("payload")
    if not isinstance(p, dict):
        raise bad("payload", "expected a JSON object")
    q = p.get("quantile")
    if not isinstance(q, int | float) or isinstance(q, bool) or not 0 < q < 1:
        raise bad("payload.quantile", f"expected a number in (0, 1), got {q!r}")
    fields = [*SUM_FIELDS] + (
        ["failure_tail_positive_mass"] if p.get("failure_tail_positive_mass") is not None else []
    )
    lengths = {}
    for name in fields:
        v = p.get(name)
        if not isinstance(v, list):
            raise bad(f"payload.{name}", f"expected a list, got {type(v).__name__}")
        lengths[name] = len(v)
        numeric = name not in ("trajectory_id", "question_id")
        for j, x in enumerate(v):
            ok = (
                isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
                if numeric
                else isinstance(x, str) and bool(x)
            )
            if not ok:
                kind = "a finite number" if numeric else "a non-empty string"
                raise bad(f"payload.{name}[{j}]", f"expected {kind}, got {x!r}")
    if len(set(lengths.values())) != 1:
        sizes = ", ".join(f"{k}={n}" for k, n in lengths.items())
        raise bad("payload", f"the per-trajectory lists differ in length ({sizes})")
    bad_reward = next((j for j, r in enumerate(p["reward"]) if r not in (0, 1)), None)
    if bad_reward is not None:
        raise bad(
            f"payload.reward[{bad_reward}]", f"expected 0 or 1, got {p['reward'][bad_reward]!r}"
        )
    run = seeded_run(m["run"], m.get("train_seed"))
    key = (run, m["model"], m["step"])
    if key in seen:
        raise bad(
            "run", f"endpoint {run} {m['model']} step {m['step']} is also on line {seen[key]}"
        )
    seen[key] = line
    return {
        "run": run,
        "model": m["model"],
        "step": m["step"],
        "payload": p,
        "where": f"{path}:line {line}",
    }


# --------------------------------------------------------------------------- CSVs


@dataclass(frozen=True)
class Pairs:
    """An agreement CSV's pairs labelled by both annotators, in file order; ``qids`` are
    the pair ids when the file has no ``question_id`` column."""

    ids: list[str]
    qids: list[str]
    a: list[str]
    b: list[str]
    adjudicated: list[str | None]
    automatic: list[str | None]
    n_planned: int
    has_question_id: bool


def read_pairs(path: Path, *, sequential: bool) -> Pairs:
    """The pairs of ``pair_id,annotator_a,annotator_b,adjudicated,automatic[,question_id]``;
    under a ``sequential`` plan a row not yet labelled by both is planned, not an error."""
    rows = read_csv(path, ("pair_id", "annotator_a", "annotator_b", "adjudicated", "automatic"))
    has_qid = "question_id" in rows[0][1]
    kept = []
    for line, row in rows:
        if sequential and not (row["annotator_a"] and row["annotator_b"]):
            continue  # planned but not yet labelled by both (sequential plan)
        for col in ("annotator_a", "annotator_b"):
            if row[col] not in LABELS:
                hint = (
                    ""
                    if sequential or row[col]
                    else " (empty cells = planned, not labelled: needs a rubric "
                    "with a [sequential] table)"
                )
                raise InputError(
                    f"{path}:line {line}: {col}: must be same or different, got {row[col]!r}{hint}"
                )
        for col in ("adjudicated", "automatic"):
            if row[col] and row[col] not in LABELS:
                raise InputError(
                    f"{path}:line {line}: {col}: must be same, different or empty, got {row[col]!r}"
                )
        if has_qid and not row["question_id"]:
            raise InputError(f"{path}:line {line}: question_id: empty")
        kept.append(row)
    if not kept:
        raise InputError(f"{path}: no pair is labelled by both annotators yet")
    return Pairs(
        ids=[r["pair_id"] for r in kept],
        qids=[r["question_id"] if has_qid else r["pair_id"] for r in kept],
        a=[r["annotator_a"] for r in kept],
        b=[r["annotator_b"] for r in kept],
        adjudicated=[r["adjudicated"] or None for r in kept],
        automatic=[r["automatic"] or None for r in kept],
        n_planned=len(rows),
        has_question_id=has_qid,
    )


def partition_coverage(path: Path) -> tuple[float, int]:
    """Non-uncertain share of a partition CSV (``trajectory_id,mode``) and its rows."""
    rows = read_csv(path, ("trajectory_id", "mode"))
    seen: dict[str, int] = {}
    for line, row in rows:
        tid = row["trajectory_id"]
        if not tid:
            raise InputError(f"{path}:line {line}: trajectory_id: empty")
        if tid in seen:
            raise InputError(
                f"{path}:line {line}: trajectory_id: duplicate {tid!r} (first at line {seen[tid]})"
            )
        seen[tid] = line
    certain = sum(row["mode"] not in ("", "uncertain") for _, row in rows)
    return certain / len(rows), len(rows)


def read_passk(path: Path, ks: list[int]) -> tuple[list[int], list[int]]:
    """``n`` and ``c`` per question of a ``question_id,n,c`` CSV (one row per question,
    0 ≤ c ≤ n, n ≥ the largest k)."""
    rows = read_csv(path, ("question_id", "n", "c"))
    ns, cs = [], []
    first_line: dict[str, int] = {}
    for line, row in rows:
        qid = row["question_id"]
        if qid in first_line:  # counted twice in the mean otherwise
            raise InputError(
                f"{path}:line {line}: question_id: {qid!r} is also on line "
                f"{first_line[qid]}; one row per question (add up n and c first)"
            )
        first_line[qid] = line
        n_i, c_i = _int_cell(path, line, row, "n"), _int_cell(path, line, row, "c")
        if not 0 <= c_i <= n_i:
            raise InputError(f"{path}:line {line}: c: must be in [0, n={n_i}], got {c_i}")
        if n_i < max(ks):
            raise InputError(
                f"{path}:line {line}: n: pass@{max(ks)} needs n >= {max(ks)}, got {n_i}"
            )
        ns.append(n_i)
        cs.append(c_i)
    return ns, cs


@dataclass(frozen=True)
class Transitions:
    """A covariance-fit CSV's columns: ``runs`` ``None`` without a run column,
    ``models`` ``None`` without a model column; with both, ``runs`` are the report's
    labels (the run, or ``run:model`` when the run has several models)."""

    labels: list[str]
    predicted: list[float]
    observed: list[float]
    runs: list[str] | None
    models: list[str] | None


def read_transitions(path: Path, exclude_run: list[str]) -> Transitions:
    """``transition,predicted,observed[,run][,model]``; an excluded run that exists at
    several models must name one as ``RUN:MODEL`` (docs/estimators.md item 14)."""
    rows = read_csv(path, ("transition", "predicted", "observed"))
    labels = [r["transition"] for _, r in rows]
    pred = [_float_cell(path, ln, r, "predicted") for ln, r in rows]
    obs = [_float_cell(path, ln, r, "observed") for ln, r in rows]
    runs = [r.get("run", "") for _, r in rows] if "run" in rows[0][1] else None
    if exclude_run and runs is None:
        raise InputError(f"{path}: --exclude-run needs a 'run' column")
    models = [r["model"] for _, r in rows] if "model" in rows[0][1] else None
    if models is not None and runs is not None:
        scales: dict[str, set[str]] = defaultdict(set)
        for r, m in zip(runs, models, strict=True):
            scales[r].add(m)
        runs = [r if len(scales[r]) == 1 else f"{r}:{m}" for r, m in zip(runs, models, strict=True)]
        for name in exclude_run:
            if len(scales.get(name, ())) > 1:
                options = ", ".join(f"{name}:{m}" for m in sorted(scales[name]))
                raise InputError(
                    f"--exclude-run {name}: that run exists at several models; name one ({options})"
                )
    return Transitions(labels, pred, obs, runs, models)
