"""lm-evaluation-harness ``--log_samples`` files → interchange records.

lm-eval (``lm_eval/evaluator.py`` and ``loggers/evaluation_tracker.py``, read at release
0.4.13) writes ``samples_<task>_<timestamp>.jsonl``: one line per document AND filter, with
``doc_id``, ``doc`` (the dataset row), ``target``, ``arguments`` (``{"gen_args_0": {"arg_0":
prompt, "arg_1": generation kwargs}}`` for a ``generate_until`` task), ``resps`` (one list
per request of the ``repeats`` raw responses), ``filtered_resps`` (one entry per request
after the line's ``filter``), ``filter``, ``metrics`` (the metric names), one key per
metric (its value for the document), ``doc_hash``, ``prompt_hash`` and ``target_hash``.
The file is an evaluation of one checkpoint and names no run, model, step or seed, so:

* ``run``, ``model`` and ``step`` are given by the caller;
* the question id is ``lme-`` + the first 16 hex digits of ``doc_hash`` (SHA-256 of the
  document, the same in every run of any task over the same document) and the question
  text is the prompt ``arg_0``; with ``question_key`` it is ``doc[question_key]`` and the
  id is ``q-`` + 16 hex digits of SHA-256 of that text — the id ``rcea import verl`` and
  ``rcea import trl`` give the same question;
* ``target`` is the question's ``ground_truth``;
* the samples are the document's ``resps`` (``responses="resps"``, the raw generations)
  or ``filtered_resps`` (``responses="filtered"``, what the filter kept, e.g. the extracted
  answer); one trajectory per response;
* a file with several filters holds every document once per filter: ``filter`` names the
  one whose lines (and metric values) are imported;
* the outcome follows an explicit rule: the metric key named by ``metric`` (needed when the
  lines name more than one metric), whose values must be 0/1 unless ``metric_threshold``
  is given (R = 1 when value > threshold); a document's metric is ONE value, so a document
  with several responses needs a per-response list of values (lm-eval scores a document,
  e.g. after a majority vote, not each of its ``repeats``) — otherwise it is refused,
  naming the line: import runs made with ``repeats: 1`` instead, several files at once;
* several files of the same documents (runs with other seeds) add samples to the same
  questions: files are read in (timestamp, name) order and ``seed`` counts a question's
  responses across them;
* loglikelihood (multiple-choice) tasks have no generated text and are refused;
* ``trajectory_id`` is ``RUN:MODEL:sSTEP:QUESTION_ID:SEED``.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rcea.audits.inputs import InputError, iter_json_lines
from rcea.pipeline.importers.common import (
    check_train_seed,
    digest_without_unset_train_seed,
    relabel,
    source_label,
)
from rcea.pipeline.importers.verl import _trajectory_id, question_id_for, strip_special
from rcea.pipeline.records import (
    MAX_ERRORS,
    RecordBatch,
    RecordError,
    RecordValidationError,
    checked_input,
    input_refusal,
    records_from_rows,
)

SAMPLES_FILE = re.compile(r"\Asamples_(?P<task>.+)_(?P<stamp>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.jsonl\Z")
#: keys every lm-eval sample line has; the others are metric values or task extras
LINE_KEYS = ("doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "doc_hash")
RESPONSES = ("resps", "filtered")


@dataclass(frozen=True)
class LmEvalOptions:
    run: str
    model: str
    step: int
    metric: str | None = None
    metric_threshold: float | None = None
    responses: str = "resps"
    filter: str | None = None
    question_key: str | None = None
    skip_empty_output: bool = False

    train_seed: int | None = None

    def __post_init__(self) -> None:
        check_train_seed(self.train_seed)
        for name in ("run", "model"):
            if not getattr(self, name).strip():
                raise ValueError(f"--{name} must be a non-empty name")
        if isinstance(self.step, bool) or not isinstance(self.step, int) or self.step < 0:
            raise ValueError("--step must be an integer >= 0")
        if self.responses not in RESPONSES:
            raise ValueError(f"unknown --responses {self.responses!r}: use resps or filtered")
        if self.metric_threshold is not None and not math.isfinite(self.metric_threshold):
            raise ValueError("--metric-threshold must be a finite number")
        for name in ("metric", "filter", "question_key"):
            value = getattr(self, name)
            if value is not None and not value.strip():
                raise ValueError(f"--{name.replace('_', '-')} must be a non-empty name")

    def digest_options(self) -> dict[str, Any]:
        return digest_without_unset_train_seed(asdict(self))


def samples_files(paths: list[Path]) -> tuple[list[Path], list[Path]]:
    """The ``samples_<task>_<timestamp>.jsonl`` files among ``paths`` (files, or folders
    searched one level down, as lm-eval writes them under ``OUTPUT/MODEL/``) in
    (timestamp, name) order, and the other files met."""
    found: list[Path] = []
    other: list[Path] = []
    for path in paths:
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such file or directory")
        if path.is_file():
            found.append(path)
            continue
        for p in sorted(path.rglob("*")):
            if p.is_file() and SAMPLES_FILE.match(p.name):
                found.append(p)
            elif p.is_file() and not p.name.startswith("."):
                other.append(p)

    def key(p: Path) -> tuple[str, str]:
        m = SAMPLES_FILE.match(p.name)
        return (m.group("stamp") if m else "", str(p))

    return sorted(dict.fromkeys(found), key=key), other


def task_of(path: Path) -> str | None:
    m = SAMPLES_FILE.match(path.name)
    return m.group("task") if m else None


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _value(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    return float(v) if _is_number(v) else None


def read_lines(path: Path) -> tuple[list[tuple[int, dict[str, Any]]], list[RecordError]]:
    """(line number, object) of every non-blank line, read the one hardened way every input
    is (:func:`rcea.audits.inputs.iter_json_lines`: a regular readable file, strict UTF-8,
    bounded nesting and integers, no duplicate keys); bad lines are errors."""
    source = str(path)
    out: list[tuple[int, dict[str, Any]]] = []
    errors: list[RecordError] = []
    try:
        for n, obj in iter_json_lines(checked_input(path)):
            if isinstance(obj, InputError):
                errors.append(RecordError(source, f"line {n}", obj.field, obj.message))
            elif not isinstance(obj, dict):
                errors.append(RecordError(source, f"line {n}", None, "must be a JSON object"))
            else:
                out.append((n, obj))
    except InputError as exc:
        return [], input_refusal(exc, source).errors
    return out, errors


def choose_metric(lines: list[dict[str, Any]], opts: LmEvalOptions) -> str:
    """The metric key that is the outcome: ``opts.metric``, or the only one the lines name;
    ``ValueError`` says what to pass."""
    named = sorted({m for obj in lines for m in obj.get("metrics") or [] if isinstance(m, str)})
    if opts.metric is not None:
        if named and opts.metric not in named:
            raise ValueError(
                f"--metric {opts.metric!r} is not a metric of this file (metrics: "
                + ", ".join(named)
                + ")"
            )
        return opts.metric
    if len(named) == 1:
        return named[0]
    raise ValueError(
        f"{len(named)} metrics ({', '.join(named) or 'none named'}): name the one that is "
        "the verifier outcome with --metric"
    )


def choose_filter(lines: list[dict[str, Any]], opts: LmEvalOptions) -> str | None:
    filters = sorted({str(obj.get("filter")) for obj in lines if "filter" in obj})
    if opts.filter is not None:
        if filters and opts.filter not in filters:
            raise ValueError(
                f"--filter {opts.filter!r} is not a filter of this file (filters: "
                + ", ".join(filters)
                + ")"
            )
        return opts.filter
    if len(filters) > 1:
        raise ValueError(
            f"{len(filters)} filters ({', '.join(filters)}): every document is logged once "
            "per filter; name the one whose metric values are the outcome with --filter"
        )
    return filters[0] if filters else None


def _responses(obj: dict[str, Any], opts: LmEvalOptions) -> tuple[list[str] | None, str, str]:
    """(the document's responses, or None; the key; why not)."""
    args = obj.get("arguments")
    if not isinstance(args, dict):
        return None, "arguments", "must hold gen_args_0.arg_0, the prompt"
    first = args.get("gen_args_0")
    if not isinstance(first, dict) or not isinstance(first.get("arg_0"), str):
        return None, "arguments", "must hold gen_args_0.arg_0, the prompt"
    if len(args) != 1 or not isinstance(first.get("arg_1"), dict):
        return (
            None,
            "arguments",
            (
                "not a generate_until task (a loglikelihood / multiple-choice task has no "
                "generated text to import)"
            ),
        )
    key = "resps" if opts.responses == "resps" else "filtered_resps"
    value = obj.get(key)
    if not isinstance(value, list) or len(value) != 1:
        return None, key, "must be a list with one entry (the document's one request)"
    inner = value[0]
    if isinstance(inner, str):
        return [inner], key, ""
    if isinstance(inner, list) and inner and all(isinstance(r, str) for r in inner):
        return list(inner), key, ""
    return None, key, "must hold the response text(s)"


def read_lm_eval_file(
    path: Path,
    opts: LmEvalOptions,
    *,
    offsets: dict[str, int],
    max_errors: int = MAX_ERRORS,
) -> RecordBatch:
    """One samples file → validated records. ``offsets`` (question id → responses seen in
    earlier files) numbers the seeds and is advanced. ``RecordValidationError`` names every
    bad line as ``FILE:line N: KEY: message``."""
    source = str(path)
    lines, errors = read_lines(path)  # unparseable lines are reported with the others
    errors = errors[:max_errors]
    if not lines:
        raise RecordValidationError(errors or [RecordError(source, "file", None, "no lines")])
    try:
        metric = choose_metric([o for _, o in lines], opts)
        flt = choose_filter([o for _, o in lines], opts)
    except ValueError as exc:
        raise RecordValidationError([RecordError(source, "file", None, str(exc))]) from None
    task = task_of(path)

    def err(loc: str, key: str | None, msg: str) -> None:
        if len(errors) < max_errors:
            errors.append(RecordError(source, loc, key, msg))

    rows: list[dict[str, Any]] = []
    locs: list[str] = []
    seen_values: set[float] = set()
    seen_docs: set[Any] = set()
    counts: dict[str, int] = defaultdict(int)
    n_stripped = n_empty = 0
    for n, obj in lines:
        if len(errors) >= max_errors:
            break
        loc = f"line {n}"
        if flt is not None and str(obj.get("filter")) != flt:
            continue
        bad = len(errors)
        for key in LINE_KEYS:
            if key not in obj:
                err(loc, key, "missing (lm-eval's --log_samples lines have it)")
        if len(errors) > bad:
            continue
        doc_id = obj["doc_id"]
        if doc_id in seen_docs:
            err(loc, "doc_id", f"document {doc_id!r} appears twice for filter {flt!r}")
            continue
        seen_docs.add(doc_id)
        texts, key, why = _responses(obj, opts)
        if texts is None:
            err(loc, key, why)
            continue
        if opts.question_key is not None:
            doc = obj["doc"]
            question = doc.get(opts.question_key) if isinstance(doc, dict) else None
            if not isinstance(question, str) or not question.strip():
                err(loc, f"doc.{opts.question_key}", "must be a non-empty string")
                continue
            qid = question_id_for(question)
        else:
            doc_hash = obj["doc_hash"]
            if not isinstance(doc_hash, str) or not re.fullmatch(r"[0-9a-f]{16,}", doc_hash):
                err(loc, "doc_hash", f"must be a hex digest, got {doc_hash!r}")
                continue
            question = obj["arguments"]["gen_args_0"]["arg_0"]
            qid = "lme-" + doc_hash[:16]
        if metric not in obj:
            err(loc, metric, "missing: the --metric key is not on this line")
            continue
        raw = obj[metric]
        values = raw if isinstance(raw, list) else [raw]
        if any(_value(v) is None for v in values):
            err(loc, metric, f"must be a number or a list of numbers, got {raw!r}")
            continue
        if len(values) != len(texts):
            err(
                loc,
                metric,
                f"one value for {len(texts)} responses: lm-eval scores a document "
                "(e.g. after a majority vote), not each of its repeats; import runs made "
                "with repeats: 1 (several files at once), or --responses filtered when the "
                "filter keeps the one response it scored",
            )
            continue
        floats = [float(_value(v)) for v in values]  # type: ignore[arg-type]  # every value was checked to be a number above
        seen_values.update(floats)
        if opts.metric_threshold is None and not all(v in (0.0, 1.0) for v in floats):
            err(
                loc,
                metric,
                f"is {raw!r}, not 0/1: pass --metric-threshold T (R = 1 when the value > T) "
                "or another --metric",
            )
            continue
        extras = {
            "task": task,
            "doc_id": doc_id,
            "filter": obj.get("filter"),
            "doc_hash": obj["doc_hash"],
            "prompt_hash": obj.get("prompt_hash"),
            "metrics": {
                m: obj.get(m) for m in obj.get("metrics") or [metric] if isinstance(m, str)
            },
        }
        for j, (text, v) in enumerate(zip(texts, floats, strict=True)):
            seed = offsets.get(qid, 0) + counts[qid]
            counts[qid] += 1
            text, n_tok = strip_special(text)
            n_stripped += n_tok
            if not text.strip():
                if opts.skip_empty_output:
                    n_empty += 1
                    continue  # its seed stays used: the others keep their index
                err(loc, key, f"response {j + 1} is empty (pass --skip-empty-output)")
                continue
            reward = int(v > opts.metric_threshold) if opts.metric_threshold is not None else int(v)
            rows.append(
                {
                    "trajectory_id": _trajectory_id(
                        opts.run, opts.model, opts.step, qid, seed, opts.train_seed
                    ),
                    "question_id": qid,
                    "text": text,
                    "reward": reward,
                    "run": opts.run,
                    "model": opts.model,
                    "step": opts.step,
                    "seed": seed,
                    "train_seed": opts.train_seed,
                    "question": question,
                    "ground_truth": str(obj["target"]),
                    "reward_extras": json.dumps(
                        {**extras, "response": j}, ensure_ascii=False, sort_keys=True, default=str
                    ),
                }
            )
            locs.append(loc)
    if errors:
        raise RecordValidationError(errors, truncated=len(errors) >= max_errors)
    if not rows:
        raise RecordValidationError(
            [RecordError(source, "file", "filter", f"no lines for filter {flt!r}")]
        )
    for qid, c in counts.items():
        offsets[qid] = offsets.get(qid, 0) + c
    labels = {
        "text": source_label(opts.responses, "text"),
        "question": source_label(
            f"doc.{opts.question_key}" if opts.question_key else "arguments", "question"
        ),
        "question_id": source_label(
            f"doc.{opts.question_key}" if opts.question_key else "doc_hash", "question_id"
        ),
        "reward": source_label(metric, "reward"),
        "ground_truth": source_label("target", "ground_truth"),
        "run": "--run",
        "model": "--model",
        "train_seed": "--train-seed",
    }
    try:
        batch = records_from_rows(source, rows, locs, max_errors=max_errors)
    except RecordValidationError as exc:
        raise relabel(exc, labels) from None
    shown = sorted(seen_values)
    batch.extra["score_rule"] = {
        "source": metric,
        "threshold": opts.metric_threshold,
        "score_values": shown if len(shown) <= 12 else [*shown[:6], "…", *shown[-5:]],
        "filter": flt,
        "responses": opts.responses,
    }
    batch.extra["n_special_stripped"] = n_stripped
    batch.extra["n_empty_skipped"] = n_empty
    return batch
