"""The view's HTTP login (``/_rcea/login``, what the front door rate-limits) on a real
``rcea view``: the right password answers 303 with a signed HttpOnly session cookie (Secure
when the request came through the door), a wrong one 401, a POST from another site's page
403; after five failures the view's own lockout refuses even the right password (429 with
Retry-After), and the log-out clears the cookie. The cookie is checked with the product's
verifier against the data dir's key."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from rcea.study.logins import SESSION_COOKIE, session_key, session_researcher
from tests.support.helpers import free_port, wait_for_http

NAME, PASSWORD = "erin", "s3cret-passphrase"
DOOR = {"X-Forwarded-Proto": "https"}  # what nginx sets on every request it passes


@dataclass(frozen=True)
class View:
    url: str
    data: Path

    def login(self, name: str, password: str, **headers: str) -> httpx.Response:
        return httpx.post(
            f"{self.url}/_rcea/login",
            data={"name": name, "password": password},
            headers=headers,
            follow_redirects=False,
            timeout=30,
        )


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> Iterator[View]:
    data = tmp_path_factory.mktemp("view") / "data"
    env = {**os.environ, "RCEA_DATA_DIR": str(data)}
    exe = Path(sys.executable).parent / "rcea"
    subprocess.run(
        [str(exe), "view", "add-researcher", NAME, "--password-stdin"],
        input=f"{PASSWORD}\n",
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    port = free_port()
    proc = subprocess.Popen(
        [str(exe), "view", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for_http(f"{url}/_stcore/health", timeout=90, proc=proc)
        yield View(url, data)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _cookie(resp: httpx.Response) -> tuple[str, list[str]]:
    header = resp.headers["set-cookie"]
    first, *flags = [part.strip() for part in header.split(";")]
    name, _, value = first.partition("=")
    assert name == SESSION_COOKIE
    return value, [f.lower() for f in flags]


def test_right_password_sets_a_signed_cookie(view: View) -> None:
    page = httpx.get(f"{view.url}/_rcea/login", timeout=30)
    assert page.status_code == 200 and 'name="password"' in page.text
    assert page.headers["cache-control"] == "no-store"

    plain = view.login(NAME, PASSWORD)
    assert plain.status_code == 303 and plain.headers["location"] == "/"
    value, flags = _cookie(plain)
    assert "httponly" in flags and "samesite=lax" in flags and "secure" not in flags
    key = session_key(view.data / "view-session.key")
    assert session_researcher(view.data / "researchers.json", key, value) == NAME

    door = view.login(NAME, PASSWORD, **DOOR)
    assert door.status_code == 303
    assert "secure" in _cookie(door)[1]

    out = httpx.get(f"{view.url}/_rcea/logout", cookies={SESSION_COOKIE: value}, timeout=30)
    assert out.status_code == 200
    assert out.headers["set-cookie"].startswith(f'{SESSION_COOKIE}="";')


def test_wrong_password_foreign_page_and_lockout(view: View) -> None:
    assert view.login(NAME, "not-the-password").status_code == 401
    other = view.login(NAME, PASSWORD, Origin="https://evil.example")
    assert other.status_code == 403 and "set-cookie" not in other.headers
    for _ in range(4):  # five failures in a row lock the account (the view's own rule)
        assert view.login("mallory", "guess-guess").status_code == 401
    assert view.login("mallory", "guess-guess").status_code == 401
    locked = view.login("mallory", "guess-guess")
    assert locked.status_code == 429 and int(locked.headers["retry-after"]) > 0
    # the lock is per account: erin still logs in
    assert view.login(NAME, PASSWORD).status_code == 303
