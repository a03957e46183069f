"""Annotator accounts that real people can log in with.

Label Studio Community has no API to create a usable account: ``users.create`` makes a user
with no organisation and no password, who cannot log in. What works is what a person would
do: take the organisation's invite link (``GET /api/invite`` with the admin token, or
``client.organizations.invites.get_invite_link()``), open ``/user/signup/?token=…`` and post
the sign-up form (Django CSRF) with e-mail and password. That is what
:func:`create_annotator` does. The server runs with ``DISABLE_SIGNUP_WITHOUT_LINK`` so the
form refuses anyone without the invite token.

Caveat (Community edition): there are no roles. Every member of the one organisation has
every permission, so an annotator can list, open, change and delete every project, other
annotators' included. "One project per annotator" organises the work but does not isolate
it: task data and meta must carry nothing that unblinds, and our store keeps its own copy.

The API cannot change a password either (the user serializer ignores ``password``), so
:func:`set_password` runs Django in the server's own virtual environment against its data dir.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx
from pydantic import SecretStr

from rcea.annotation.client import http_client, make_client
from rcea.annotation.server import PASSWORD_MIN, LabelStudioServer, server_env

CSRF_INPUT = re.compile(r'name="csrfmiddlewaretoken"\s+value="([^"]+)"')
FORM_ERRORS = re.compile(
    r'<ul class="field_errors">(.*?)</ul>|<p class="error">(.*?)</p>', re.DOTALL
)
LOGIN_PATH = "/user/login/"


class AccountError(RuntimeError):
    """An account could not be created, found or changed; the message says why."""


class LoginFailed(AccountError):
    """The login form refused the e-mail and password."""


@dataclass(frozen=True)
class Annotator:
    id: int
    email: str
    created: bool = False  # False when the account existed already (password unchanged)


def _secret(value: str | SecretStr) -> str:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def form_errors(page: str) -> list[str]:
    """The error messages a re-rendered Label Studio form shows."""
    found: list[str] = []
    for field_block, form_error in FORM_ERRORS.findall(page):
        found += re.findall(r"<li>(.*?)</li>", field_block, re.DOTALL) or [form_error]
    cleaned = (" ".join(html.unescape(re.sub(r"<[^>]+>", " ", m)).split()) for m in found)
    return [msg for msg in cleaned if msg]


def _csrf_form_token(page: str, url: str) -> str:
    match = CSRF_INPUT.search(page)
    if not match:
        raise AccountError(f"no CSRF token in the form at {url}")
    return match.group(1)


def _post_form(client: httpx.Client, path: str, fields: dict[str, str]) -> httpx.Response:
    """GET the form (sets the ``csrftoken`` cookie), then POST it back like a browser."""
    page = client.get(path)
    if page.status_code != 200:
        raise AccountError(f"GET {path} answered {page.status_code}")
    data = {"csrfmiddlewaretoken": _csrf_form_token(page.text, path), **fields}
    # Django checks the Referer only over HTTPS; sending it keeps that case working too.
    return client.post(path, data=data, headers={"Referer": str(client.base_url.join(path))})


def find_user(url: str, admin_token: str | SecretStr, email: str) -> Annotator | None:
    """The organisation member with this e-mail (case-insensitive), or None."""
    email = email.strip().lower()
    for user in make_client(url, admin_token).users.list():
        if (user.email or "").lower() == email:
            return Annotator(id=int(user.id), email=user.email or email)
    return None


def create_annotator(
    url: str,
    admin_token: str | SecretStr,
    email: str,
    password: str | SecretStr,
    first_name: str = "",
    last_name: str = "",
) -> Annotator:
    """Create an account through the invite sign-up so the person can log in with e-mail
    and password in the web UI.

    Idempotent: when the e-mail exists already, that account is returned with
    ``created=False`` and its password is NOT changed (use :func:`set_password`).
    """
    email = email.strip().lower()
    password = _secret(password)
    existing = find_user(url, admin_token, email)
    if existing is not None:
        return existing
    if len(password) < PASSWORD_MIN:
        raise AccountError(f"the password needs at least {PASSWORD_MIN} characters")
    sdk = make_client(url, admin_token)
    invite = sdk.organizations.invites.get_invite_link()
    if not invite.invite_url:
        raise AccountError(f"Label Studio at {url} returned no invite link")
    with http_client(url, timeout=30.0, follow_redirects=False) as browser:
        resp = _post_form(browser, invite.invite_url, {"email": email, "password": password})
    if resp.status_code != 302:
        errors = "; ".join(form_errors(resp.text)) or f"HTTP {resp.status_code}"
        raise AccountError(f"sign-up of {email} refused: {errors}")
    user = find_user(url, admin_token, email)
    if user is None:
        raise AccountError(f"sign-up of {email} succeeded but the account is not listed")
    if first_name or last_name:
        sdk.users.update(id=user.id, first_name=first_name, last_name=last_name)
    return Annotator(id=user.id, email=user.email, created=True)


def login_session(url: str, email: str, password: str | SecretStr) -> httpx.Client:
    """Log in through the real ``/user/login/`` form; return the logged-in session.

    The session also carries ``X-CSRFToken`` (Django rotates the token at login), so it can
    call the REST API as that person, e.g. to post an annotation. Raises ``LoginFailed``.
    The caller closes it (``contextlib.closing``: an httpx client that has made requests
    cannot be entered with ``with`` any more).
    """
    client = http_client(url, timeout=30.0, follow_redirects=False)
    try:
        resp = _post_form(client, LOGIN_PATH, {"email": email, "password": _secret(password)})
        if resp.status_code != 302:
            errors = "; ".join(form_errors(resp.text)) or f"HTTP {resp.status_code}"
            raise LoginFailed(f"login of {email} refused: {errors}")
        client.headers["X-CSRFToken"] = client.cookies.get("csrftoken", "")  # type: ignore[assignment]  # httpx types cookies.get as Optional even with a default
        who = client.get("/api/current-user/whoami")
        if who.status_code != 200 or who.json().get("email", "").lower() != email.lower():
            raise LoginFailed(f"login of {email} did not give a session (HTTP {who.status_code})")
    except BaseException:
        client.close()
        raise
    return client


_SET_PASSWORD = """
import json, os, sys
import label_studio, django
sys.path.insert(0, os.path.dirname(label_studio.__file__))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "label_studio.core.settings.label_studio")
django.setup()
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from users.models import User
req = json.load(sys.stdin)
user = User.objects.filter(email=req["email"]).first()
if user is None:
    print("RCEA: no user " + req["email"], file=sys.stderr); sys.exit(3)
try:
    validate_password(req["password"])  # as the sign-up form does
except ValidationError as exc:
    print("RCEA: " + " ".join(exc.messages), file=sys.stderr); sys.exit(4)
user.set_password(req["password"])
user.save(update_fields=["password"])
"""


def _interpreter(executable: Path) -> str:
    """The Python that runs the ``label-studio`` script (its shebang)."""
    first = executable.read_bytes().split(b"\n", 1)[0].decode(errors="replace")
    if not first.startswith("#!"):
        raise AccountError(f"{executable} is not a Python script; cannot find its interpreter")
    return first[2:].strip().split()[0]


def set_password(server: LabelStudioServer, email: str, password: str | SecretStr) -> None:
    """Set a user's password directly in the managed server's database.

    Runs Django from the server's virtual environment against the same data dir (the
    server may keep running). The password travels on stdin, never on a command line.
    Existing browser sessions of that user end (Django ties sessions to the password).
    """
    payload = json.dumps({"email": email.strip().lower(), "password": _secret(password)})
    result = subprocess.run(
        [_interpreter(server.executable()), "-c", _SET_PASSWORD],
        input=payload,
        env=server_env(server.home),
        cwd=server.home,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        lines = [ln for ln in result.stderr.splitlines() if ln.startswith("RCEA: ")]
        reason = lines[-1][6:] if lines else result.stderr.strip()[-2000:]
        raise AccountError(f"could not set the password of {email}: {reason}")


T = TypeVar("T")
R = TypeVar("R")


def side_by_side(work: Callable[[T], R], people: Sequence[T]) -> list[R]:
    """``work(person)`` for every person at the same time, as people label side by side (a
    thread each: every person talks to their own server, a process of its own, so the
    round takes the longest person's time, not the sum); results in ``people``'s order,
    the first failure raised."""
    with ThreadPoolExecutor(max_workers=max(1, len(people))) as pool:
        return list(pool.map(work, people))
