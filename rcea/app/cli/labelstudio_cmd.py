"""``rcea labelstudio start|stop|status|add-annotator``: one Label Studio server per person.

Every annotator and adjudicator labels on a server of their own (Label Studio Community
does not isolate members or organisations; see :mod:`rcea.annotation.people`). rcea runs those
servers on loopback, on the ports after the base port of ``RCEA_LABELSTUDIO_URL``, with
data, logs and generated admin credentials under ``<data_dir>/labelstudio/people/``; or
talks to servers run elsewhere (``add-annotator --server-url``). Admin passwords and
tokens are never printed; an annotator's e-mail and password are, since they are meant to
be handed to that person.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, NoReturn

import typer

from rcea.annotation.accounts import AccountError, create_annotator, set_password
from rcea.annotation.people import people_from_settings
from rcea.annotation.server import LabelStudioError
from rcea.app.cli.common import fail, print_json, settings
from rcea.app.cli.options import JSON_OPTION

if TYPE_CHECKING:
    from rcea.annotation.people import People, Person

labelstudio_app = typer.Typer(
    rich_markup_mode=None,
    help="The Label Studio servers (one per person) for blinded human annotation.",
    no_args_is_help=True,
)

NOT_RUNNING = 3  # exit code of `status` when a server is down (LSB convention)
PEOPLE_ARG = typer.Argument(None, help="e-mails (default: every registered person)")


def _people() -> People:

    return people_from_settings(settings())


def _fail(exc: Exception, as_json: bool) -> NoReturn:
    fail(str(exc), as_json=as_json)


def _chosen(people: People, emails: list[str] | None, as_json: bool) -> list[Person]:

    try:
        chosen = [people.require(e) for e in emails] if emails else people.all()
    except LabelStudioError as exc:
        _fail(exc, as_json)
    return chosen


@labelstudio_app.command("start")
def start(
    emails: list[str] = PEOPLE_ARG,
    timeout: float = typer.Option(300.0, help="seconds to wait for each server"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Start the servers rcea runs (or reuse running ones); wait until each is healthy.

    The first start of a person's server sets up its database (about 20 s to a minute)."""

    people = _people()
    chosen = _chosen(people, emails, as_json)
    if not chosen and not as_json:
        typer.echo("no people yet: `rcea labelstudio add-annotator EMAIL` adds one (and a server)")
    out = []
    for person in chosen:
        try:
            people.start(person, timeout=timeout)
        except LabelStudioError as exc:
            _fail(exc, as_json)
        st = people.status(person)
        out.append(st.to_dict())
        if not as_json:
            typer.echo(f"{person.email}: Label Studio at {person.url} (pid {st.to_dict()['pid']})")
    if as_json:
        print_json({"ok": True, "servers": out})


@labelstudio_app.command("stop")
def stop(emails: list[str] = PEOPLE_ARG, as_json: bool = JSON_OPTION) -> None:
    """Stop the servers rcea started (nothing else; external servers are left alone)."""
    people = _people()
    stopped = []
    for person in _chosen(people, emails, as_json):
        if people.stop(person):
            stopped.append(person.email)
            if not as_json:
                typer.echo(f"stopped {person.email}'s Label Studio ({person.url})")
    if as_json:
        print_json({"ok": True, "stopped": stopped})
    elif not stopped:
        typer.echo("no Label Studio of rcea's was running")


@labelstudio_app.command("status")
def status(emails: list[str] = PEOPLE_ARG, as_json: bool = JSON_OPTION) -> None:
    """Every person's server: e-mail, URL, pid, health; exit code 3 when one is down."""
    people = _people()
    rows = [people.status(p) for p in _chosen(people, emails, as_json)]
    if as_json:
        print_json({"ok": True, "servers": [r.to_dict() for r in rows]})
    else:
        if not rows:
            typer.echo("no people yet: `rcea labelstudio add-annotator EMAIL` adds one")
        for r in rows:
            d = r.to_dict()
            kind = "rcea" if r.person.managed else "external"
            health = "healthy" if r.healthy else "NOT answering"
            typer.echo(f"{r.person.email}: {r.person.url} ({kind}, pid {d['pid']}), {health}")
    if any(not r.healthy for r in rows):
        raise typer.Exit(NOT_RUNNING)


@labelstudio_app.command("add-annotator")
def add_annotator(
    email: str = typer.Argument(..., help="the person's e-mail (their login)"),
    password: str = typer.Option(
        None, help="login password (default: generated); for an existing account: reset to it"
    ),
    server_url: str = typer.Option(
        None, help="use this person's server run elsewhere (e.g. a compose service)"
    ),
    server_token: str = typer.Option(
        None, envvar="RCEA_PERSON_SERVER_TOKEN", help="admin API token of --server-url"
    ),
    first_name: str = typer.Option("", help="shown in Label Studio"),
    last_name: str = typer.Option("", help="shown in Label Studio"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Give a person (annotator or adjudicator) their own Label Studio server and an
    account that can log in to its web UI; print the login.

    Without --server-url rcea runs the server (started now). An existing account is left
    as it is unless --password is given, which resets it."""

    people = _people()
    new_password = password or secrets.token_urlsafe(12)
    try:
        person = people.add(email, url=server_url, token=server_token)
        people.start(person)
        annotator = create_annotator(
            person.url, people.admin_token(person), email, new_password, first_name, last_name
        )
        if not annotator.created and password:
            if not person.managed:
                raise AccountError(
                    f"{email} exists on {person.url}, which rcea does not run: reset the "
                    "password there"
                )
            set_password(people.server(person), annotator.email, password)
    except (AccountError, LabelStudioError) as exc:
        _fail(exc, as_json)
    password_set = annotator.created or bool(password)
    shown = new_password if password_set else None
    login_url = f"{person.url}/user/login/"
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
                "server": person.public(),
            }
        )
        return
    verb = "created" if annotator.created else "exists"
    typer.echo(f"{annotator.email} (id {annotator.id}) {verb}, on their own server {person.url}")
    typer.echo(f"  log in at: {login_url}")
    typer.echo(f"  e-mail:    {annotator.email}")
    if shown:
        typer.echo(f"  password:  {shown}")
    else:
        typer.echo("  password:  unchanged (pass --password to reset it)")


def register(app: typer.Typer) -> None:
    app.add_typer(labelstudio_app, name="labelstudio")
