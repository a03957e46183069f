"""The view's session cookie (rcea/study/logins.py): signed with HMAC-SHA256 under the data
dir's key, it names the researcher until it expires, and a reset or removed account, a
changed byte or another key ends it. The signature is recomputed here with ``hmac``
separately from the product's code."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import stat
from pathlib import Path

import pytest

from rcea.study.logins import (
    SESSION_TTL_S,
    LoginError,
    add_researcher,
    issue_session,
    remove_researcher,
    session_key,
    session_researcher,
)

NOW = 1_800_000_000.0


@pytest.fixture
def accounts(tmp_path: Path) -> Path:
    path = tmp_path / "researchers.json"
    add_researcher(path, "erin", "first-password")
    add_researcher(path, "sam", "other-password")
    return path


def test_key_is_made_once_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "data" / "view-session.key"
    key = session_key(path)
    assert len(key) == 32 and session_key(path) == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_cookie_names_the_researcher_until_it_expires(accounts: Path, tmp_path: Path) -> None:
    key = session_key(tmp_path / "k")
    token = issue_session(accounts, key, " erin ", now=NOW)
    payload, signature = token.split(".")
    expected = hmac.new(key, payload.encode(), hashlib.sha256).digest()
    assert base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)) == expected
    body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert body["n"] == "erin" and body["e"] == NOW + SESSION_TTL_S
    assert session_researcher(accounts, key, token, now=NOW + 60) == "erin"
    assert session_researcher(accounts, key, token, now=NOW + SESSION_TTL_S) is None
    with pytest.raises(LoginError, match="no researcher 'nobody'"):
        issue_session(accounts, key, "nobody")


def test_forged_or_foreign_cookies_are_refused(accounts: Path, tmp_path: Path) -> None:
    key = session_key(tmp_path / "k")
    token = issue_session(accounts, key, "erin", now=NOW)
    payload, signature = token.split(".")
    # another name under the same signature; a cookie of another data dir's key
    forged = json.dumps({"n": "sam", "e": NOW + 999, "f": "0" * 16}, separators=(",", ":"))
    forged_payload = base64.urlsafe_b64encode(forged.encode()).rstrip(b"=").decode()
    for bad in (f"{forged_payload}.{signature}", payload, "", "x.y", token + "x"):
        assert session_researcher(accounts, key, bad, now=NOW) is None, bad
    other_key = session_key(tmp_path / "other")
    assert session_researcher(accounts, other_key, token, now=NOW) is None


def test_reset_or_removal_ends_the_session(accounts: Path, tmp_path: Path) -> None:
    key = session_key(tmp_path / "k")
    erin = issue_session(accounts, key, "erin", now=NOW)
    sam = issue_session(accounts, key, "sam", now=NOW)
    add_researcher(accounts, "erin", "second-password", replace=True)
    assert session_researcher(accounts, key, erin, now=NOW) is None
    assert session_researcher(accounts, key, sam, now=NOW) == "sam"
    remove_researcher(accounts, "sam")
    assert session_researcher(accounts, key, sam, now=NOW) is None
