"""The team's own servers behind the front door: the REST API (``rcea serve``) and the view
(``rcea view``), started, checked and stopped like the Label Studio servers (docs/team.md).

``rcea labelstudio start --public HOST`` starts both on loopback (``127.0.0.1``, at
``RCEA_API_PORT`` and ``RCEA_VIEW_PORT``) before it opens the door; ``stop`` stops them after
closing it. Each runs detached (its own session: it outlives the command and ignores its
Ctrl-C) with its pid record and log under ``<data_dir>/frontdoor/`` (``api.pid``,
``api.log``, ``view.pid``, ``view.log``). Starting again reuses a running one (the pid
record names the pid, its start time and its port: a reused pid is never taken for ours);
a port held by anything else is refused with one line naming it.

The API stays on loopback, so the webhook receiver Label Studio posts to
(``/webhooks/label-studio/<person>``) is reached there and never through the door, which
answers 404 for it.

The commands come from the caller (the CLI); this module only runs processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from rcea.annotation.file_lock import file_lock
from rcea.annotation.frontdoor import DOOR_SUBDIR

HOST = "127.0.0.1"
DEFAULT_TIMEOUT = 120.0  # the view's first start imports pandas, plotly and streamlit


class ServiceError(RuntimeError):
    """A team service could not be started or stopped; the message says why."""


@dataclass(frozen=True)
class Service:
    """One loopback server behind the door."""

    name: str  # "api" | "view": also the door's route name
    command: tuple[str, ...]  # how to run it (must bind HOST:port)
    port: int
    health_path: str  # answers 200 once it serves

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    running: bool
    pid: int | None
    url: str
    healthy: bool
    log: Path

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "running": self.running,
            "pid": self.pid,
            "url": self.url,
            "healthy": self.healthy,
            "log": str(self.log),
        }


class ServiceProcess:
    """One service of one data dir: ``<data_dir>/frontdoor/<name>.pid`` and ``.log``."""

    def __init__(self, data_dir: Path, service: Service) -> None:
        self.service = service
        self.dir = Path(data_dir).resolve() / DOOR_SUBDIR

    @property
    def pid_file(self) -> Path:
        return self.dir / f"{self.service.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.dir / f"{self.service.name}.log"

    # the process we started, if it still runs
    def running(self) -> psutil.Process | None:
        try:
            record = json.loads(self.pid_file.read_text())
            proc = psutil.Process(int(record["pid"]))
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            if abs(proc.create_time() - float(record["create_time"])) > 1.0:
                return None  # the pid was reused
            if int(record["port"]) != self.service.port:
                return None
            cmdline = proc.cmdline()
        except (OSError, ValueError, KeyError, TypeError, psutil.Error):
            return None
        return proc if str(self.service.port) in cmdline else None

    def healthy(self) -> bool:
        try:
            resp = httpx.get(self.service.url + self.service.health_path, timeout=3.0)
        except httpx.HTTPError:
            return False
        return resp.status_code == 200

    def status(self) -> ServiceStatus:
        proc = self.running()
        return ServiceStatus(
            self.service.name,
            proc is not None,
            proc.pid if proc else None,
            self.service.url,
            self.healthy() if proc else False,
            self.log_file,
        )

    def start(
        self, env: Mapping[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT
    ) -> ServiceStatus:
        """Start the service, or reuse ours if it runs; return when it answers its health
        check (a process we launched that does not is stopped again, and the error names
        its log)."""
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        with file_lock(self.dir / f".{self.service.name}.lock"):
            proc = self.running()
            launched = proc is None
            if proc is None:
                self._refuse_busy_port()
                proc = self._launch(env)
            try:
                self._wait_healthy(proc, timeout)
            except ServiceError:
                if launched:
                    self._terminate(proc)
                    self.pid_file.unlink(missing_ok=True)
                raise
        return self.status()

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the process in our pid record (and its children); True if one ran."""
        proc = self.running()
        if proc is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        self._terminate(proc, timeout)
        self.pid_file.unlink(missing_ok=True)
        return True

    # helpers
    def _refuse_busy_port(self) -> None:
        with socket.socket() as sock:
            sock.settimeout(1.0)
            busy = sock.connect_ex((HOST, self.service.port)) == 0
        if busy:
            raise ServiceError(
                f"port {self.service.port} on {HOST} is in use by a process rcea did not start "
                f"as the team's {self.service.name}; stop it, or choose another port "
                f"(RCEA_{self.service.name.upper()}_PORT)"
            )

    def _launch(self, env: Mapping[str, str] | None) -> psutil.Process:
        fd = os.open(self.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "ab") as log:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            log.write(f"=== rcea: starting the {self.service.name} at {stamp} ===\n".encode())
            log.flush()
            child = subprocess.Popen(
                list(self.service.command),
                env=dict(env) if env is not None else None,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # outlives the command, ignores its Ctrl-C
            )
        proc = psutil.Process(child.pid)
        record = {
            "pid": proc.pid,
            "create_time": proc.create_time(),
            "port": self.service.port,
            "health": self.service.health_path,
        }
        fd = os.open(self.pid_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(record) + "\n")
        self._child = child  # reaped when it exits (no zombie in this process)
        return proc

    def _wait_healthy(self, proc: psutil.Process, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.healthy():
            child = getattr(self, "_child", None)
            if child is not None:
                child.poll()
            alive = proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
            if not alive:
                raise ServiceError(
                    f"the {self.service.name} exited before answering at {self.service.url}; "
                    f"log {self.log_file}:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise ServiceError(
                    f"the {self.service.name} (pid {proc.pid}) did not answer at "
                    f"{self.service.url} within {timeout:.0f} s; log {self.log_file}:\n"
                    f"{self.log_tail()}"
                )
            time.sleep(0.3)

    def _terminate(self, proc: psutil.Process, timeout: float = 30.0) -> None:
        with contextlib.suppress(psutil.Error):
            family = [proc, *proc.children(recursive=True)]
            proc.terminate()  # uvicorn and Streamlit shut down their workers on SIGTERM
            _, alive = psutil.wait_procs(family, timeout=timeout)
            for p in alive:
                with contextlib.suppress(psutil.Error):
                    p.kill()
            psutil.wait_procs(alive, timeout=10)
        child = getattr(self, "_child", None)
        if child is not None:
            child.poll()

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def start_services(
    data_dir: Path,
    services: Sequence[Service],
    env: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> list[ServiceStatus]:
    """Start (or reuse) each service in order; the first failure raises."""
    return [ServiceProcess(data_dir, s).start(env, timeout) for s in services]


def stop_services(data_dir: Path, names: Sequence[str]) -> list[str]:
    """Stop the named services rcea started (found by their pid records); the names of
    those that ran."""
    stopped = []
    for name in names:
        # the command and port are read back from the pid record: any placeholder will do
        record = _record(data_dir, name)
        if record is None:
            continue
        proc = ServiceProcess(data_dir, Service(name, (), int(record["port"]), "/"))
        if proc.stop():
            stopped.append(name)
    return stopped


def service_statuses(data_dir: Path, names: Sequence[str]) -> dict[str, ServiceStatus]:
    """The services that have a pid record (started by rcea at least once)."""
    out = {}
    for name in names:
        record = _record(data_dir, name)
        if record is not None:
            service = Service(name, (), int(record["port"]), str(record.get("health", "/")))
            out[name] = ServiceProcess(data_dir, service).status()
    return out


def _record(data_dir: Path, name: str) -> dict[str, Any] | None:
    path = Path(data_dir).resolve() / DOOR_SUBDIR / f"{name}.pid"
    try:
        record = json.loads(path.read_text())
        int(record["port"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return record if isinstance(record, dict) else None
