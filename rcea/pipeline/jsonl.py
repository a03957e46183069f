"""Reading JSONL files of JSON objects with errors that name the file and the line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def iter_json_objects(
    path: Path, *, error: type[Exception] = ValueError
) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for every non-blank line of ``path``; the first line that
    is not valid JSON or not a JSON object raises ``error("PATH:line N: …")``."""
    with Path(path).open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise error(f"{path}:line {lineno}: invalid JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise error(f"{path}:line {lineno}: expected a JSON object")
            yield lineno, obj
