"""Content hash of a frozen automatic partition (trajectory → mode or uncertain)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable


def partition_hash(assignments: Iterable[tuple[str, str, str | None]]) -> str:
    """SHA-256 of the canonical JSON of sorted ``(question_id, trajectory_id, mode)``
    triples (``mode`` None = uncertain). Order of the input does not matter."""
    rows = sorted((str(q), str(t), None if m is None else str(m)) for q, t, m in assignments)
    seen: set[str] = set()
    for _, t, _ in rows:
        if t in seen:
            raise ValueError(f"trajectory {t!r} is assigned twice")
        seen.add(t)
    text = json.dumps(rows, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
