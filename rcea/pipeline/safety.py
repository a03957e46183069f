"""Secrets, names and file modes made safe, in one place for every layer above ``audits``.

* :func:`mask_url` — the one masking rule for URLs that may carry credentials
  (``https://user:pass@host/v1`` → ``https://user:***@host/v1``; a bare ``token@`` becomes
  ``***@``; secret-looking query values become ``***``). Used for every printed, logged
  or stored URL (``rcea config``, error messages, events, run records, caches).
* :func:`safe_name` / :func:`path_under` — the one rule that turns a user-given name (a
  study, a person) into a single path component under a base directory: no separators,
  no ``..``, no absolute names, never outside the base.
* :func:`private_dir` / :func:`private_file` / :func:`write_private` and
  :data:`PRIVATE_UMASK` (set by the ``rcea`` entry point) — data written by the app is
  readable by its owner only (directories 0700, files 0600).
* :func:`install_log_masking` — URLs in every log message masked.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "***"
SECRET_QUERY_KEYS = frozenset(
    {"key", "api_key", "apikey", "token", "access_token", "password", "secret", "sig"}
)
PRIVATE_UMASK = 0o077
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def mask_url(url: str) -> str:
    """``url`` with its credentials replaced by ``***`` (the user name is kept when a
    password follows it; a user part alone may itself be a token, so it is masked).

    A string that is not a URL with a network location is returned unchanged."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    if not parts.scheme or not parts.netloc:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user, sep, _password = userinfo.partition(":")
        netloc = f"{user}:{MASK}@{host}" if sep and user else f"{MASK}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(k.lower() in SECRET_QUERY_KEYS for k, _ in pairs):
            query = urlencode(
                [(k, MASK if k.lower() in SECRET_QUERY_KEYS else v) for k, v in pairs],
                safe="*",
            )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def mask_urls_in(text: str) -> str:
    """Every URL inside free text (an error message, a log line) passed through
    :func:`mask_url`."""
    return _URL_IN_TEXT.sub(lambda m: mask_url(m.group(0)), text)


def safe_name(name: str, *, default: str = "unnamed") -> str:
    """``name`` as one path component: letters, digits, ``-``, ``_`` and inner ``.`` kept,
    everything else (separators, spaces, control characters) becomes ``_``; leading dots
    are dropped, so ``.``, ``..`` and hidden names cannot occur. Empty → ``default``."""
    keep = "".join(c if (c.isascii() and c.isalnum()) or c in "-_." else "_" for c in name)
    keep = keep.lstrip(".")[:200]
    return keep or default


def path_under(base: Path, *names: str, suffix: str = "") -> Path:
    """``base/<safe_name(n1)>/…/<safe_name(nk)><suffix>``; raises ``ValueError`` if the
    result would still leave ``base`` (it cannot, by construction: checked anyway)."""
    if not names:
        raise ValueError("path_under needs at least one name")
    parts = [safe_name(n) for n in names]
    parts[-1] += suffix
    path = base.joinpath(*parts)
    root = base.resolve()
    if root != path.resolve() and root not in path.resolve().parents:
        raise ValueError(f"{path} is outside {base}")
    return path


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) as 0700 and tighten an existing one."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def private_file(path: Path) -> Path:
    """Create ``path`` empty as 0600 if missing, and tighten it if present."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.close(fd)
    os.chmod(path, 0o600)
    return path


def write_private(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` as an owner-only file (0600, also when it existed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    return path


def install_log_masking() -> None:
    """Every log record created from now on has the URLs in its message masked
    (:func:`mask_urls_in`): an HTTP client logging ``https://user:pass@host/…`` writes
    ``https://user:***@host/…``. Idempotent."""

    current = logging.getLogRecordFactory()
    if getattr(current, "_rcea_masks_urls", False):
        return

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = current(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is logging's to report
            return record
        masked = mask_urls_in(message)
        if masked != message:
            record.msg, record.args = masked, None
        return record

    factory._rcea_masks_urls = True  # type: ignore[attr-defined]  # a marker attribute on the installed record factory, so it is wrapped once
    logging.setLogRecordFactory(factory)
