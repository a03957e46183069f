"""``rcea labelstudio start|stop|status|add-annotator``: one Label Studio server per person.

Every annotator and adjudicator labels on a server of their own (Label Studio Community
does not isolate members or organisations; see :mod:`rcea.annotation.people`). rcea runs those
servers on loopback, on the ports after the base port of ``RCEA_LABELSTUDIO_URL``, with
data, logs and generated admin credentials under ``<data_dir>/labelstudio/people/``; or
talks to servers run elsewhere (``add-annotator --server-url``). Admin passwords and
tokens are never printed; an annotator's e-mail and password are, since they are meant to
be handed to that person.

With ``--public HOST`` (or ``RCEA_PUBLIC_HOST``) ``start`` also starts the team's REST API
(``rcea serve``) and view (``rcea view``) on loopback (:mod:`rcea.annotation.team_services`;
not when ``RCEA_DOOR_API_URL`` / ``RCEA_DOOR_VIEW_URL`` name servers run elsewhere) and opens
the front door: one nginx with TLS in front of every person's server, the view and the API
(:mod:`rcea.annotation.team_door`, docs/team.md); ``invite`` prints the line to send each
person, ``stop`` closes the door and stops the API, the view and the servers.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer

from rcea.annotation.accounts import AccountError, create_annotator, set_password
from rcea.annotation.frontdoor import API, COMPOSE, LOCAL, VIEW, FrontDoorError
from rcea.annotation.people import people_from_settings
from rcea.annotation.server import LabelStudioError
from rcea.annotation.team_door import (
    DoorSettings,
    check_view_auth,
    configure_door,
    door_of,
    invitation,
    open_door,
    public_url,
    refresh_door,
)
from rcea.annotation.team_services import (
    Service,
    ServiceError,
    service_statuses,
    start_services,
    stop_services,
)
from rcea.app.cli.common import emit, fail, say, settings
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


def _door_settings(
    public: str, port: int | None, bind: str | None, runtime: str = LOCAL
) -> DoorSettings:
    """The door's settings: the options given, else ``RCEA_PUBLIC_*`` / ``RCEA_TLS_*``;
    the view and the API behind it at ``RCEA_DOOR_*_URL``, else on loopback at their
    configured ports."""
    cfg = settings()
    return DoorSettings(
        public_host=public,
        port=port or cfg.public_port,
        bind=bind or cfg.public_bind,
        tls_cert=cfg.tls_cert,
        tls_key=cfg.tls_key,
        view_url=cfg.door_view_url or f"http://127.0.0.1:{cfg.view_port}",
        api_url=cfg.door_api_url or f"http://127.0.0.1:{cfg.api_port}",
        runtime=runtime,
        view_auth=cfg.view_auth,
    )


REPO_ROOT = Path(__file__).resolve().parents[3]
#: the services behind the door, in the order they start (stop: reversed)
SERVICE_NAMES = (API, VIEW)


def _team_services() -> list[Service]:
    """The API and the view rcea runs behind the door: on loopback at RCEA_API_PORT and
    RCEA_VIEW_PORT, unless RCEA_DOOR_API_URL / RCEA_DOOR_VIEW_URL name servers run
    elsewhere (then rcea leaves them alone)."""
    cfg = settings()
    rcea = (sys.executable, "-m", "rcea.app.cli")
    out = []
    if not cfg.door_api_url:
        port = str(cfg.api_port)
        out.append(
            Service(
                API,
                (*rcea, "serve", "--host", "127.0.0.1", "--port", port),
                cfg.api_port,
                "/health",
            )
        )
    if not cfg.door_view_url:
        port = str(cfg.view_port)
        out.append(
            Service(
                VIEW,
                (*rcea, "view", "--host", "127.0.0.1", "--port", port),
                cfg.view_port,
                "/_stcore/health",
            )
        )
    return out


def _service_env() -> dict[str, str]:
    """This command's environment (the same settings), with rcea importable."""
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), path) if p)}


def _data_dir(people: People) -> Path:
    return people.root.parent


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
    public: str = typer.Option(
        None,
        "--public",
        help="open the HTTPS front door under this name or address (default: "
        "RCEA_PUBLIC_HOST; unset: loopback only, no door)",
    ),
    public_port: int = typer.Option(
        None, help="front door: first public port (default: RCEA_PUBLIC_PORT, else 8443)"
    ),
    bind: str = typer.Option(
        None, help="front door: address nginx listens on (default: RCEA_PUBLIC_BIND, else all)"
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Start the servers rcea runs (or reuse running ones); wait until each is healthy.

    With --public, also start the team's REST API and view on loopback (pid files and logs
    in <data_dir>/frontdoor/) and open the front door (nginx, TLS) in front of every
    person's server, the view and the API, and print each public address. The first start
    of a person's server sets up its database (about 20 s to a minute)."""

    people = _people()
    host = public or settings().public_host
    if host:
        try:  # before anything starts: a view without login never goes behind the door
            check_view_auth(settings().view_auth)
        except FrontDoorError as exc:
            _fail(exc, as_json)
    chosen = _chosen(people, emails, as_json)
    if not chosen:
        say(
            "no people yet: `rcea labelstudio add-annotator EMAIL` adds one (and a server)", as_json
        )
    out = []
    for person in chosen:
        try:
            people.start(person, timeout=timeout)
        except LabelStudioError as exc:
            _fail(exc, as_json)
        st = people.status(person)
        out.append(st.to_dict())
        say(f"{person.email}: Label Studio at {person.url} (pid {st.to_dict()['pid']})", as_json)
    door = None
    services: list[dict[str, object]] = []
    if host:
        try:
            started = start_services(_data_dir(people), _team_services(), _service_env())
            door = open_door(people, _door_settings(host, public_port, bind)).to_dict()
        except (FrontDoorError, ServiceError) as exc:
            _fail(exc, as_json)
        for row in out:
            row["public_url"] = door["urls"].get(row["slug"])
        services = [{**s.to_dict(), "public_url": door["urls"].get(s.name)} for s in started]

    def show() -> None:
        if not door:
            return
        for svc in services:
            typer.echo(f"{svc['name']}: {svc['url']} (pid {svc['pid']}, log {svc['log']})")
        typer.echo(f"front door (nginx pid {door['pid']}) at {host}:")
        for name, url in door["urls"].items():
            typer.echo(f"  {name}: {url}/")
        if door["ca_file"]:
            typer.echo(f"  every browser must trust the local CA {door['ca_file']} (docs/team.md)")
        typer.echo("next: `rcea labelstudio invite` prints the line to send each person")

    emit({"ok": True, "servers": out, "door": door, "services": services}, as_json, show)


@labelstudio_app.command("stop")
def stop(emails: list[str] = PEOPLE_ARG, as_json: bool = JSON_OPTION) -> None:
    """Stop the servers rcea started (nothing else; external servers are left alone).

    Without e-mails: also close the front door and stop the API and the view it started."""
    people = _people()
    stopped = []
    door_closed = False
    services_stopped: list[str] = []
    if not emails:  # everything: the door first, so nobody reaches a stopping server
        door_closed = door_of(people).stop()
        if door_closed:
            say("closed the front door", as_json)
        services_stopped = stop_services(_data_dir(people), SERVICE_NAMES[::-1])
        for name in services_stopped:
            say(f"stopped the {name}", as_json)
    for person in _chosen(people, emails, as_json):
        if people.stop(person):
            stopped.append(person.email)
            say(f"stopped {person.email}'s Label Studio ({person.url})", as_json)
    out = {
        "ok": True,
        "stopped": stopped,
        "door_closed": door_closed,
        "services_stopped": services_stopped,
    }
    emit(out, as_json, lambda: None if stopped else "no Label Studio of rcea's was running")


@labelstudio_app.command("status")
def status(emails: list[str] = PEOPLE_ARG, as_json: bool = JSON_OPTION) -> None:
    """Every person's server: e-mail, URL, public URL at the front door, pid, health; and the
    API and view rcea started behind the door (loopback and public URL, pid, health); exit
    code 3 when one is down (or a configured front door is not running)."""
    people = _people()
    rows = [people.status(p) for p in _chosen(people, emails, as_json)]
    door = door_of(people).status()
    dicts = [{**r.to_dict(), "public_url": public_url(people, r.person.slug)} for r in rows]
    svcs = service_statuses(_data_dir(people), SERVICE_NAMES)
    svc_dicts = [
        {**s.to_dict(), "public_url": door.state.public_url(n) if door.state else None}
        for n, s in svcs.items()
    ]

    def show() -> None:
        if not rows:
            typer.echo("no people yet: `rcea labelstudio add-annotator EMAIL` adds one")
        for r, d in zip(rows, dicts, strict=True):
            kind = "rcea" if r.person.managed else "external"
            health = "healthy" if r.healthy else "NOT answering"
            at = f", public {d['public_url']}/" if d["public_url"] else ""
            typer.echo(f"{r.person.email}: {r.person.url} ({kind}, pid {d['pid']}), {health}{at}")
        for d in svc_dicts:
            health = "healthy" if d["healthy"] else "NOT answering"
            at = f", public {d['public_url']}/" if d["public_url"] else ""
            typer.echo(f"{d['name']}: {d['url']} (rcea, pid {d['pid']}), {health}{at}")
        if door.state:
            state = "open" if door.running else "NOT running"
            typer.echo(f"front door at {door.state.public_host}: {state}")

    door_out = door.to_dict() if door.state else None
    emit({"ok": True, "servers": dicts, "door": door_out, "services": svc_dicts}, as_json, show)
    down = any(not r.healthy for r in rows) or any(not s.healthy for s in svcs.values())
    if down or (door.state and not door.running):
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
        refresh_door(people)  # a configured door routes the new person at once
    except (AccountError, LabelStudioError, FrontDoorError) as exc:
        _fail(exc, as_json)
    password_set = annotator.created or bool(password)
    shown = new_password if password_set else None
    door_url = public_url(people, person.slug)
    login_url = f"{door_url or person.url}/user/login/"
    out = {
        "ok": True,
        "id": annotator.id,
        "email": annotator.email,
        "created": annotator.created,
        "password_set": password_set,
        "password": shown,
        "login_url": login_url,
        "public_url": door_url,
        "server": person.public(),
    }

    def show() -> None:
        verb = "created" if annotator.created else "exists"
        where = f"on their own server {person.url}"
        typer.echo(f"{annotator.email} (id {annotator.id}) {verb}, {where}")
        typer.echo(f"  log in at: {login_url}")
        typer.echo(f"  e-mail:    {annotator.email}")
        if shown:
            typer.echo(f"  password:  {shown}")
        else:
            typer.echo("  password:  unchanged (pass --password to reset it)")
        if door_url:
            typer.echo("  `rcea labelstudio invite` prints the line to send (without the password)")

    emit(out, as_json, show)


@labelstudio_app.command("door-config")
def door_config(
    public: str = typer.Option(
        None, "--public", help="the public name or address (default: RCEA_PUBLIC_HOST)"
    ),
    public_port: int = typer.Option(
        None, help="first public port (default: RCEA_PUBLIC_PORT, else 8443)"
    ),
    compose: bool = typer.Option(
        False, help="for docker-compose.yml's frontdoor service (it runs nginx and reloads)"
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Write the front door's certificate and nginx config for every registered person
    without starting nginx (compose's frontdoor service runs it; `start --public` does both
    here)."""
    host = public or settings().public_host
    if not host:
        fail("set RCEA_PUBLIC_HOST or pass --public", as_json=as_json)
    runtime = COMPOSE if compose else LOCAL
    try:
        state = configure_door(_people(), _door_settings(host, public_port, None, runtime))
    except FrontDoorError as exc:
        _fail(exc, as_json)
    conf = door_of(_people()).conf

    def show() -> None:
        typer.echo(f"wrote {conf} ({len(state.routes)} routes, {runtime})")
        if state.ca:
            typer.echo(f"every browser must trust the local CA {state.ca}")

    emit({"ok": True, "config": str(conf), **state.to_dict()}, as_json, show)


@labelstudio_app.command("remove")
def remove(
    email: str = typer.Argument(..., help="the person's e-mail"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Take a person off the team: stop their server (rcea's), drop them from the registry
    and close their route at the front door. Their server's data, labels included, stays
    on disk for the record."""
    people = _people()
    try:
        person = people.remove(email)
        refresh_door(people)
    except (LabelStudioError, FrontDoorError) as exc:
        _fail(exc, as_json)
    emit(
        {"ok": True, "removed": person.email, "data_kept": person.managed},
        as_json,
        lambda: f"removed {person.email} (their route at the front door is closed)",
    )


@labelstudio_app.command("invite")
def invite(emails: list[str] = PEOPLE_ARG, as_json: bool = JSON_OPTION) -> None:
    """Print, per person, the one line to send them: their HTTPS address at the front door,
    their login and, with a local CA, the file to trust. Never the password: send that by
    another channel (add-annotator printed it once)."""
    people = _people()
    try:
        lines = {p.email: invitation(people, p.email) for p in _chosen(people, emails, as_json)}
    except (LabelStudioError, FrontDoorError) as exc:
        _fail(exc, as_json)
    state = door_of(people).state()
    ca = state.ca if state else None

    def show() -> None:
        for line in lines.values():
            typer.echo(line)
        if ca:
            typer.echo(f"(attach {ca} to each message)", err=True)

    emit({"ok": True, "invitations": lines, "ca_file": ca}, as_json, show)


def register(app: typer.Typer) -> None:
    app.add_typer(labelstudio_app, name="labelstudio")
