"""A migrated, empty Label Studio database to start new data dirs from.

Label Studio's first boot of a data dir runs every Django migration of its database
(396 in 1.23.2) before it creates the admin; later boots find the
database in step and skip them. rcea gives every person a server of their own, so a demo
or a new team boots several fresh data dirs: this module runs the migrations **once per
Label Studio installation** and copies the result into each new data dir before its first
boot. Label Studio then does exactly what it does on any boot of a migrated database: checks
that no migration is pending, creates the admin from ``LABEL_STUDIO_USERNAME`` / ``…PASSWORD``
/ ``…USER_TOKEN``, and serves.

What the template holds: the state right after ``label_studio.server``'s own
``_apply_database_migrations()`` in an empty temporary data dir, under the same allow-listed
environment as a server (``server_env`` without credentials) — tables, content types,
permissions; **no user, organisation, token or project** (checked in
``tests/annotation/test_server_template.py``). Only ``label_studio.sqlite3`` is copied: the
Django secret key (``.env``), media and exports are each server's own.

Where: ``$XDG_CACHE_HOME/rcea/labelstudio-db/<key>/`` (default ``~/.cache``), ``<key>`` a
hash of the executable's resolved path, size and modification time, so a reinstalled Label
Studio gets a new template. A template that lags the installation is still safe: Label
Studio applies whatever migrations are missing at boot. Anything failing here (no venv
``python`` next to the executable, an unwritable cache, a failed migration) only means the
server migrates its own database, as without a template; the reason goes to the server log.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from rcea.annotation.file_lock import file_lock

DB_FILE = "label_studio.sqlite3"
CREDENTIAL_ENV = ("LABEL_STUDIO_USERNAME", "LABEL_STUDIO_PASSWORD", "LABEL_STUDIO_USER_TOKEN")
CACHE_SUBDIR = ("rcea", "labelstudio-db")
#: run by the installation's own Python, as ``label-studio start`` does before serving
MIGRATE = (
    "from label_studio.server import _apply_database_migrations, _setup_env; "
    "_setup_env(); _apply_database_migrations()"
)


class TemplateError(RuntimeError):
    """The template could not be made; the server will migrate its own database."""


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).joinpath(*CACHE_SUBDIR)


def template_dir(executable: Path) -> Path:
    """The template's directory for one Label Studio installation (see module doc)."""
    st = executable.stat()
    key = f"{executable.resolve()}\0{st.st_size}\0{st.st_mtime_ns}".encode()
    return cache_root() / hashlib.sha256(key).hexdigest()[:16]


def migrated_database(executable: Path, env: dict[str, str], timeout: float) -> Path:
    """The template database of ``executable``'s installation, made on first use (one
    process migrates under a file lock; concurrent callers wait for it and reuse it).

    ``env``: the server environment for an empty data dir, without credentials
    (``LABEL_STUDIO_BASE_DATA_DIR`` is replaced by a temporary directory)."""
    python = executable.parent / "python"
    if not python.exists():
        raise TemplateError(f"no Python next to {executable} (not a virtual environment)")
    where = template_dir(executable)
    db = where / DB_FILE
    if db.exists():
        return db
    where.mkdir(mode=0o700, parents=True, exist_ok=True)
    with file_lock(where / ".lock"):
        if db.exists():  # made by the process we waited for
            return db
        with tempfile.TemporaryDirectory(dir=where, prefix="migrating-") as tmp:
            run_env = {k: v for k, v in env.items() if k not in CREDENTIAL_ENV}
            run_env["LABEL_STUDIO_BASE_DATA_DIR"] = tmp
            try:
                res = subprocess.run(
                    [str(python), "-c", MIGRATE],
                    env=run_env,
                    cwd=tmp,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                )
            except subprocess.TimeoutExpired as exc:
                raise TemplateError(f"migrations took longer than {timeout:.0f} s") from exc
            made = Path(tmp) / DB_FILE
            if res.returncode != 0 or not made.exists():
                tail = (res.stdout + res.stderr).strip().splitlines()[-5:]
                raise TemplateError(f"migrations failed (exit {res.returncode}): {tail}")
            os.chmod(made, 0o600)
            os.replace(made, db)  # atomic: a reader sees no template or a whole one
    return db


def seed_data_dir(home: Path, template: Path) -> bool:
    """Copy ``template`` into the data dir ``home`` if it has no database yet (atomically:
    a partial copy never becomes the database). True when copied."""
    target = home / DB_FILE
    if target.exists():
        return False
    partial = home / f".{DB_FILE}.partial"
    shutil.copyfile(template, partial)
    os.chmod(partial, 0o600)
    os.replace(partial, target)
    return True
