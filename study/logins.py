"""Researcher accounts of the view: a local password file, hashed with scrypt (no Streamlit).

``<data_dir>/researchers.json`` (mode 0600) maps each researcher's name to a scrypt hash
and its salt: ``{"name": {"scheme": "scrypt", "n": .., "r": .., "p": .., "salt": hex,
"hash": hex}}``. ``rcea view add-researcher NAME`` writes an entry; the view's login form
checks against it; decisions taken in the view are recorded under the name.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Any

from pipeline.safety import private_dir, write_private
from study.settings import Settings

FILENAME = "researchers.json"
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
