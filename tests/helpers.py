"""Test helpers shared across the test tree."""

from __future__ import annotations

import json
import socket
from functools import lru_cache
from pathlib import Path
from typing import Any


@lru_cache(maxsize=4)
def postgres_unavailable_reason(url: str) -> str | None:
    """None when PostgreSQL answers at ``url``, else a sentence saying why not."""
    import sqlalchemy as sa

    try:
        eng = sa.create_engine(url, connect_args={"connect_timeout": 3})
        with eng.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        eng.dispose()
    except Exception as exc:  # noqa: BLE001
        return f"no PostgreSQL server answers at {url}: {type(exc).__name__}: {exc}"[:300]
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_record(i: int = 0, **overrides: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "trajectory_id": f"t{i:05d}",
        "question_id": f"q{i % 3}",
        "text": f"2+3 = 5\n\\boxed{{{i}}}",
        "reward": i % 2,
        "run": "grpo",
        "model": "tiny",
        "step": 0,
        "seed": i,
    }
    rec.update(overrides)
    return rec


def write_jsonl(path: Path, records: list[dict[str, Any]] | list[str]) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for rec in records:
            fh.write((rec if isinstance(rec, str) else json.dumps(rec)) + "\n")
    return path
