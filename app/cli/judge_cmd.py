"""``rcea judge ...`` (placeholder: being built)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the ``judge`` command group to ``app``."""
