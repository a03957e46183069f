"""``rcea report ...`` (placeholder: being built)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the ``report`` command group to ``app``."""
