"""``rcea labelstudio start|stop|status|add-annotator``: the managed Label Studio server.

The server URL (and so its port) comes from ``RCEA_LABELSTUDIO_URL``; its data, log, pid file
and generated admin credentials live in ``<data_dir>/labelstudio``. The admin password and API
token are never printed; an annotator's e-mail and password are, since they are meant to be
handed to that person.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, NoReturn

import typer

from app.cli.common import JSON_OPTION, fail, print_json, settings

if TYPE_CHECKING:
    from annotation.server import LabelStudioServer

labelstudio_app = typer.Typer(
    help="The Label Studio server for blinded human annotation.", no_args_is_help=True
)

NOT_RUNNING = 3  # exit code of `status` when the server is down (LSB convention)


def _server(as_json: bool) -> LabelStudioServer:
    from annotation.server import LabelStudioError, server_from_settings

    try:
        return server_from_settings(settings())
    except LabelStudioError as exc:
        _fail(exc, as_json)


def _fail(exc: Exception, as_json: bool) -> NoReturn:
    fail(str(exc), as_json=as_json)


def _credentials_note(server: LabelStudioServer) -> str:
    cfg = settings()
    if cfg.labelstudio_password is not None and cfg.labelstudio_token is not None:
        return "admin password and API token: from RCEA_LABELSTUDIO_PASSWORD / _TOKEN"
    return f"admin password and API token: see {server.credentials_file}"


@labelstudio_app.command("start")
def start(
    timeout: float = typer.Option(300.0, help="seconds to wait for the server to be healthy"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Start the server in the background (or reuse ours if it runs); wait until healthy.

    The first start of a data dir sets up its database and takes a minute or two."""
    from annotation.server import LabelStudioError

    server = _server(as_json)
    try:
        status = server.start(timeout=timeout)
    except LabelStudioError as exc:
        _fail(exc, as_json)
    if as_json:
        print_json({"ok": True, **status.to_dict(), "admin": server.username})
        return
    typer.echo(f"Label Studio running at {status.url} (pid {status.pid})")
    typer.echo(f"admin login: {server.username}; {_credentials_note(server)}")
    typer.echo(f"log: {status.log_path}")


@labelstudio_app.command("stop")
def stop(as_json: bool = JSON_OPTION) -> None:
    """Stop the server recorded in <data_dir>/labelstudio/server.pid (nothing else)."""
    server = _server(as_json)
    pid = server.status().pid
    stopped = server.stop()
    if as_json:
        print_json({"ok": True, "stopped": stopped, "pid": pid if stopped else None})
    elif stopped:
        typer.echo(f"stopped Label Studio (pid {pid})")
    else:
        typer.echo("Label Studio was not running")


@labelstudio_app.command("status")
def status(as_json: bool = JSON_OPTION) -> None:
    """Show whether our server runs and answers; exit code 3 when it does not."""
    st = _server(as_json).status()
    if as_json:
        print_json({"ok": True, **st.to_dict()})
    elif st.running:
        health = "healthy" if st.healthy else "NOT answering /health/"
        typer.echo(f"running at {st.url} (pid {st.pid}), {health}; log: {st.log_path}")
    else:
        other = " (but something else answers there)" if st.healthy else ""
        typer.echo(f"not running{other}; `rcea labelstudio start` starts it at {st.url}")
    if not (st.running and st.healthy):
        raise typer.Exit(NOT_RUNNING)


@labelstudio_app.command("add-annotator")
def add_annotator(
    email: str = typer.Argument(..., help="the annotator's e-mail (their login)"),
    password: str = typer.Option(
        None, help="login password (default: generated); for an existing account: reset to it"
    ),
    first_name: str = typer.Option("", help="shown in Label Studio"),
    last_name: str = typer.Option("", help="shown in Label Studio"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Create an annotator account that can log in to the web UI; print the login.

    An existing account is left as it is unless --password is given, which resets it.
    """
    from annotation.accounts import AccountError, create_annotator, set_password
    from annotation.server import LabelStudioError

    server = _server(as_json)
    if not server.status().running:
        from app.cli.common import labelstudio_down

        fail(labelstudio_down(settings(), "not running"), code=3, as_json=as_json)
    new_password = password or secrets.token_urlsafe(12)
    try:
        creds = server.credentials()
        annotator = create_annotator(
            server.url, creds.token, email, new_password, first_name, last_name
        )
        if not annotator.created and password:
            set_password(server, annotator.email, password)
    except (AccountError, LabelStudioError) as exc:
        _fail(exc, as_json)
    password_set = annotator.created or bool(password)
    shown = new_password if password_set else None
    login_url = f"{server.url}/user/login/"
    if as_json:
        print_json(
            {
                "ok": True,
                "id": annotator.id,
                "email": annotator.email,
                "created": annotator.created,
                "password_set": password_set,
                "password": shown,
                "login_url": login_url,
            }
        )
        return
    verb = "created" if annotator.created else "exists"
    typer.echo(f"annotator {annotator.email} (id {annotator.id}) {verb}")
    typer.echo(f"  log in at: {login_url}")
    typer.echo(f"  e-mail:    {annotator.email}")
    if shown:
        typer.echo(f"  password:  {shown}")
    else:
        typer.echo("  password:  unchanged (pass --password to reset it)")


def register(app: typer.Typer) -> None:
    app.add_typer(labelstudio_app, name="labelstudio")
