"""Small helpers the tests need over the product's own API (they served no product code,
so they live here): a one-off leak scan, reading a training run's curve file, the store's
table names."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import inspect
from sqlalchemy.engine import Engine

from rcea.annotation.tasks import LeakScanner


def scan_for_leaks(
    sent: Iterable[Any],
    forbidden: Iterable[str],
    *,
    forbidden_keys: Iterable[str] = (),
    forbidden_exact: Iterable[str] = (),
) -> list[str]:
    """One-off :class:`LeakScanner` scan (see there for the matching rules)."""
    return LeakScanner(
        forbidden, forbidden_keys=forbidden_keys, forbidden_exact=forbidden_exact
    ).scan(sent)


def read_curves(path: str | Path) -> list[dict[str, Any]]:
    with Path(path).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def table_names(engine: Engine) -> list[str]:
    return sorted(inspect(engine).get_table_names())
