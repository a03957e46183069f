"""What the importers share: content hashes that include the import options, and errors
that name the source column a record field came from."""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any

from rcea.audits.inputs import open_input
from rcea.pipeline.importers.chat import TEMPLATES, compile_question_regex
from rcea.pipeline.records import RecordError, RecordValidationError


def import_digest(path: Path, kind: str, options: dict[str, Any]) -> str:
    """SHA-256 of the file's bytes AND the options that shape its records: importing the
    same file the same way again is a no-op; importing it under another ``--run`` is not."""
    h = hashlib.sha256()
    h.update(f"rcea-import:{kind}:v1\n".encode())
    h.update(json.dumps(options, sort_keys=True, default=str).encode())
    h.update(b"\n")
    with open_input(path) as fh:  # a regular file: a FIFO would hang, /dev/zero never end
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def relabel(exc: RecordValidationError, labels: dict[str, str]) -> RecordValidationError:
    """The same errors with each record field named as its source (``labels[field]``)."""
    errors = [
        RecordError(
            e.source, e.location, labels.get(e.field, e.field) if e.field else None, e.message
        )
        for e in exc.errors
    ]
    return RecordValidationError(errors, truncated=exc.truncated)


def source_label(column: str, field: str) -> str:
    """``score (reward)``: the source column, then the record field it fills."""
    return field if column == field else f"{column} ({field})"


def check_train_seed(train_seed: int | None) -> None:
    """``--train-seed``: the training seed (replicate) of the imported run, an integer >= 0
    or none (docs/estimators.md item 17); ``ValueError`` naming the option otherwise. It is
    not the decoding ``seed`` each record carries."""
    if train_seed is None:
        return
    if isinstance(train_seed, bool) or not isinstance(train_seed, int) or train_seed < 0:
        raise ValueError(f"--train-seed must be an integer >= 0, got {train_seed!r}")
    if train_seed > 2**31 - 1:
        raise ValueError(f"--train-seed is out of range: {train_seed} (at most 2147483647)")


def digest_without_unset_train_seed(options: dict[str, Any]) -> dict[str, Any]:
    """An import's options as hashed: without ``train_seed`` when none was given, so files
    imported before the option existed hash as they did then (a re-import is a no-op)."""
    if options.get("train_seed") is None:
        options = {k: v for k, v in options.items() if k != "train_seed"}
    return options


def check_rollout_options(
    *,
    run: str,
    model: str,
    chat_template: str,
    reward_threshold: float | None,
    question_regex: str | None,
) -> None:
    """The options every rollout importer (verl, TRL) shares: provenance names, the chat
    template, a finite threshold and a compilable question regex; ``ValueError`` naming
    the option otherwise."""
    for name, value in (("run", run), ("model", model)):
        if not value.strip():
            raise ValueError(f"--{name} must be a non-empty name")
    if chat_template not in TEMPLATES:
        raise ValueError(
            f"unknown --chat-template {chat_template!r}: use one of {', '.join(TEMPLATES)}"
        )
    if reward_threshold is not None and not math.isfinite(reward_threshold):
        raise ValueError("--reward-threshold must be a finite number")
    if question_regex is not None:
        compile_question_regex(question_regex)


def numbered_files(directory: Path, pattern: re.Pattern[str]) -> tuple[list[Path], list[Path]]:
    """The files of ``directory`` whose name ``pattern`` matches, ordered by the number in
    its first group (a step), and the other files there (reported, never read)."""
    found: list[tuple[int, Path]] = []
    other: list[Path] = []
    try:
        entries = sorted(directory.iterdir())
    except OSError as exc:  # a folder this process may not list: one line naming it
        why = f"cannot list: {(exc.strerror or str(exc)).lower()}"
        raise RecordValidationError([RecordError(str(directory), "directory", None, why)]) from None
    for p in entries:
        m = pattern.match(p.name)
        if m and p.is_file():
            found.append((int(m.group(1)), p))
        elif not p.name.startswith("."):
            other.append(p)
    return [p for _, p in sorted(found)], other
