"""One Label Studio server per person: the isolation boundary of every human round.

Label Studio Community shows every member of an organisation every project, webhook and
annotation, and its organisations do not isolate either (on 1.23.2 tasks list by project
id and annotations PATCH/POST/DELETE by id across organisations). So each annotator and
each adjudicator gets a server of their own: own data directory, database, port, Django
secret key and admin account. The admin account belongs to rcea, never to the person; the
person is an ordinary member who can reach nothing but their own server.

The registry (``<data_dir>/labelstudio/people.json``, mode 0600) maps each person's e-mail
to their server:

* **managed** servers are started, checked and stopped by rcea (``rcea labelstudio``),
  each in ``<data_dir>/labelstudio/people/<slug>`` on the next free port after the base
  port of ``RCEA_LABELSTUDIO_URL``;
* **external** servers (a compose service per person, a server run elsewhere) are
  registered with their URL and admin token (``add-annotator --server-url``); rcea only
  talks to them.

Nothing here trusts anything a person can write: labels are read back with the admin
token (:mod:`rcea.study.labelling`), and each person's webhook carries its own secret, derived
from the master secret and the person's slug, so a secret read on one server is useless
for another person's endpoint.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import re
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from rcea.annotation.client import http_client, is_healthy, make_client
from rcea.annotation.file_lock import file_lock
from rcea.annotation.server import (
    LS_SUBDIR,
    LabelStudioError,
    LabelStudioServer,
    ServerStatus,
    _check_token,
    _write_private,
    parse_loopback_url,
)

if TYPE_CHECKING:
    from label_studio_sdk import LabelStudio

PEOPLE_FILE = "people.json"
PEOPLE_DIR = "people"
WEBHOOK_PATH = "/webhooks/label-studio"


class PeopleError(LabelStudioError):
    """A person has no server, or a server could not be registered; says why."""


def normalise_email(email: str) -> str:
    email = email.strip().lower()
    if "@" not in email or len(email) > 254 or any(c.isspace() for c in email):
        raise PeopleError(f"{email!r} is not an e-mail address")
    return email


def person_slug(email: str) -> str:
    """A stable, path- and URL-safe name for a person: the e-mail's local part (letters,
    digits, dashes; at most 24 characters) and 8 hex digits of its SHA-256."""
    email = normalise_email(email)
    local = re.sub(r"[^a-z0-9]+", "-", email.split("@", 1)[0]).strip("-")[:24] or "person"
    return f"{local}-{hashlib.sha256(email.encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class Person:
    """A person and the Label Studio server that is theirs alone."""

    email: str
    slug: str
    url: str
    managed: bool
    port: int | None = None
    token: str | None = field(default=None, repr=False)  # external servers only

    def public(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("token")
        return out


@dataclass(frozen=True)
class PersonStatus:
    person: Person
    status: ServerStatus | None  # None for external servers (rcea does not run them)
    healthy: bool

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.person.public(), "healthy": self.healthy}
        out["pid"] = self.status.pid if self.status else None
        out["running"] = self.status.running if self.status else None
        out["log_path"] = str(self.status.log_path) if self.status else None
        return out


def _port_free(host: str, port: int) -> bool:
    """Nothing listens there now (a server of ours that is down keeps its port)."""
    with socket.socket() as sock:
        try:
            sock.bind((host if host != "localhost" else "127.0.0.1", port))
        except OSError:
            return False
    return True


def person_webhook_secret(master: str, slug: str) -> str:
    """The webhook secret of one person's server: HMAC-SHA256(master, slug), hex."""
    return hmac.new(master.encode(), slug.encode(), hashlib.sha256).hexdigest()


def person_webhook_url(base: str, slug: str) -> str:
    """``<base>/<slug>``: the receiver knows from the path which server to read back from."""
    return f"{base.rstrip('/')}/{slug}"


class People:
    """The registry of person servers of one rcea data dir."""

    def __init__(
        self,
        data_dir: Path,
        base_url: str,
        *,
        executable: Path | None = None,
        admin_user: str = "admin@rcea.local",
    ) -> None:
        self.root = Path(data_dir).resolve() / LS_SUBDIR
        self.base_url = base_url
        self.executable = executable
        self.admin_user = admin_user

    @property
    def path(self) -> Path:
        return self.root / PEOPLE_FILE

    # registry file
    def _locked(self) -> contextlib.AbstractContextManager[None]:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        return file_lock(self.root / ".people.lock")

    def _load(self) -> dict[str, dict[str, Any]]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise PeopleError(f"{self.path}: not valid JSON ({exc})") from exc
        if not isinstance(data, dict):
            raise PeopleError(f"{self.path}: expected an object of e-mail → server")
        return data

    def _save(self, data: dict[str, dict[str, Any]]) -> None:
        _write_private(self.path, json.dumps(data, indent=2, sort_keys=True) + "\n")

    @staticmethod
    def _person(email: str, entry: dict[str, Any]) -> Person:
        return Person(
            email=email,
            slug=str(entry["slug"]),
            url=str(entry["url"]),
            managed=bool(entry["managed"]),
            port=entry.get("port"),
            token=entry.get("token"),
        )

    def all(self) -> list[Person]:
        return [self._person(e, v) for e, v in sorted(self._load().items())]

    def get(self, email: str) -> Person | None:
        email = normalise_email(email)
        entry = self._load().get(email)
        return None if entry is None else self._person(email, entry)

    def by_slug(self, slug: str) -> Person | None:
        return next((p for p in self.all() if p.slug == slug), None)

    def require(self, email: str) -> Person:
        person = self.get(email)
        if person is None:
            raise PeopleError(
                f"{email} has no Label Studio server yet: run "
                f"`rcea labelstudio add-annotator {email}` (one server per person)"
            )
        return person

    def add(self, email: str, *, url: str | None = None, token: str | None = None) -> Person:
        """Register ``email`` (idempotent). Without ``url``: a managed server on the next
        free port after the base port; with ``url`` and ``token``: an external server."""
        email = normalise_email(email)
        with self._locked():
            data = self._load()
            entry = data.get(email)
            if entry is not None:
                if url is not None and entry["url"].rstrip("/") != url.rstrip("/"):
                    raise PeopleError(
                        f"{email} already has a server at {entry['url']}; one person, one "
                        "server (remove the entry from people.json to move it)"
                    )
                if url is not None and token is not None and entry.get("token") != token:
                    entry["token"] = _check_token(token)
                    self._save(data)
                return self._person(email, entry)
            slug = person_slug(email)
            if url is None:
                host, base_port = parse_loopback_url(self.base_url)
                used = {int(v["port"]) for v in data.values() if v.get("port")}
                port = base_port + 1
                while port in used or not _port_free(host, port):
                    port += 1
                entry = {"slug": slug, "url": f"http://{host}:{port}", "managed": True}
                entry["port"] = port
            else:
                if token is None:
                    raise PeopleError(f"{email}: an external server needs its admin token")
                parts = urlsplit(url)
                if parts.scheme not in ("http", "https") or not parts.hostname:
                    raise PeopleError(f"{url!r} is not an http(s) URL")
                entry = {
                    "slug": slug,
                    "url": url.rstrip("/"),
                    "managed": False,
                    "token": _check_token(token),
                }
            taken = {v["url"].rstrip("/") for v in data.values()}
            if entry["url"] in taken:
                raise PeopleError(f"{entry['url']} already serves another person")
            data[email] = entry
            self._save(data)
            return self._person(email, entry)

    def remove(self, email: str) -> Person:
        """Take ``email`` out of the registry (their server, if rcea runs it, is stopped
        first; its data dir stays on disk, with every label, for the record)."""
        person = self.require(email)
        self.stop(person)
        with self._locked():
            data = self._load()
            data.pop(person.email, None)
            self._save(data)
        return person

    # servers
    def server(self, person: Person) -> LabelStudioServer:
        if not person.managed or person.port is None:
            raise PeopleError(f"{person.email}'s server at {person.url} is not run by rcea")
        host, _ = parse_loopback_url(person.url)
        return LabelStudioServer(
            self.root.parent,
            person.port,
            host=host,
            username=self.admin_user,
            executable=self.executable,
            home=self.root / PEOPLE_DIR / person.slug,
        )

    def start(self, person: Person, timeout: float = 300.0) -> None:
        """Start a server rcea runs; for one run elsewhere, check that it answers (a
        connection error naming its URL otherwise, which the CLI turns into one line)."""
        if person.managed:
            self.server(person).start(timeout=timeout)
        elif not is_healthy(person.url):
            raise httpx.ConnectError(
                f"{person.email}'s Label Studio at {person.url} does not answer",
                request=httpx.Request("GET", f"{person.url}/health/"),
            )

    def stop(self, person: Person) -> bool:
        return self.server(person).stop() if person.managed else False

    def status(self, person: Person) -> PersonStatus:
        st = self.server(person).status() if person.managed else None
        healthy = st.healthy if st is not None else is_healthy(person.url)
        return PersonStatus(person, st, healthy)

    def admin_token(self, person: Person) -> str:
        if person.managed:
            return self.server(person).credentials().token
        assert person.token is not None
        return person.token

    def client(self, person: Person, *, timeout: float = 60.0) -> LabelStudio:
        """The SDK client of the person's server, authenticated as rcea's admin."""
        return make_client(person.url, self.admin_token(person), timeout=timeout)

    def http(self, person: Person, *, timeout: float = 30.0) -> httpx.Client:
        """A plain client on the person's server with the admin token (caller closes)."""
        client = http_client(person.url, timeout=timeout, follow_redirects=False)
        client.headers["Authorization"] = f"Token {self.admin_token(person)}"
        return client


def people_from_settings(settings: Any) -> People:
    """The registry of the configured data dir (``rcea.study.settings.Settings`` fits)."""
    return People(
        settings.data_dir,
        settings.labelstudio_url,
        executable=settings.labelstudio_bin,
        admin_user=settings.labelstudio_user,
    )
