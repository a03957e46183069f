"""A Label Studio server owned by the project: started, checked and stopped by us.

The server runs from its own virtual environment (``.venv-labelstudio``; its Django pins
clash with ours) as a detached process bound to loopback, with its data, log, pid file and
generated admin credentials under ``<data_dir>/labelstudio``.

Why it is launched the way it is (Label Studio 1.23.2, read from its ``server.py`` and
``core/settings``):

* Its environment is built from an allow-list, not inherited: Label Studio reads bare
  ``USERNAME``/``PASSWORD``/``PORT``/``HOST``/``DEBUG``/``CI``/``SECRET_KEY``/... (every
  setting ``X`` is looked up as ``LABEL_STUDIO_X``, ``HEARTEX_X`` and ``X``), so a stray shell
  variable could create another superuser, move the port or switch on debug.
* Admin e-mail, password and preset token go in the environment (``LABEL_STUDIO_USERNAME``,
  ``LABEL_STUDIO_PASSWORD``, ``LABEL_STUDIO_USER_TOKEN``), not on the command line, where every
  local user could read them in ``ps``. They take effect at the FIRST boot of a data dir only;
  later boots leave the existing admin alone, which :meth:`LabelStudioServer.start` detects by
  checking the token against ``/api/current-user/whoami``.
* ``--debug`` only stops Label Studio from silently moving to the next free port when ours is
  taken (in 1.23.2 that flag is read by ``_get_free_port`` and nowhere else; Django's
  ``DEBUG`` stays off through ``LABEL_STUDIO_DEBUG=false``).
* ``LABEL_STUDIO_BASE_DATA_DIR`` is set as well as ``--data-dir``: the argument parser imports
  the settings before ``--data-dir`` is applied and would create ``~/.local/share/label-studio``.
* Its settings module is rcea's (``DJANGO_SETTINGS_MODULE=rcea_labelstudio_settings`` from
  ``rcea/annotation/labelstudio_site/`` on ``PYTHONPATH``): Label Studio's settings with SSRF
  protection on, so an annotator cannot make the server fetch URLs (URL import, storages,
  ML backends), and an allow-list that admits only webhooks to rcea's receiver path
  (``/webhooks/label-studio/<slug>``) on loopback.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psutil
from pydantic import SecretStr

from rcea.annotation import server_template
from rcea.annotation.client import http_client, is_healthy
from rcea.annotation.file_lock import file_lock

REPO_ROOT = Path(__file__).resolve().parents[2]
LS_SUBDIR = "labelstudio"
PID_FILE = "server.pid"
LOG_FILE = "server.log"
CREDENTIALS_FILE = "credentials.json"
LOCK_FILE = ".start.lock"
BIN_ENV = "RCEA_LABELSTUDIO_BIN"
DEFAULT_ADMIN = "admin@rcea.local"
DEFAULT_START_TIMEOUT = 300.0  # an installation's first boot migrates (≈ 90 s on 2 busy cores)
TOKEN_MIN, TOKEN_MAX = 6, 40  # LS ignores tokens of 5 chars or fewer; DRF keys are varchar(40)
PASSWORD_MIN = 8  # LS password validator

# Variables passed through from our environment; everything else is dropped (see module doc).
KEEP_ENV = ("PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP", "SYSTEMROOT")

#: Label Studio's settings module as rcea launches it (SSRF protection on, rcea's webhook
#: receiver allowed): rcea/annotation/labelstudio_site/rcea_labelstudio_settings.py.
SITE_DIR = Path(__file__).resolve().parent / "labelstudio_site"

# Fixed Label Studio settings for every launch.
SERVER_ENV: dict[str, str] = {
    # Organisations created without it reject legacy ``Token`` keys, our preset token
    # included; it is read when the organisation is created, i.e. at the first boot.
    "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",
    # SSRF protection on: annotators cannot make the server fetch URLs (URL import,
    # storages, ML backends); the settings module admits rcea's webhook receiver only.
    "LABEL_STUDIO_SSRF_PROTECTION_ENABLED": "true",
    "DJANGO_SETTINGS_MODULE": "rcea_labelstudio_settings",
    # By default anyone reaching /user/signup/ may join the organisation; require the invite.
    "LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK": "true",
    # Nothing phones home: no usage analytics, PyPI version check, Sentry (its DSN has a
    # non-empty default; an empty value switches it off), remote feature flags or
    # converter downloads.
    "LABEL_STUDIO_COLLECT_ANALYTICS": "false",
    "LABEL_STUDIO_LATEST_VERSION_CHECK": "false",
    "LABEL_STUDIO_SENTRY_DSN": "",
    "LABEL_STUDIO_FRONTEND_SENTRY_DSN": "",
    "LABEL_STUDIO_FEATURE_FLAGS_OFFLINE": "true",
    "LABEL_STUDIO_CONVERTER_DOWNLOAD_RESOURCES": "false",
    "LABEL_STUDIO_DEBUG": "false",
    "PYTHONUNBUFFERED": "1",
}


class LabelStudioError(RuntimeError):
    """The managed server could not be started, reached or used; the message says why."""


@dataclass(frozen=True)
class Credentials:
    """The admin account; ``repr`` hides the secrets so they never reach a log."""

    username: str
    password: str = field(repr=False)
    token: str = field(repr=False)


@dataclass(frozen=True)
class ServerStatus:
    running: bool  # our pid file names a live label-studio process of this data dir
    pid: int | None
    url: str
    healthy: bool  # GET /health/ answers 200 at url
    log_path: Path

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["log_path"] = str(self.log_path)
        return out


# ---------------------------------------------------------------------------- helpers


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_loopback_url(url: str) -> tuple[str, int]:
    """``(host, port)`` of a ``http://<loopback>:<port>`` URL; we only manage local servers."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or parts.port is None:
        raise LabelStudioError(
            f"RCEA_LABELSTUDIO_URL={url!r}: a managed server needs http://<host>:<port>"
        )
    if not is_loopback(parts.hostname):
        raise LabelStudioError(
            f"RCEA_LABELSTUDIO_URL={url!r}: rcea manages a Label Studio on loopback only "
            "(127.0.0.1 or localhost)"
        )
    return parts.hostname, parts.port


def default_executable() -> Path:
    """``$RCEA_LABELSTUDIO_BIN``, else the one ``make install`` puts in ``.venv-labelstudio``."""
    from_env = os.environ.get(BIN_ENV)
    return Path(from_env) if from_env else REPO_ROOT / ".venv-labelstudio" / "bin" / "label-studio"


def check_executable(path: Path) -> Path:
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise LabelStudioError(
            f"label-studio executable not found at {path}; run `make install` "
            f"(it creates .venv-labelstudio) or set {BIN_ENV}"
        )
    return path


def scrubbed_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed part of ``base`` (default ``os.environ``)."""
    base = os.environ if base is None else base
    env = {k: v for k, v in base.items() if k in KEEP_ENV or k.startswith("LC_")}
    env.setdefault("PATH", os.defpath)
    return env


def server_env(
    home: Path, creds: Credentials | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The complete environment of a Label Studio process for data dir ``home``."""
    env = scrubbed_env(base)
    env.update(SERVER_ENV)
    env["LABEL_STUDIO_BASE_DATA_DIR"] = str(home)
    env["PYTHONPATH"] = str(SITE_DIR)  # rcea_labelstudio_settings (see SERVER_ENV)
    if creds is not None:
        env["LABEL_STUDIO_USERNAME"] = creds.username
        env["LABEL_STUDIO_PASSWORD"] = creds.password
        env["LABEL_STUDIO_USER_TOKEN"] = creds.token
    return env


def server_command(executable: Path, home: Path, host: str, port: int) -> list[str]:
    return [
        str(executable),
        "start",
        "--no-browser",
        "--data-dir",
        str(home),
        "--internal-host",  # default 0.0.0.0 would listen on every interface
        host,
        "--port",
        str(port),
        "--enable-legacy-api-token",
        "--debug",  # fail instead of moving to the next free port (see module doc)
        "--log-level",
        "WARNING",
    ]


def _secret(value: str | SecretStr | None) -> str | None:
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    return value or None


def _check_token(token: str) -> str:
    if not (TOKEN_MIN <= len(token) <= TOKEN_MAX) or not token.isascii() or not token.isalnum():
        raise LabelStudioError(
            f"the Label Studio token must be {TOKEN_MIN}-{TOKEN_MAX} ASCII letters or digits"
        )
    return token


def _check_password(password: str) -> str:
    if len(password) < PASSWORD_MIN:
        raise LabelStudioError(f"Label Studio passwords need at least {PASSWORD_MIN} characters")
    return password


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (0600 from creation on)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def load_or_create_credentials(
    home: Path, username: str, password: str | None = None, token: str | None = None
) -> Credentials:
    """Explicit values win; missing ones come from ``credentials.json`` or are generated once
    and stored there (mode 0600). Nothing here is ever printed."""
    path = home / CREDENTIALS_FILE
    stored: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
    to_store = {**stored, "username": username}
    if password is None and not stored.get("password"):
        to_store["password"] = secrets.token_urlsafe(18)
    if token is None and not stored.get("token"):
        to_store["token"] = secrets.token_hex(20)
    if to_store != stored:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        _write_private(path, json.dumps(to_store, indent=2) + "\n")
    return Credentials(
        username,
        _check_password(password or to_store["password"]),
        _check_token(token or to_store["token"]),
    )


# ----------------------------------------------------------------------------- server


class LabelStudioServer:
    """One Label Studio process for one rcea data dir; see the module doc for the launch."""

    def __init__(
        self,
        data_dir: Path,
        port: int,
        host: str = "127.0.0.1",
        username: str = DEFAULT_ADMIN,
        password: str | SecretStr | None = None,
        token: str | SecretStr | None = None,
        executable: Path | None = None,
        home: Path | None = None,
    ) -> None:
        if not is_loopback(host):
            raise LabelStudioError(f"host {host!r}: the managed Label Studio binds loopback only")
        self.data_dir = Path(data_dir).resolve()
        # One person's server lives in its own home (see rcea.annotation.people).
        self.home = Path(home).resolve() if home is not None else self.data_dir / LS_SUBDIR
        self.host = host
        self.port = int(port)
        self.username = username
        self._password = _secret(password)
        self._token = _secret(token)
        self._executable = Path(executable) if executable else None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    # paths and identity
    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.home / PID_FILE

    @property
    def log_file(self) -> Path:
        return self.home / LOG_FILE

    @property
    def credentials_file(self) -> Path:
        return self.home / CREDENTIALS_FILE

    def executable(self) -> Path:
        return check_executable(self._executable or default_executable())

    def credentials(self) -> Credentials:
        return load_or_create_credentials(self.home, self.username, self._password, self._token)

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment the server is launched with (secrets included: do not log it)."""
        return server_env(self.home, self.credentials(), base)

    def __repr__(self) -> str:
        return f"LabelStudioServer(url={self.url!r}, home={str(self.home)!r})"

    # public API
    def start(self, timeout: float = DEFAULT_START_TIMEOUT) -> ServerStatus:
        """Start the server, or reuse ours if it is already running; return when healthy.

        Raises ``LabelStudioError`` with the log tail when it exits or stays unhealthy for
        ``timeout`` seconds (a process we launched is then stopped again).
        """
        deadline = time.monotonic() + timeout
        self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        with self._start_lock():
            proc = self._recorded_process(remove_stale=True)
            if proc is None:
                self._seed_database(deadline)
                proc = self._launch()
                try:
                    self._wait_ready(proc, deadline, timeout)
                except BaseException:
                    self._terminate(proc)
                    self.pid_file.unlink(missing_ok=True)
                    raise
            else:
                self._refuse_other_port()
                self._wait_ready(proc, deadline, timeout)  # may still be booting elsewhere
        self._check_admin()
        return self.status()

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the process recorded in our pid file; True if one was stopped.

        Only a live label-studio process started for this data dir (same pid, start time and
        ``--data-dir``) is signalled; any other pid in the file is left alone and the stale
        file removed.
        """
        proc = self._recorded_process(remove_stale=True)
        if proc is None:
            return False
        self._terminate(proc, timeout)
        self.pid_file.unlink(missing_ok=True)
        return True

    def status(self) -> ServerStatus:
        proc = self._recorded_process(remove_stale=False)
        return ServerStatus(
            running=proc is not None,
            pid=proc.pid if proc else None,
            url=self.url,
            healthy=is_healthy(self.url),
            log_path=self.log_file,
        )

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines the current (or last) launch wrote."""
        if not self.log_file.exists():
            return "(no log)"
        with self.log_file.open("rb") as fh:
            fh.seek(min(self._log_offset, self.log_file.stat().st_size))
            text = fh.read().decode("utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    # pid file and process identity
    def _read_pid_record(self) -> dict[str, Any] | None:
        try:
            raw = self.pid_file.read_text().strip()
        except FileNotFoundError:
            return None
        try:
            record = json.loads(raw)
        except json.JSONDecodeError:
            return {"pid": -1}
        if isinstance(record, int):  # a bare pid, e.g. written by hand
            return {"pid": record}
        return record if isinstance(record, dict) else {"pid": -1}

    def _write_pid_record(self, proc: psutil.Process) -> None:
        record = {
            "pid": proc.pid,
            "create_time": proc.create_time(),
            "host": self.host,
            "port": self.port,
            "home": str(self.home),
        }
        _write_private(self.pid_file, json.dumps(record) + "\n")

    def _recorded_process(self, *, remove_stale: bool) -> psutil.Process | None:
        record = self._read_pid_record()
        if record is None:
            return None
        proc = self._if_ours(record)
        if proc is None and remove_stale:
            self.pid_file.unlink(missing_ok=True)
        return proc

    def _if_ours(self, record: dict[str, Any]) -> psutil.Process | None:
        """The process in ``record`` if it is a live label-studio server of this data dir."""
        self._reap()
        try:
            proc = psutil.Process(int(record.get("pid", -1)))
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            created = record.get("create_time")
            if created is None or abs(proc.create_time() - float(created)) > 1.0:
                return None  # the pid was reused, or the file was not written by us
            cmdline = proc.cmdline()
        except (psutil.Error, ValueError, TypeError):
            return None
        is_ls = any(Path(arg).name == "label-studio" for arg in cmdline[:2]) and "start" in cmdline
        return proc if is_ls and str(self.home) in cmdline else None

    # launching and waiting
    def _launch(self) -> psutil.Process:
        executable = self.executable()
        env = self.env()
        self._refuse_busy_port()
        self._log_offset = self.log_file.stat().st_size if self.log_file.exists() else 0
        fd = os.open(self.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "ab") as log:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            log.write(f"=== rcea: starting label-studio on {self.url} at {stamp} ===\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                server_command(executable, self.home, self.host, self.port),
                env=env,
                cwd=self.home,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # outlives `rcea labelstudio start`, ignores its Ctrl-C
            )
        proc = psutil.Process(self._proc.pid)
        self._write_pid_record(proc)
        return proc

    def _seed_database(self, deadline: float) -> None:
        """A data dir without a database starts from the installation's migrated template
        (``rcea.annotation.server_template``): the first boot then skips Label Studio's
        migrations. On any failure the server migrates its own database; the log says why."""
        if (self.home / server_template.DB_FILE).exists():
            return
        try:
            template = server_template.migrated_database(
                self.executable(), server_env(self.home), max(30.0, deadline - time.monotonic())
            )
            server_template.seed_data_dir(self.home, template)
            note = f"database copied from the migrated template {template}"
        except (OSError, server_template.TemplateError) as exc:
            note = f"no migrated template ({exc}); Label Studio migrates this database itself"
        fd = os.open(self.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a") as log:
            log.write(f"=== rcea: {note} ===\n")

    def _refuse_busy_port(self) -> None:
        with socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET) as sock:
            sock.settimeout(1.0)
            busy = sock.connect_ex((self.host, self.port)) == 0
        if busy:
            raise LabelStudioError(
                f"port {self.port} on {self.host} is already in use by a process that is not "
                f"the Label Studio recorded in {self.pid_file}; stop it or choose another port "
                "in RCEA_LABELSTUDIO_URL"
            )

    def _refuse_other_port(self) -> None:
        recorded = (self._read_pid_record() or {}).get("port")
        if recorded != self.port:
            raise LabelStudioError(
                f"Label Studio for {self.home} already runs on port {recorded}, not {self.port}; "
                "`rcea labelstudio stop` it first"
            )

    def _wait_ready(self, proc: psutil.Process, deadline: float, timeout: float) -> None:
        """Until our process is healthy and is the one listening on our port."""
        while True:
            if not self._alive(proc):
                raise LabelStudioError(
                    f"Label Studio exited{self._exit_note(proc)} before answering at {self.url}; "
                    f"log {self.log_file}:\n{self.log_tail()}"
                )
            if is_healthy(self.url) and self._listens(proc):
                return
            if time.monotonic() >= deadline:
                raise LabelStudioError(
                    f"Label Studio (pid {proc.pid}) did not become healthy at {self.url} "
                    f"within {timeout:.0f}s; log {self.log_file}:\n{self.log_tail()}"
                )
            time.sleep(0.5)

    def _alive(self, proc: psutil.Process) -> bool:
        self._reap()
        try:
            return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def _exit_note(self, proc: psutil.Process) -> str:
        child = self._proc
        if child is not None and child.pid == proc.pid and child.returncode is not None:
            return f" with code {child.returncode}"
        return ""

    def _listens(self, proc: psutil.Process) -> bool:
        try:
            conns = proc.net_connections(kind="inet")
        except psutil.AccessDenied:
            return True  # cannot tell; the health check has to do
        except psutil.Error:
            return False
        return any(c.status == psutil.CONN_LISTEN and c.laddr.port == self.port for c in conns)

    def _check_admin(self) -> None:
        """Fail clearly when the token is not the one this data dir was first booted with."""
        creds = self.credentials()
        with http_client(self.url, timeout=30.0) as client:
            try:
                resp = client.get(
                    "/api/current-user/whoami", headers={"Authorization": f"Token {creds.token}"}
                )
            except httpx.HTTPError as exc:
                raise LabelStudioError(f"Label Studio at {self.url} did not answer: {exc}") from exc
        if resp.status_code in (401, 403):
            raise LabelStudioError(
                f"Label Studio at {self.url} rejects the admin token. It keeps the token of its "
                f"first boot of {self.home}: set RCEA_LABELSTUDIO_TOKEN to that one (or remove "
                f"{self.home} to start afresh; that deletes all its projects)"
            )
        resp.raise_for_status()
        email = resp.json().get("email", "")
        if email.lower() != creds.username.lower():
            raise LabelStudioError(
                f"the admin token belongs to {email!r}, not to RCEA_LABELSTUDIO_USER "
                f"{creds.username!r}"
            )

    # stopping
    def _terminate(self, proc: psutil.Process, timeout: float = 30.0) -> None:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
            _, alive = psutil.wait_procs([proc], timeout=timeout)
            for p in alive:
                p.kill()
            psutil.wait_procs(alive, timeout=10)
        self._reap()

    def _reap(self) -> None:
        """Collect our own exited child so it does not linger as a zombie."""
        if self._proc is not None:
            self._proc.poll()

    def _start_lock(self) -> contextlib.AbstractContextManager[None]:
        """Serialise concurrent ``start`` calls for one data dir (two would race for the port)."""
        return file_lock(self.home / LOCK_FILE)
