"""Researcher accounts of the view: a local password file, hashed with scrypt (no Streamlit).

``<data_dir>/researchers.json`` (mode 0600) maps each researcher's name to a scrypt hash
and its salt: ``{"name": {"scheme": "scrypt", "n": .., "r": .., "p": .., "salt": hex,
"hash": hex}}``. ``rcea view add-researcher NAME`` writes an entry; the view's login form
checks against it; decisions taken in the view are recorded under the name.

Behind the front door the view's login is a plain HTTP form (``/_rcea/login``, where nginx
holds the attempts): a right password gets a **session cookie**, signed with HMAC-SHA256
under ``<data_dir>/view-session.key`` (0600, made once). It names the researcher, an expiry
(:data:`SESSION_TTL_S`) and a fingerprint of the account's stored hash, so resetting or
removing the account ends every session it had (:func:`issue_session`,
:func:`session_researcher`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from rcea.pipeline.safety import private_dir, write_private
from rcea.study.settings import Settings

FILENAME = "researchers.json"
SESSION_KEY_FILE = "view-session.key"
SESSION_COOKIE = "rcea_view_session"
SESSION_TTL_S = 12 * 3600  # a working day; then the researcher logs in again
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
MIN_PASSWORD = 8
MAX_NAME = 200


class LoginError(ValueError):
    """A refused account change (bad name, short password, existing account)."""


def logins_path(settings: Settings) -> Path:
    return settings.data_dir / FILENAME


def _hash(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=32)


def _load(path: Path) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise LoginError(f"{path}: expected a JSON object of accounts")
    return data


def researchers(path: Path) -> list[str]:
    """The account names, sorted."""
    return sorted(_load(path))


def check_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > MAX_NAME or not name.isprintable():
        raise LoginError(f"researcher name {name!r}: 1-{MAX_NAME} printable characters")
    return name


def add_researcher(path: Path, name: str, password: str, *, replace: bool = False) -> None:
    """Add (or with ``replace``, reset) an account; the file is rewritten atomically, 0600."""
    name = check_name(name)
    if len(password) < MIN_PASSWORD:
        raise LoginError(f"the password needs at least {MIN_PASSWORD} characters")
    accounts = _load(path)
    if name in accounts and not replace:
        raise LoginError(f"researcher {name!r} exists (use --reset to change the password)")
    salt = secrets.token_bytes(16)
    accounts[name] = {
        "scheme": "scrypt",
        "n": SCRYPT_N,
        "r": SCRYPT_R,
        "p": SCRYPT_P,
        "salt": salt.hex(),
        "hash": _hash(password, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P).hex(),
    }
    _save(path, accounts)


def remove_researcher(path: Path, name: str) -> None:
    accounts = _load(path)
    if accounts.pop(name, None) is None:
        raise LoginError(f"no researcher {name!r}")
    _save(path, accounts)


def _save(path: Path, accounts: dict[str, dict[str, Any]]) -> None:
    private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write_private(tmp, (json.dumps(accounts, indent=2, sort_keys=True) + "\n").encode())
    os.replace(tmp, path)


_DUMMY_SALT = b"rcea-no-such-user"


def verify(path: Path, name: str, password: str) -> bool:
    """Whether ``password`` is ``name``'s; an unknown name costs one hash too (no timing
    difference tells which names exist)."""
    entry = _load(path).get(name.strip())
    if entry is None or entry.get("scheme") != "scrypt":
        _hash(password, _DUMMY_SALT, SCRYPT_N, SCRYPT_R, SCRYPT_P)
        return False
    got = _hash(password, bytes.fromhex(entry["salt"]), entry["n"], entry["r"], entry["p"])
    return hmac.compare_digest(got, bytes.fromhex(entry["hash"]))


class LoginThrottle:
    """Failed logins limited per account and for everyone (the view's login form; one
    per process, shared by every browser session).

    An account is locked after :attr:`account_limit` failures in a row, for
    ``base_lockout_s`` doubled with each further failure (at most ``max_lockout_s``); a
    success resets it. Whatever the names tried, more than :attr:`global_limit` failures
    within ``window_s`` lock every login for ``base_lockout_s``, doubled while the flood
    goes on. While locked even the right password is refused. Thread-safe."""

    def __init__(
        self,
        *,
        account_limit: int = 5,
        global_limit: int = 30,
        window_s: float = 60.0,
        base_lockout_s: float = 30.0,
        max_lockout_s: float = 900.0,
        clock: Any = None,
    ) -> None:
        self.account_limit, self.global_limit, self.window_s = (
            account_limit,
            global_limit,
            window_s,
        )
        self.base_lockout_s, self.max_lockout_s = base_lockout_s, max_lockout_s
        self._clock = clock or time.monotonic
        self._lock = threading.Lock()
        self._failures: dict[str, int] = {}
        self._locked_until: dict[str, float] = {}
        self._recent: deque[float] = deque()
        self._global_until = 0.0
        self._global_strikes = 0

    def reset(self) -> None:
        with self._lock:
            self._failures.clear()
            self._locked_until.clear()
            self._recent.clear()
            self._global_until, self._global_strikes = 0.0, 0

    def _backoff(self, strikes: int) -> float:
        return min(self.max_lockout_s, self.base_lockout_s * 2 ** max(0, strikes))  # type: ignore[no-any-return]  # int ** int is typed Any by mypy (a negative exponent gives a float)

    def wait(self, name: str) -> float:
        """Seconds before ``name`` may try again (0: now)."""
        now = self._clock()
        with self._lock:
            until = max(self._global_until, self._locked_until.get(name.strip(), 0.0))
        return max(0.0, until - now)

    def failed(self, name: str) -> str | None:
        """Count a failed login; what got locked (``"account"``, ``"all"``) or None."""
        name = name.strip()
        now = self._clock()
        locked = None
        with self._lock:
            n = self._failures.get(name, 0) + 1
            self._failures[name] = n
            if n >= self.account_limit:
                self._locked_until[name] = now + self._backoff(n - self.account_limit)
                locked = "account"
            self._recent.append(now)
            while self._recent and self._recent[0] <= now - self.window_s:
                self._recent.popleft()
            if len(self._recent) > self.global_limit:
                if self._global_until <= now:
                    self._global_strikes += 1
                self._global_until = now + self._backoff(self._global_strikes - 1)
                locked = "all"
            elif self._global_until <= now:
                self._global_strikes = 0
        return locked

    def succeeded(self, name: str) -> None:
        with self._lock:
            self._failures.pop(name.strip(), None)
            self._locked_until.pop(name.strip(), None)


# ------------------------------------------------------------------ session cookies


def session_key_path(settings: Settings) -> Path:
    return settings.data_dir / SESSION_KEY_FILE


def session_key(path: Path) -> bytes:
    """The view's cookie signing key, made (32 random bytes, 0600) on first use; two
    processes making it at once keep the first one written."""
    try:
        return bytes.fromhex(path.read_text().strip())
    except FileNotFoundError:
        pass
    private_dir(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return bytes.fromhex(path.read_text().strip())
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_hex(32) + "\n")
    return bytes.fromhex(path.read_text().strip())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _fingerprint(entry: dict[str, Any]) -> str:
    """Changes when the account's password is reset (a new salt and hash)."""
    return hashlib.sha256(f"{entry.get('salt')}:{entry.get('hash')}".encode()).hexdigest()[:16]


def _sign(key: bytes, payload: str) -> str:
    return _b64(hmac.new(key, payload.encode("ascii"), hashlib.sha256).digest())


def issue_session(
    path: Path, key: bytes, name: str, *, now: float | None = None, ttl_s: float = SESSION_TTL_S
) -> str:
    """The cookie value for ``name`` (an existing account; call after :func:`verify`)."""
    name = name.strip()
    entry = _load(path).get(name)
    if entry is None:
        raise LoginError(f"no researcher {name!r}")
    expires = int((time.time() if now is None else now) + ttl_s)
    body = json.dumps({"n": name, "e": expires, "f": _fingerprint(entry)}, separators=(",", ":"))
    payload = _b64(body.encode("utf-8"))
    return f"{payload}.{_sign(key, payload)}"


def session_researcher(
    path: Path, key: bytes, token: str, *, now: float | None = None
) -> str | None:
    """The researcher a cookie value logs in; None when it is forged, expired, or its
    account was removed or its password reset since."""
    payload, _, signature = (token or "").strip().partition(".")
    if not payload or not signature or len(token) > 4096:
        return None
    if not hmac.compare_digest(signature, _sign(key, payload)):
        return None
    try:
        data = json.loads(_unb64(payload))
        name, expires, fingerprint = str(data["n"]), float(data["e"]), str(data["f"])
    except (ValueError, KeyError, TypeError):
        return None
    if expires <= (time.time() if now is None else now):
        return None
    entry = _load(path).get(name)
    if entry is None or not hmac.compare_digest(fingerprint, _fingerprint(entry)):
        return None
    return name
