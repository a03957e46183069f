"""``rcea view``: the Streamlit view."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from app.cli.common import settings

OVERVIEW = Path(__file__).resolve().parents[1] / "view" / "overview.py"


def streamlit_command(host: str, port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(OVERVIEW),
        "--server.headless",
        "true",
        "--server.address",
        host,
        "--server.port",
        str(port),
        "--browser.gatherUsageStats",
        "false",
        "--global.developmentMode",
        "false",
    ]


def view(
    host: str = typer.Option("127.0.0.1", help="bind address"),
    port: int = typer.Option(None, help="port (default RCEA_VIEW_PORT)"),
) -> None:
    """Serve the Streamlit view of the store."""
    cfg = settings()
    port = port or cfg.view_port
    typer.echo(f"view on http://{host}:{port}")
    env = {**os.environ, "PYTHONPATH": str(OVERVIEW.parents[2])}
    cmd = streamlit_command(host, port)
    # Replace this process with Streamlit, so that stopping `rcea view` stops the server
    # (a child process would outlive a terminated parent).
    os.execve(cmd[0], cmd, env)


def register(app: typer.Typer) -> None:
    app.command()(view)
