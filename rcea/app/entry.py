"""The ``rcea`` console script. The application's dependencies are the ``app`` extra
(docs/installation.md), so an environment that installed ``rcea-audit`` or
``rcea-audit[live]`` alone — a training environment — has the script but not what the
command line imports. This module imports nothing beyond the standard library until it
knows they are there, so the script answers with one line instead of a traceback."""

from __future__ import annotations

import json
import sys
from importlib.util import find_spec

#: the modules the command line imports at start (all from the ``app`` extra)
APP_MODULES = ("typer", "sqlmodel", "sqlalchemy", "pydantic")

INSTALL_HINT = "pip install 'rcea-audit[app]'"


def missing_app_modules() -> list[str]:
    """The command line's start-up modules this environment lacks."""
    return [m for m in APP_MODULES if find_spec(m) is None]


def main() -> None:
    missing = missing_app_modules()
    if missing:
        message = (
            f"the rcea command line needs the application's dependencies "
            f"({', '.join(missing)} not installed): {INSTALL_HINT}"
        )
        if "--json" in sys.argv[1:]:
            print(json.dumps({"ok": False, "error": message}))
        else:
            print(f"error: {message}", file=sys.stderr)
        sys.exit(1)  # exit_codes.ERROR, not imported: it lives beside typer's modules
    from rcea.app.cli import main as cli_main

    cli_main()
