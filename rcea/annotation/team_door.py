"""The front door of a labelling team: every registered person's server, the view and the
API behind one nginx (:mod:`rcea.annotation.frontdoor`), with its certificate
(:mod:`rcea.annotation.tls`); and the one line each person is sent (docs/team.md).

The door follows the people registry: opening it routes every registered person; adding a
person (``rcea labelstudio add-annotator``) or removing one rewrites the config and reloads
a running door, so a new person's route opens and a removed person's closes without anyone
editing a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rcea.annotation.frontdoor import (
    LOCAL,
    DoorState,
    DoorStatus,
    FrontDoor,
    FrontDoorError,
)
from rcea.annotation.people import People
from rcea.annotation.tls import Certificate, TLSError, certificate


@dataclass(frozen=True)
class DoorSettings:
    """What the door needs from rcea's settings (``RCEA_PUBLIC_*``, ``RCEA_TLS_*``)."""

    public_host: str
    port: int = 8443
    bind: str = "0.0.0.0"
    tls_cert: Path | None = None
    tls_key: Path | None = None
    view_url: str = "http://127.0.0.1:8501"
    api_url: str = "http://127.0.0.1:8000"
    runtime: str = LOCAL  # COMPOSE: write the config for compose's frontdoor service
    view_auth: str = "password"  # RCEA_VIEW_AUTH: "none" is refused behind the door


def door_of(people: People) -> FrontDoor:
    return FrontDoor(people.root.parent)


def _routes(people: People) -> dict[str, str]:
    return {p.slug: p.url for p in people.all()}


def check_view_auth(view_auth: str) -> None:
    """A view without login (``RCEA_VIEW_AUTH=none``, allowed on loopback for one person at
    the server) is refused: the door would open it to every laptop."""
    if view_auth == "none":
        raise FrontDoorError(
            "RCEA_VIEW_AUTH=none: the front door would serve the view without login to "
            "everyone who reaches it; use RCEA_VIEW_AUTH=password (`rcea view "
            "add-researcher NAME`) or oidc"
        )


def configure_door(people: People, cfg: DoorSettings) -> DoorState:
    """Write the door's certificate (or check the operator's) and config for every person
    (a view without login refused: :func:`check_view_auth`)."""
    check_view_auth(cfg.view_auth)
    door = door_of(people)
    try:
        cert = certificate(door.dir, cfg.public_host, cfg.tls_cert, cfg.tls_key)
    except TLSError as exc:
        raise FrontDoorError(str(exc)) from exc
    return door.configure(
        cfg.public_host,
        cfg.port,
        cert,
        people=_routes(people),
        view_upstream=cfg.view_url,
        api_upstream=cfg.api_url,
        bind=cfg.bind,
        runtime=cfg.runtime,
    )


def open_door(people: People, cfg: DoorSettings) -> DoorStatus:
    """Configure and start (or reload) the door."""
    configure_door(people, cfg)
    return door_of(people).start()


def refresh_door(people: People) -> DoorState | None:
    """After the registry changed: rewrite a configured door for the people registered now
    (same name, ports, certificate) and reload it if it runs here (compose's frontdoor
    service reloads when the file changes). None without a door."""
    door = door_of(people)
    state = door.state()
    if state is None:
        return None
    routes = {r.name: r.upstream for r in state.routes}
    new = door.configure(
        state.public_host,
        state.port,
        _certificate_of(state),
        people=_routes(people),
        view_upstream=routes["view"],
        api_upstream=routes["api"],
        bind=state.bind,
        runtime=state.runtime,
    )
    if state.runtime == LOCAL and door.running() is not None:
        door.start()
    return new


def _certificate_of(state: DoorState) -> Certificate:
    return Certificate(Path(state.cert), Path(state.key), Path(state.ca) if state.ca else None)


def public_url(people: People, slug: str) -> str | None:
    """The person's address at the door (None without a configured door)."""
    state = door_of(people).state()
    return state.public_url(slug) if state else None


def invitation(people: People, email: str) -> str:
    """The one line to send a person: their address, their login and, for a local CA,
    the file to trust. Never the password (it goes by another channel)."""
    person = people.require(email)
    state = door_of(people).state()
    if state is None or state.route(person.slug) is None:
        raise FrontDoorError(
            "no front door is configured for this person: `rcea labelstudio start --public "
            "HOST` opens it"
        )
    url = state.public_url(person.slug)
    line = f"{person.email}: open {url}/ and log in as {person.email}"
    line += " with the password you were given separately"
    if state.ca:
        line += f"; first trust the certificate authority {Path(state.ca).name} (sent with this)"
    return line
