"""Helpers shared by the command modules: settings, store access, JSON output, errors."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import typer

from app.settings import Settings, get_settings

JSON_OPTION = typer.Option(False, "--json", help="print machine-readable JSON")


def settings() -> Settings:
    return get_settings()


def engine():  # type: ignore[no-untyped-def]
    from app.store import open_store

    return open_store(settings())


def print_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, sort_keys=False, default=str))


def fail(message: str, *, code: int = 1, as_json: bool = False, **extra: Any) -> NoReturn:
    if as_json:
        print_json({"ok": False, "error": message, **extra})
    else:
        typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def is_tty() -> bool:
    return sys.stderr.isatty()
