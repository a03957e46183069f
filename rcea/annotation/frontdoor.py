"""The front door: one nginx, started, configured and stopped by rcea, the only thing a
team's laptops reach (docs/team.md).

Why nginx (Debian's ``nginx-light``, installed by ``make install`` through ``.ci/nginx``):
its ``limit_req`` holds login attempts at the door; Debian's Caddy has no rate-limit module.

What the generated ``<data_dir>/frontdoor/nginx.conf`` does, per public port:

* **TLS only.** Every public port speaks TLS (1.2 and 1.3). Plain HTTP sent to it is
  answered by nginx's ``error_page 497`` with a redirect to the same port over HTTPS and never
  reaches a backend. No plain-HTTP port is opened: browsers apply HSTS to every port of a host
  name, so a plain port would only break after the first HTTPS visit.
* **HSTS** (``Strict-Transport-Security: max-age=31536000``) on every answer.
* **One name.** A request whose ``Host`` is not the public name gets 421 (no spoofed Host
  header reaches a backend).
* **Secure cookies.** ``proxy_cookie_flags ~ secure`` marks every cookie a backend sets
  (Label Studio's session and CSRF cookies, Streamlit's) ``Secure``.
* **Logins held.** ``POST`` to a Label Studio login or sign-up form (``/user/login/``,
  ``/user/signup/``), to the view's login (``/_rcea/login``: a plain HTTP form the view
  serves for the door, since its Streamlit form talks over a websocket nginx cannot count)
  and to the view's ``/auth/`` paths (OIDC) is limited per client address and port (that
  is, per person): :data:`LOGIN_BURST` attempts at once, then one every
  ``60 / LOGIN_PER_MINUTE`` seconds; beyond that the door answers 429.
* **Backends on loopback.** Each person's Label Studio, the view and the API stay bound to
  127.0.0.1 (``start --public`` runs the API and the view there:
  :mod:`rcea.annotation.team_services`); the door passes ``Host: <name>:<port>`` and
  ``X-Forwarded-Proto: https``, which rcea's Label Studio settings trust for its CSRF origin
  check and by which the view knows a request came through the door. The API's webhook receiver
  (``/webhooks/``) is not served at the door: Label Studio posts to it on loopback.

Ports: the view on the public port (default 8443), the API on the next one, and each person
on a port of their own from the one after, kept in ``door.json`` for as long as the person
is registered (a removed person's port, and route, closes).
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil

from rcea.annotation.file_lock import file_lock
from rcea.annotation.tls import Certificate

DOOR_SUBDIR = "frontdoor"
STATE_FILE = "door.json"
CONF_FILE = "nginx.conf"
PID_FILE = "nginx.pid"
ERROR_LOG = "error.log"
ACCESS_LOG = "access.log"
NGINX_ENV = "RCEA_NGINX_BIN"
DEFAULT_NGINX = Path("/usr/sbin/nginx")
MIME_TYPES = Path("/etc/nginx/mime.types")
DEFAULT_PUBLIC_PORT = 8443
LOGIN_PER_MINUTE = 10  # sustained login attempts per client address and person
LOGIN_BURST = 10  # attempts accepted at once (the 11th within a minute gets 429)
MAX_BODY = "8m"  # request bodies held in memory (never written to disk by the workers)
VIEW, API, LABELSTUDIO = "view", "api", "labelstudio"
#: the view's HTTP login (rcea/app/view/door_login.py): held like Label Studio's
VIEW_LOGIN = "/_rcea/login"
LOCAL, COMPOSE = "local", "compose"
#: Docker's embedded DNS: in compose the door resolves the services' names when a request
#: comes (a person's server that is not up yet does not keep the door from starting).
COMPOSE_RESOLVER = "127.0.0.11"
COMPOSE_PID = "/tmp/rcea-frontdoor.pid"


class FrontDoorError(RuntimeError):
    """The door could not be configured, started or stopped; the message says why."""


@dataclass(frozen=True)
class Route:
    """One public port of the door and the loopback server behind it."""

    name: str  # "view", "api" or a person's slug
    kind: str  # VIEW | API | LABELSTUDIO
    port: int  # public port
    upstream: str  # http://host:port of the server behind the door

    def public_url(self, host: str) -> str:
        shown = f"[{host}]" if ":" in host else host
        return f"https://{shown}:{self.port}"


@dataclass(frozen=True)
class DoorState:
    """What the door was last configured with (``door.json``)."""

    public_host: str
    port: int  # the first public port (the view)
    bind: str  # the address nginx listens on
    cert: str
    key: str
    ca: str | None  # the local authority people trust; None for the operator's certificate
    routes: tuple[Route, ...]
    runtime: str = LOCAL  # LOCAL: rcea runs nginx here; COMPOSE: the compose service does

    def route(self, name: str) -> Route | None:
        return next((r for r in self.routes if r.name == name), None)

    def public_url(self, name: str) -> str | None:
        route = self.route(name)
        return route.public_url(self.public_host) if route else None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["routes"] = [asdict(r) for r in self.routes]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DoorState:
        return cls(
            public_host=str(data["public_host"]),
            port=int(data["port"]),
            bind=str(data.get("bind", "0.0.0.0")),
            cert=str(data["cert"]),
            key=str(data["key"]),
            ca=data.get("ca"),
            routes=tuple(Route(**r) for r in data.get("routes", [])),
            runtime=str(data.get("runtime", LOCAL)),
        )


@dataclass(frozen=True)
class DoorStatus:
    running: bool
    pid: int | None
    state: DoorState | None
    error_log: Path

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"running": self.running, "pid": self.pid}
        out["error_log"] = str(self.error_log)
        if self.state is not None:
            out["public_host"] = self.state.public_host
            out["ca_file"] = self.state.ca
            out["urls"] = {r.name: r.public_url(self.state.public_host) for r in self.state.routes}
        return out


def check_public_host(host: str) -> str:
    """A host name or address a browser can put in a URL; one clear error otherwise."""
    host = host.strip()
    bare = host.strip("[]")
    ok = bool(bare) and len(bare) <= 253 and all(c.isalnum() or c in "-.:" for c in bare)
    if not ok or bare in ("0.0.0.0", "::"):
        raise FrontDoorError(
            f"public host {host!r}: give the name (or address) people type in their browser, "
            "e.g. labelling.example.org"
        )
    return bare.lower()


def assign_ports(previous: dict[str, int], people: Iterable[str], base: int) -> dict[str, int]:
    """Public ports: the view on ``base``, the API on ``base + 1``, each person on the port
    they had (while registered) or the lowest free one above."""
    if not 1024 <= base <= 65533:
        raise FrontDoorError(f"public port {base}: choose one from 1024 to 65533")
    out = {VIEW: base, API: base + 1}
    wanted = list(people)
    for name in wanted:
        port = previous.get(name)
        if port is not None and port >= base + 2 and port not in out.values():
            out[name] = port
    for name in wanted:
        if name not in out:
            port = base + 2
            while port in out.values():
                port += 1
            out[name] = port
    if max(out.values()) > 65535:
        raise FrontDoorError(f"public port {base}: too high for {len(wanted)} people")
    return out


# ------------------------------------------------------------------------ configuration


def _upstream(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.port is None:
        raise FrontDoorError(f"{url!r}: a server behind the door needs http://host:port")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}:{parts.port}"


def _listen(bind: str, port: int) -> str:
    if bind in ("", "*", "0.0.0.0"):
        return f"{port} ssl"
    return f"[{bind}]:{port} ssl" if ":" in bind else f"{bind}:{port} ssl"


PROXY_HEADERS = """\
            proxy_set_header Host $host:$server_port;
            proxy_set_header X-Forwarded-Proto https;
            proxy_set_header X-Forwarded-For $remote_addr;
            proxy_set_header X-Real-IP $remote_addr;
            proxy_cookie_flags ~ secure;"""


def _locations(route: Route, runtime: str = LOCAL) -> str:
    up = route.upstream
    held = f"            limit_req zone=rcea_login burst={LOGIN_BURST - 1} nodelay;"
    if runtime == COMPOSE:  # a variable: resolved per request (COMPOSE_RESOLVER)
        plain = f"            set $rcea_up {up};\n            proxy_pass $rcea_up;\n{PROXY_HEADERS}"
    else:
        plain = f"            proxy_pass {up};\n{PROXY_HEADERS}"
    if route.kind == LABELSTUDIO:
        return f"""\
        location = /user/login/ {{
{held}
{plain}
        }}
        location = /user/signup/ {{
{held}
{plain}
        }}
        location / {{
{plain}
        }}"""
    if route.kind == VIEW:
        socket_headers = (
            "            proxy_http_version 1.1;\n"
            "            proxy_set_header Upgrade $http_upgrade;\n"
            "            proxy_set_header Connection $rcea_connection;\n"
            "            proxy_read_timeout 1d;"
        )
        return f"""\
        location = {VIEW_LOGIN} {{
{held}
{plain}
        }}
        location ^~ /auth/ {{
{held}
{plain}
        }}
        location = /oauth2callback {{
{held}
{plain}
        }}
        location / {{
{plain}
{socket_headers}
        }}"""
    return f"""\
        location ^~ /webhooks/ {{
            return 404;
        }}
        location / {{
{plain}
        }}"""


def render(
    state: DoorState,
    *,
    pid: str,
    error_log: str,
    access_log: str,
    temp_dir: str,
    workers_as_nobody: bool,
) -> str:
    """nginx.conf for ``state`` (see the module doc for what each part does)."""
    host = state.public_host
    name_check = f"[{host}]" if ":" in host else host
    user = "user nobody nogroup;\n" if workers_as_nobody else ""
    resolver = (
        f"    resolver {COMPOSE_RESOLVER} valid=10s ipv6=off;\n" if state.runtime == COMPOSE else ""
    )
    servers = []
    for route in state.routes:
        redirect = f"https://{name_check}:{route.port}$request_uri"
        servers.append(
            f"""\
    # {route.kind}: {route.name}
    server {{
        listen {_listen(state.bind, route.port)};
        server_name {name_check};
        error_page 497 =301 {redirect};
        if ($host != "{name_check}") {{
            return 421;
        }}
{_locations(route, state.runtime)}
    }}"""
        )
    temp = "\n".join(
        f"    {kind}_temp_path {temp_dir}/{kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""\
# Generated by rcea (rcea/annotation/frontdoor.py) for {host}; rewritten on every
# `rcea labelstudio start --public`, add-annotator and remove: do not edit.
{user}worker_processes 1;
pid {pid};
error_log {error_log} warn;

events {{
    worker_connections 1024;
}}

http {{
    include {MIME_TYPES};
    default_type application/octet-stream;
    access_log {access_log};
    server_tokens off;
    client_max_body_size {MAX_BODY};
    client_body_buffer_size {MAX_BODY};
    proxy_max_temp_file_size 0;
{resolver}{temp}
    gzip on;
    gzip_proxied any;
    gzip_types text/css application/javascript application/json image/svg+xml;

    ssl_certificate {state.cert};
    ssl_certificate_key {state.key};
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:rcea_tls:1m;
    add_header Strict-Transport-Security "max-age=31536000" always;
    add_header X-Content-Type-Options nosniff always;

    # Logins: POSTs only, keyed by client address and public port (one person's server).
    map $request_method $rcea_login_key {{
        POST "$binary_remote_addr$server_port";
        default "";
    }}
    limit_req_zone $rcea_login_key zone=rcea_login:1m rate={LOGIN_PER_MINUTE}r/m;
    limit_req_status 429;
    map $http_upgrade $rcea_connection {{
        default upgrade;
        "" close;
    }}

{chr(10).join(servers)}
}}
"""


# ---------------------------------------------------------------------------- process


def nginx_executable() -> Path:
    path = Path(os.environ.get(NGINX_ENV) or DEFAULT_NGINX)
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise FrontDoorError(
            f"nginx not found at {path}: run `make install` (it installs Debian's nginx-light "
            f"as root) or `sudo apt-get install nginx-light`, or set {NGINX_ENV}"
        )
    return path


class FrontDoor:
    """The door of one rcea data dir: ``<data_dir>/frontdoor`` holds its config, state,
    certificates, pid file and logs."""

    def __init__(self, data_dir: Path, executable: Path | None = None) -> None:
        self.dir = Path(data_dir).resolve() / DOOR_SUBDIR
        self._executable = executable

    @property
    def conf(self) -> Path:
        return self.dir / CONF_FILE

    @property
    def pid_file(self) -> Path:
        return self.dir / PID_FILE

    @property
    def error_log(self) -> Path:
        return self.dir / ERROR_LOG

    @property
    def state_file(self) -> Path:
        return self.dir / STATE_FILE

    def executable(self) -> Path:
        return self._executable or nginx_executable()

    def state(self) -> DoorState | None:
        if not self.state_file.exists():
            return None
        return DoorState.from_dict(json.loads(self.state_file.read_text()))

    # configuration
    def configure(
        self,
        public_host: str,
        port: int,
        cert: Certificate,
        *,
        people: dict[str, str],
        view_upstream: str,
        api_upstream: str,
        bind: str = "0.0.0.0",
        runtime: str = LOCAL,
    ) -> DoorState:
        """Write ``door.json`` and ``nginx.conf`` for ``people`` (slug → the URL of their
        server); checked with ``nginx -t`` before it replaces the running config (for
        COMPOSE, where the nginx container reads it, when nginx is installed here)."""
        if runtime not in (LOCAL, COMPOSE):
            raise FrontDoorError(f"door runtime {runtime!r}: {LOCAL} or {COMPOSE}")
        public_host = check_public_host(public_host)
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        with file_lock(self.dir / ".lock"):
            old = self.state()
            previous = {r.name: r.port for r in old.routes} if old and old.port == port else {}
            ports = assign_ports(previous, sorted(people), port)
            routes = [
                Route(VIEW, VIEW, ports[VIEW], _upstream(view_upstream)),
                Route(API, API, ports[API], _upstream(api_upstream)),
            ]
            routes += [
                Route(slug, LABELSTUDIO, ports[slug], _upstream(url))
                for slug, url in sorted(people.items(), key=lambda kv: ports[kv[0]])
            ]
            state = DoorState(
                public_host,
                port,
                bind,
                str(cert.cert),
                str(cert.key),
                str(cert.ca) if cert.ca else None,
                tuple(routes),
                runtime,
            )
            text = self.render(state)
            candidate = self.dir / f".{CONF_FILE}.new"
            candidate.write_text(text)
            if runtime == LOCAL or self._executable or nginx_installed():
                self._test(candidate)
            os.replace(candidate, self.conf)
            self.state_file.write_text(json.dumps(state.to_dict(), indent=2) + "\n")
        return state

    def render(self, state: DoorState) -> str:
        if state.runtime == COMPOSE:  # the nginx container: logs to docker, temp in /tmp
            return render(
                state,
                pid=COMPOSE_PID,
                error_log="stderr",
                access_log="/dev/stdout",
                temp_dir="/tmp",
                workers_as_nobody=False,
            )
        temp = self.dir / "tmp"
        temp.mkdir(mode=0o700, exist_ok=True)
        return render(
            state,
            pid=str(self.pid_file),
            error_log=str(self.error_log),
            access_log=str(self.dir / ACCESS_LOG),
            temp_dir=str(temp),
            workers_as_nobody=_workers_as_nobody(),
        )

    def _nginx(self, *args: str, conf: Path | None = None) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.executable()), "-p", str(self.dir), "-c", str(conf or self.conf)]
        cmd += ["-e", str(self.error_log), *args]
        return subprocess.run(
            cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60
        )

    def _test(self, conf: Path) -> None:
        res = self._nginx("-t", "-q", conf=conf)
        if res.returncode != 0:
            raise FrontDoorError(f"nginx refuses the generated {conf}: {res.stderr.strip()}")

    # process
    def running(self) -> psutil.Process | None:
        """Our nginx master (pid file, command line naming our config), if alive."""
        try:
            pid = int(self.pid_file.read_text().strip())
            proc = psutil.Process(pid)
            cmdline = " ".join(proc.cmdline())
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
        except (OSError, ValueError, psutil.Error):
            return None
        return proc if "nginx" in cmdline and str(self.conf) in cmdline else None

    def start(self) -> DoorStatus:
        """Start nginx with the written config, or reload a running one (new routes open,
        removed ones close, connections in flight finish)."""
        state = self.state()
        if state is None or not self.conf.exists():
            raise FrontDoorError(f"no front door configured in {self.dir}")
        if state.runtime == COMPOSE:
            raise FrontDoorError(
                f"the front door in {self.dir} is compose's (its frontdoor service runs it)"
            )
        proc = self.running()
        if proc is not None:
            res = self._nginx("-s", "reload")
            if res.returncode != 0:
                raise FrontDoorError(f"nginx reload failed: {res.stderr.strip()}")
            self._wait_listening(proc, state)
            return self.status()
        self._refuse_busy_ports(state)
        self.pid_file.unlink(missing_ok=True)
        res = self._nginx()
        if res.returncode != 0:
            raise FrontDoorError(
                f"nginx did not start: {res.stderr.strip() or self._log_tail()} "
                f"(log {self.error_log})"
            )
        deadline = time.monotonic() + 10
        while (proc := self.running()) is None:
            if time.monotonic() > deadline:
                raise FrontDoorError(
                    f"nginx did not start; log {self.error_log}:\n{self._log_tail()}"
                )
            time.sleep(0.05)
        self._wait_listening(proc, state)
        return self.status()

    def _wait_listening(self, proc: psutil.Process, state: DoorState, timeout: float = 10) -> None:
        """Until nginx (master and workers) listens on exactly the configured ports
        (``nginx -s reload`` only sends the signal: new routes open, removed ones close a
        moment later)."""
        want = {r.port for r in state.routes}
        deadline = time.monotonic() + timeout
        while True:
            try:  # old workers keep the old sockets until they have finished
                conns = proc.net_connections(kind="inet")
                for child in proc.children():
                    with contextlib.suppress(psutil.NoSuchProcess):
                        conns += child.net_connections(kind="inet")
            except psutil.AccessDenied:
                return  # cannot tell (not ours to inspect)
            except psutil.Error as exc:
                raise FrontDoorError(f"nginx exited; log {self.error_log}") from exc
            have = {c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN}
            if have == want:
                return
            if time.monotonic() > deadline:
                raise FrontDoorError(
                    f"nginx listens on {sorted(have)}, not on {sorted(want)}; log "
                    f"{self.error_log}:\n{self._log_tail()}"
                )
            time.sleep(0.05)

    def stop(self, timeout: float = 10.0) -> bool:
        proc = self.running()
        if proc is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGQUIT)  # graceful: requests in flight finish
            _, alive = psutil.wait_procs([proc], timeout=timeout)
            for p in alive:
                p.kill()
        self.pid_file.unlink(missing_ok=True)
        return True

    def status(self) -> DoorStatus:
        proc = self.running()
        return DoorStatus(
            proc is not None, proc.pid if proc else None, self.state(), self.error_log
        )

    def _refuse_busy_ports(self, state: DoorState) -> None:
        busy = []
        for route in state.routes:
            family = socket.AF_INET6 if ":" in state.bind else socket.AF_INET
            with socket.socket(family) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    bind = "" if state.bind in ("0.0.0.0", "*") else state.bind
                    sock.bind((bind, route.port))
                except OSError as exc:
                    busy.append(f"{route.port} ({route.kind} {route.name}: {exc.strerror})")
        if busy:
            raise FrontDoorError(
                f"front door ports not free on {state.bind}: {', '.join(busy)}; stop what "
                "uses them or choose another first port with --public-port"
            )

    def _log_tail(self, lines: int = 10) -> str:
        try:
            return "\n".join(self.error_log.read_text().splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _workers_as_nobody() -> bool:
    """nginx started as root runs its workers as ``nobody`` (never as root)."""
    if os.geteuid() != 0:
        return False
    try:
        grp.getgrnam("nogroup")
    except KeyError:
        return False
    return True


def nginx_installed() -> bool:
    path = os.environ.get(NGINX_ENV)
    return Path(path).exists() if path else DEFAULT_NGINX.exists()
