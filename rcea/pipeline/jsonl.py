"""Reading JSONL files of JSON objects with errors that name the file and the line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rcea.audits.inputs import InputError, iter_json_lines


def iter_json_objects(
    path: Path, *, error: type[Exception] = ValueError
) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for every non-blank line of ``path``, read through
    :mod:`rcea.audits.inputs` (a regular file, strict UTF-8, no duplicate key, bounded
    depth); the first problem raises ``error("PATH:line N: …")``."""
    try:
        for lineno, obj in iter_json_lines(path):
            if isinstance(obj, InputError):
                raise error(str(obj))
            if not isinstance(obj, dict):
                raise error(f"{path}:line {lineno}: expected a JSON object")
            yield lineno, obj
    except InputError as exc:
        raise error(str(exc)) from None
