"""``rcea view``: the Streamlit view, and its researcher accounts
(``rcea view add-researcher|remove-researcher|researchers``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from rcea.app.cli.common import emit, fail, settings
from rcea.study.logins import (
    LoginError,
    add_researcher,
    logins_path,
    remove_researcher,
    researchers,
)
from rcea.study.settings import is_loopback

MAIN = Path(__file__).resolve().parents[1] / "view" / "main.py"
#: what ``streamlit run`` serves: main.py as an st.App that closes /_stcore/metrics
SERVER = MAIN.with_name("server.py")


def streamlit_command(host: str, port: int, n_boot: int) -> list[str]:
    """``streamlit run`` of the view's entry script; arguments after ``--`` reach it."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(SERVER),
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
        "--client.showErrorDetails",
        "none",  # no traceback for anyone browsing (errors go to the log)
        "--",
        "--n-boot",
        str(n_boot),
    ]


view_app = typer.Typer(
    rich_markup_mode=None,
    help="Serve the Streamlit view (login required); manage researcher accounts.",
    invoke_without_command=True,
    no_args_is_help=False,
)


@view_app.callback()
def view(
    ctx: typer.Context,
    host: str = typer.Option("127.0.0.1", help="bind address (loopback by default)"),
    port: int = typer.Option(None, help="port (default RCEA_VIEW_PORT)"),
    n_boot: int = typer.Option(
        1000,
        "--n-boot",
        min=100,
        max=10_000,
        help="default bootstrap resamples of the interactive CIs (changeable in the sidebar)",
    ),
) -> None:
    """Serve the Streamlit view of the store: Overview, Entropy, Modes, Covariance, Audit.

    Researchers log in first (RCEA_VIEW_AUTH: password, the default, against
    <data_dir>/researchers.json; oidc; or none, refused unless HOST is loopback)."""
    if ctx.invoked_subcommand is not None:
        return
    cfg = settings()
    port = port or cfg.view_port
    if cfg.view_auth == "none" and not is_loopback(host):
        fail(
            f"RCEA_VIEW_AUTH=none serves the view without login: refused on {host} (use "
            "loopback, or RCEA_VIEW_AUTH=password with `rcea view add-researcher NAME`)"
        )
    if cfg.view_auth == "password" and not researchers(logins_path(cfg)):
        typer.echo(
            "no researcher account yet: `rcea view add-researcher NAME` creates one",
            err=True,
        )
    typer.echo(f"view on http://{host}:{port}")
    # --n-boot reaches the script after ``--`` and, for the st.App server, as a variable
    env = {**os.environ, "PYTHONPATH": str(MAIN.parents[3]), "RCEA_VIEW_N_BOOT": str(n_boot)}
    cmd = streamlit_command(host, port, n_boot)
    # Replace this process with Streamlit, so that stopping `rcea view` stops the server
    # (a child process would outlive a terminated parent).
    os.execve(cmd[0], cmd, env)


def _password(password_stdin: bool) -> str:
    if password_stdin:
        return sys.stdin.readline().rstrip("\n")
    return str(typer.prompt("password", hide_input=True, confirmation_prompt=True))


@view_app.command("add-researcher")
def add_researcher_cmd(
    name: str = typer.Argument(..., help="the name decisions are recorded under"),
    reset: bool = typer.Option(False, "--reset", help="change an existing account's password"),
    password_stdin: bool = typer.Option(
        False, "--password-stdin", help="read the password from the first line of stdin"
    ),
) -> None:
    """Create a researcher account of the view (scrypt hash in <data_dir>/researchers.json,
    mode 0600); the password is prompted for twice."""

    path = logins_path(settings())
    try:
        add_researcher(path, name, _password(password_stdin), replace=reset)
    except LoginError as exc:
        fail(str(exc))
    typer.echo(f"researcher {name.strip()!r} {'reset' if reset else 'added'} in {path}")


@view_app.command("remove-researcher")
def remove_researcher_cmd(name: str = typer.Argument(...)) -> None:
    """Delete a researcher account of the view."""

    try:
        remove_researcher(logins_path(settings()), name)
    except LoginError as exc:
        fail(str(exc))
    typer.echo(f"researcher {name!r} removed")


@view_app.command("researchers")
def researchers_cmd(as_json: bool = typer.Option(False, "--json")) -> None:
    """List the researcher accounts of the view (names only)."""

    names = researchers(logins_path(settings()))
    emit(names, as_json, lambda: "\n".join(names) if names else "no researcher account")


def register(app: typer.Typer) -> None:
    app.add_typer(view_app, name="view")
