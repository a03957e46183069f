"""What the importers share: content hashes that include the import options, and errors
that name the source column a record field came from."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from rcea.audits.inputs import open_input
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
