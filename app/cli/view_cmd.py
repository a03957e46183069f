"""``rcea view``: the Streamlit view."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from app.cli.common import settings

MAIN = Path(__file__).resolve().parents[1] / "view" / "main.py"


def streamlit_command(host: str, port: int, n_boot: int) -> list[str]:
    """``streamlit run`` of the view's entry script; arguments after ``--`` reach it."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(MAIN),
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
        "--",
        "--n-boot",
        str(n_boot),
    ]


def view(
    host: str = typer.Option("127.0.0.1", help="bind address"),
    port: int = typer.Option(None, help="port (default RCEA_VIEW_PORT)"),
    n_boot: int = typer.Option(
        1000,
        "--n-boot",
        min=100,
        max=10_000,
        help="default bootstrap resamples of the interactive CIs (changeable in the sidebar)",
    ),
) -> None:
    """Serve the Streamlit view of the store: Overview, Entropy, Modes, Covariance, Audit."""
    cfg = settings()
    port = port or cfg.view_port
    typer.echo(f"view on http://{host}:{port}")
    env = {**os.environ, "PYTHONPATH": str(MAIN.parents[2])}
    cmd = streamlit_command(host, port, n_boot)
    # Replace this process with Streamlit, so that stopping `rcea view` stops the server
    # (a child process would outlive a terminated parent).
    os.execve(cmd[0], cmd, env)


def register(app: typer.Typer) -> None:
    app.command()(view)
