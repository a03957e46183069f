"""TRL ``GRPOTrainer(log_completions=True)`` completion logs → interchange records.

TRL writes ``OUTPUT_DIR/completions/completions_{global_step:05d}.parquet`` at every logging
step: one row per completion of the latest generation batch, with the columns ``step``,
``prompt`` (the prompt text, or the chat messages ``[{"role", "content"}, …]`` of a
conversational dataset), ``completion`` (text, or the assistant messages), one column per
reward function (named after it), any extra columns the reward functions logged, and
``advantage``. The logs carry no run or model name, no question id and no seed, so, as for
verl (:mod:`rcea.pipeline.importers.verl`):

* ``run`` and ``model`` are given by the caller;
* the question is the prompt's last user message (chat messages), or the prompt text with
  its chat template stripped (:mod:`rcea.pipeline.importers.chat`); ``question_id`` is
  ``q-`` + the first 16 hex digits of SHA-256 of the question — the same id a verl dump of
  the same question gets;
* prompt groups are rebuilt from identical questions within a step; ``seed`` is the
  completion's index within its group in row order;
* the outcome follows an explicit rule (:func:`trl_reward_rule`): the reward column named
  by ``reward_column`` (needed when the file has more than one numeric column besides
  ``step`` and ``advantage``), whose values must be 0/1 unless ``reward_threshold`` is
  given (R = 1 when value > threshold); every reward column and ``advantage`` are kept in
  ``reward_extras``;
* a completion given as chat messages must be a single assistant message (multi-turn
  completions are refused, naming the row); trailing special tokens are stripped, counted;
  an empty completion is refused unless ``skip_empty_output``;
* TRL keeps the last generation batch in its log buffers, so two logging steps between two
  generations write the same rows: a file whose rows equal the previous file's is a
  re-log, skipped and counted (``n_relogged``), never imported twice under two steps;
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

from rcea.pipeline.importers.chat import compile_question_regex, extract_question
from rcea.pipeline.importers.common import (
    check_rollout_options,
    check_train_seed,
    digest_without_unset_train_seed,
    numbered_files,
    relabel,
    source_label,
)
from rcea.pipeline.importers.verl import _trajectory_id, question_id_for, strip_special
from rcea.pipeline.records import (
    MAX_ERRORS,
    RecordBatch,
    RecordError,
    RecordValidationError,
    read_parquet_table,
    records_from_rows,
)

COMPLETIONS_FILE = re.compile(r"\Acompletions_(\d+)\.parquet\Z")
#: columns of TRL's completion log that are not reward columns
BASE_COLUMNS = ("step", "prompt", "completion", "advantage")


@dataclass(frozen=True)
class TrlOptions:
    run: str
    model: str
    reward_column: str | None = None
    reward_threshold: float | None = None
    chat_template: str = "auto"
    question_regex: str | None = None
    skip_empty_output: bool = False

    train_seed: int | None = None

    def __post_init__(self) -> None:
        check_train_seed(self.train_seed)
        check_rollout_options(
            run=self.run,
            model=self.model,
            chat_template=self.chat_template,
            reward_threshold=self.reward_threshold,
            question_regex=self.question_regex,
        )
        if self.reward_column is not None and not self.reward_column.strip():
            raise ValueError("--reward-column must be a non-empty column name")

    def digest_options(self) -> dict[str, Any]:
        return digest_without_unset_train_seed(asdict(self))


def completion_files(directory: Path) -> tuple[list[Path], list[Path]]:
    """The ``completions_{step}.parquet`` files of a TRL output dir (or of its
    ``completions/`` folder, or one such file) in step order, and the other files there."""
    if not directory.exists():
        raise FileNotFoundError(f"{directory}: no such file or directory")
    if directory.is_file():
        return [directory], []
    if (directory / "completions").is_dir():
        directory = directory / "completions"
    return numbered_files(directory, COMPLETIONS_FILE)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


class RewardRuleError(ValueError):
    """The file's reward columns do not say which one is the outcome, or how."""


def trl_reward_rule(columns: dict[str, list[Any]], opts: TrlOptions) -> tuple[str, dict[str, Any]]:
    """The reward column and the recorded rule ``{"source", "threshold", "score_values"}``
    that turn a file's rows into R ∈ {0, 1}."""
    numeric = [
        name
        for name, values in columns.items()
        if name not in BASE_COLUMNS
        and values
        and all(v is None or _is_number(v) or isinstance(v, bool) for v in values)
    ]
    if opts.reward_column is not None:
        if opts.reward_column not in columns:
            raise RewardRuleError(
                f"--reward-column {opts.reward_column!r} is not a column (reward columns: "
                + (", ".join(numeric) or "none")
                + ")"
            )
        name = opts.reward_column
    elif len(numeric) == 1:
        name = numeric[0]
    else:
        raise RewardRuleError(
            f"{len(numeric)} reward columns ({', '.join(numeric) or 'none'}): name the one that "
            "is the verifier outcome with --reward-column"
        )
    values = sorted({float(v) for v in columns[name] if _is_number(v) or isinstance(v, bool)})
    shown = values if len(values) <= 12 else [*values[:6], "…", *values[-5:]]
    if opts.reward_threshold is None and not all(v in (0.0, 1.0) for v in values):
        raise RewardRuleError(
            f"reward column {name!r} is not only 0 and 1 (values seen: "
            + ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in shown)
            + "): pass --reward-threshold T (R = 1 when the value > T, e.g. 0 for a ±1 "
            "reward, 0.5 for partial credit) or another --reward-column"
        )
    return name, {"source": name, "threshold": opts.reward_threshold, "score_values": shown}


def _question_of(prompt: Any, opts: TrlOptions, regex: Any) -> tuple[str | None, str]:
    """(question text, or None, and why not)."""
    if isinstance(prompt, str):
        if not prompt.strip():
            return None, "must be a non-empty string or chat messages"
        q = extract_question(prompt, template=opts.chat_template, regex=regex)
        if q is None:
            return None, (
                "does not match --question-regex"
                if regex is not None
                else f"is not a {opts.chat_template} chat-templated prompt"
            )
        return q, ""
    if isinstance(prompt, list) and all(isinstance(m, dict) for m in prompt):
        users = [m.get("content") for m in prompt if m.get("role") == "user"]
        if users and isinstance(users[-1], str) and users[-1].strip():
            return users[-1], ""
        return None, "chat messages without a user message with text content"
    return None, f"must be a string or chat messages, got {type(prompt).__name__}"


def _completion_text(completion: Any) -> tuple[str | None, str]:
    if isinstance(completion, str):
        return completion, ""
    if isinstance(completion, list) and all(isinstance(m, dict) for m in completion):
        if len(completion) == 1 and completion[0].get("role") == "assistant":
            content = completion[0].get("content")
            if isinstance(content, str):
                return content, ""
        return None, (
            f"{len(completion)} message(s): only a single assistant message is imported "
            "(multi-turn completions are not supported)"
        )
    return None, f"must be a string or chat messages, got {type(completion).__name__}"


def read_trl_columns(path: Path) -> dict[str, list[Any]]:
    """The parquet file's columns as Python lists, read the one hardened way every input
    is (:func:`rcea.pipeline.records.read_parquet_table`: a regular readable file, each
    column named once; anything pyarrow cannot read is one named error)."""
    table = read_parquet_table(path)
    try:
        return {n: table.column(n).to_pylist() for n in table.column_names}
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many types for bad columns
        raise RecordValidationError(
            [RecordError(str(path), "file", None, f"cannot read Parquet: {exc}")]
        ) from None


def read_trl_file(
    path: Path,
    opts: TrlOptions,
    *,
    previous: dict[str, list[Any]] | None = None,
    max_errors: int = MAX_ERRORS,
) -> RecordBatch | None:
    """One completions file → validated records; ``None`` when its rows are exactly the
    ``previous`` file's (a re-log of the same generation batch). ``RecordValidationError``
    names every bad row as ``FILE:row N: COLUMN: message``."""
    source = str(path)
    cols = read_trl_columns(path)
    errors: list[RecordError] = []

    def err(loc: str, key: str | None, msg: str) -> None:
        if len(errors) < max_errors:
            errors.append(RecordError(source, loc, key, msg))

    for name in ("prompt", "completion"):
        if name not in cols:
            err(
                "file",
                name,
                f"missing column (TRL's completion logs have {', '.join(BASE_COLUMNS)})",
            )
    if errors:
        raise RecordValidationError(errors)
    if previous is not None and _same_rows(cols, previous):
        return None
    try:
        reward_name, rule = trl_reward_rule(cols, opts)
    except RewardRuleError as exc:
        raise RecordValidationError([RecordError(source, "file", "reward", str(exc))]) from None
    m = COMPLETIONS_FILE.match(path.name)
    file_step = int(m.group(1)) if m else None
    regex = compile_question_regex(opts.question_regex) if opts.question_regex else None
    n = len(cols["prompt"])
    steps = cols.get("step") or [file_step] * n
    extra_cols = [c for c in cols if c not in ("step", "prompt", "completion")]
    rows: list[dict[str, Any]] = []
    locs: list[str] = []
    group_size: dict[tuple[int, str], int] = defaultdict(int)
    n_stripped = n_empty = 0
    for i in range(n):
        if len(errors) >= max_errors:
            break
        loc = f"row {i + 1}"
        bad = len(errors)
        step = steps[i]
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            err(loc, "step", f"must be an integer >= 0, got {step!r}")
        elif file_step is not None and step != file_step:
            err(loc, "step", f"is {step} but the file name says step {file_step}")
        question, why = _question_of(cols["prompt"][i], opts, regex)
        if question is None:
            err(loc, "prompt", why)
        text, why = _completion_text(cols["completion"][i])
        if text is None:
            err(loc, "completion", why)
        value = cols[reward_name][i]
        if not (_is_number(value) or isinstance(value, bool)):
            err(loc, reward_name, f"must be a number, got {value!r}")
        if len(errors) > bad or question is None or text is None:
            continue
        qid = question_id_for(question)
        seed = group_size[(step, qid)]
        group_size[(step, qid)] += 1
        text, n_tok = strip_special(text)
        n_stripped += n_tok
        if not text.strip():
            if opts.skip_empty_output:
                n_empty += 1
                continue  # its seed stays used: the others keep their index
            err(loc, "completion", "empty completion (pass --skip-empty-output to leave it out)")
            continue
        v = float(value)
        reward = int(v > opts.reward_threshold) if opts.reward_threshold is not None else int(v)
        extras = {c: cols[c][i] for c in extra_cols}
        rows.append(
            {
                "trajectory_id": _trajectory_id(
                    opts.run, opts.model, step, qid, seed, opts.train_seed
                ),
                "question_id": qid,
                "text": text,
                "reward": reward,
                "run": opts.run,
                "model": opts.model,
                "step": step,
                "seed": seed,
                "train_seed": opts.train_seed,
                "question": question,
                "reward_extras": json.dumps(
                    extras, ensure_ascii=False, sort_keys=True, default=str
                ),
            }
        )
        locs.append(loc)
    if errors:
        raise RecordValidationError(errors, truncated=len(errors) >= max_errors)
    labels = {
        "text": source_label("completion", "text"),
        "question": source_label("prompt", "question"),
        "question_id": source_label("prompt", "question_id"),
        "reward": source_label(reward_name, "reward"),
        "run": "--run",
        "model": "--model",
        "train_seed": "--train-seed",
    }
    try:
        batch = records_from_rows(source, rows, locs, max_errors=max_errors)
    except RecordValidationError as exc:
        raise relabel(exc, labels) from None
    batch.extra["score_rule"] = rule
    batch.extra["n_special_stripped"] = n_stripped
    batch.extra["n_empty_skipped"] = n_empty
    batch.extra["columns"] = cols
    return batch


def _same_rows(a: dict[str, list[Any]], b: dict[str, list[Any]]) -> bool:
    keys = set(a) - {"step"}
    return keys == set(b) - {"step"} and all(a[k] == b[k] for k in keys)
