"""The front door on loopback with a real nginx in front of a small real HTTP server (fast):
its certificate, its config, what it does to each request, and the CLI that opens it,
routes a new person, closes a removed person's route and prints invitations. The laptop
test (``test_frontdoor_laptop.py``) does the same from another network namespace with
chromium and real Label Studio servers."""

from __future__ import annotations

import json
import socket
import ssl
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError
from typer.testing import CliRunner

from rcea.annotation.frontdoor import (
    LOGIN_BURST,
    FrontDoor,
    FrontDoorError,
    assign_ports,
    check_public_host,
)
from rcea.annotation.people import People
from rcea.annotation.team_door import DoorSettings, invitation, open_door, refresh_door
from rcea.annotation.tls import TLSError, certificate, local_certificate
from tests.support.helpers import free_port_run, nginx_executable

NAME = "labelling.rcea.test"


def _verify(cert_file: Path, ca_file: Path, name: str) -> None:
    """Verify the server certificate against the CA for ``name`` (raises otherwise)."""
    store = Store(x509.load_pem_x509_certificates(ca_file.read_bytes()))
    leaf = x509.load_pem_x509_certificate(cert_file.read_bytes())
    verifier = PolicyBuilder().store(store).build_server_verifier(x509.DNSName(name))
    verifier.verify(leaf, [])


def test_local_ca_makes_a_certificate_for_the_public_name(tmp_path: Path) -> None:
    door = tmp_path / "frontdoor"
    made = local_certificate(door, NAME)
    assert made.ca == door / "ca.crt"
    for key in ("ca.key", "server.key"):
        assert stat.S_IMODE((door / key).stat().st_mode) == 0o600
    _verify(made.cert, made.ca, NAME)
    with pytest.raises(VerificationError):
        _verify(made.cert, made.ca, "other.rcea.test")
    # reused while the name holds; a new name gets a new certificate from the same CA
    before = made.cert.read_bytes()
    assert local_certificate(door, NAME).cert.read_bytes() == before
    renamed = local_certificate(door, "team.rcea.test")
    assert renamed.cert.read_bytes() != before
    _verify(renamed.cert, renamed.ca, "team.rcea.test")  # type: ignore[arg-type]


def test_operator_certificate_is_checked(tmp_path: Path) -> None:
    theirs = local_certificate(tmp_path / "theirs", "other.rcea.test")
    with pytest.raises(TLSError, match="issued for \\['other.rcea.test'\\], not for"):
        certificate(tmp_path / "door", NAME, theirs.cert, theirs.key)
    with pytest.raises(TLSError, match="set both RCEA_TLS_CERT and RCEA_TLS_KEY"):
        certificate(tmp_path / "door", NAME, theirs.cert, None)
    with pytest.raises(TLSError, match="RCEA_TLS_KEY=.*no readable file"):
        certificate(tmp_path / "door", NAME, theirs.cert, tmp_path / "missing.key")
    ok = certificate(tmp_path / "door", "other.rcea.test", theirs.cert, theirs.key)
    assert ok.ca is None and ok.cert == theirs.cert


def test_ports_stay_with_their_people() -> None:
    first = assign_ports({}, ["a", "b", "c"], 9443)
    assert first == {"view": 9443, "api": 9444, "a": 9445, "b": 9446, "c": 9447}
    # b leaves: a and c keep theirs; d takes the lowest free port
    second = assign_ports(first, ["a", "c", "d"], 9443)
    assert second == {"view": 9443, "api": 9444, "a": 9445, "c": 9447, "d": 9446}
    with pytest.raises(FrontDoorError, match="from 1024 to 65533"):
        assign_ports({}, ["a"], 80)
    with pytest.raises(FrontDoorError, match="public host '0.0.0.0'"):
        check_public_host("0.0.0.0")
    with pytest.raises(FrontDoorError, match="public host"):
        check_public_host("bad name/x")


# ------------------------------------------------------------ a real door on loopback


class Echo(BaseHTTPRequestHandler):
    """Answers every request with what it received (headers as JSON) and sets a cookie."""

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body = json.dumps({"path": self.path, "headers": dict(self.headers.items())}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Set-Cookie", "sessionid=abc; Path=/; HttpOnly")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@dataclass
class Door:
    people: People
    ports: dict[str, int]
    ca: Path
    upstream: str

    def get(self, name: str, path: str = "/", **kw: object) -> httpx.Response:
        return _https("GET", self.ports[name], path, self.ca, **kw)

    def post(self, name: str, path: str, **kw: object) -> httpx.Response:
        return _https("POST", self.ports[name], path, self.ca, **kw)


def _https(method: str, port: int, path: str, ca: Path, host: str = NAME, **kw):  # type: ignore[no-untyped-def]
    """A request to 127.0.0.1:port with TLS verified for ``NAME`` (SNI and Host)."""
    ctx = ssl.create_default_context(cafile=str(ca))
    with httpx.Client(
        transport=httpx.HTTPTransport(verify=ctx), follow_redirects=False, timeout=10
    ) as client:
        return client.request(
            method,
            f"https://127.0.0.1:{port}{path}",
            headers={"Host": f"{host}:{port}"},
            extensions={"sni_hostname": NAME},
            **kw,
        )


@pytest.fixture
def door(tmp_path: Path) -> Iterator[Door]:
    nginx_executable()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    upstream = f"http://127.0.0.1:{server.server_address[1]}"
    people = People(tmp_path / "data", "http://127.0.0.1:1")
    for who in ("a", "b"):
        people.add(f"{who}@rcea.test", url=f"{upstream}/{who}", token=f"token{who}xyz")
    base = free_port_run(6)
    cfg = DoorSettings(NAME, base, "127.0.0.1", view_url=upstream, api_url=upstream)
    st = open_door(people, cfg)
    try:
        ports = {r.name: r.port for r in st.state.routes}  # type: ignore[union-attr]
        ports |= {p.email[0]: ports[p.slug] for p in people.all()}
        yield Door(people, ports, Path(st.state.ca), upstream)  # type: ignore[union-attr,arg-type]
    finally:
        FrontDoor(tmp_path / "data").stop()
        server.shutdown()


def test_door_passes_https_requests_with_the_headers_label_studio_needs(door: Door) -> None:
    for name in ("view", "api", "a", "b"):
        resp = door.get(name, "/x")
        assert resp.status_code == 200, (name, resp.text)
        got = resp.json()["headers"]
        port = door.ports[name]
        assert got["Host"] == f"{NAME}:{port}"  # Django's CSRF origin check needs the port
        assert got["X-Forwarded-Proto"] == "https"
        assert resp.headers["Strict-Transport-Security"] == "max-age=31536000"
        cookie = resp.headers["Set-Cookie"]
        assert "Secure" in cookie.split("; "), cookie
    # the webhook receiver stays on loopback: not served at the door
    assert door.get("api", "/webhooks/label-studio/a-1234").status_code == 404


def test_door_refuses_plain_http_and_other_names(door: Door) -> None:
    port = door.ports["a"]
    plain = httpx.get(f"http://127.0.0.1:{port}/user/login/", headers={"Host": NAME})
    assert plain.status_code == 301
    assert plain.headers["Location"] == f"https://{NAME}:{port}/user/login/"
    assert "sessionid" not in plain.headers.get("Set-Cookie", "")  # never reached a backend
    assert door.get("a", host="evil.example").status_code == 421


def test_door_holds_logins_per_person(door: Door) -> None:
    codes = [door.post("a", "/user/login/").status_code for _ in range(LOGIN_BURST + 1)]
    assert codes == [200] * LOGIN_BURST + [429]
    # another person's login and A's other pages are not held
    assert door.post("b", "/user/login/").status_code == 200
    # the view's HTTP login is held the same way (its Streamlit pages are not)
    codes = [door.post("view", "/_rcea/login").status_code for _ in range(LOGIN_BURST + 1)]
    assert codes == [200] * LOGIN_BURST + [429]
    assert door.post("view", "/_stcore/x").status_code == 200
    assert door.get("view", "/_rcea/login").status_code == 200  # the form itself: a GET
    assert door.get("a", "/projects/").status_code == 200
    assert door.post("a", "/api/tasks/1/annotations/").status_code == 200


def test_new_person_routed_and_removed_person_closed(door: Door) -> None:
    door.people.add("c@rcea.test", url=door.upstream + "/", token="tokencxyz")
    state = refresh_door(door.people)
    assert state is not None
    c = door.people.require("c@rcea.test")
    c_port = state.route(c.slug).port  # type: ignore[union-attr]
    assert _https("GET", c_port, "/", door.ca).status_code == 200
    assert invitation(door.people, "c@rcea.test") == (
        f"c@rcea.test: open https://{NAME}:{c_port}/ and log in as c@rcea.test with the "
        "password you were given separately; first trust the certificate authority ca.crt "
        "(sent with this)"
    )
    door.people.remove("a@rcea.test")
    refresh_door(door.people)
    with pytest.raises(httpx.ConnectError):
        door.get("a")
    assert door.get("b").status_code == 200  # the others keep their ports
    assert _https("GET", c_port, "/", door.ca).status_code == 200


def test_cli_opens_lists_invites_and_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rcea.app.cli import app
    from rcea.study.settings import get_settings

    nginx_executable()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    upstream = f"http://127.0.0.1:{server.server_address[1]}"
    data = tmp_path / "data"
    monkeypatch.setenv("RCEA_DATA_DIR", str(data))
    monkeypatch.setenv("RCEA_PUBLIC_BIND", "127.0.0.1")
    # the view and the API run elsewhere here: rcea starts neither (test_frontdoor_team.py
    # has it start the real ones)
    monkeypatch.setenv("RCEA_DOOR_VIEW_URL", upstream)
    monkeypatch.setenv("RCEA_DOOR_API_URL", upstream)
    get_settings.cache_clear()
    People(data, "http://127.0.0.1:1").add("a@rcea.test", url=upstream, token="tokenaxyz")
    base = free_port_run(6)
    runner = CliRunner()
    try:
        out = runner.invoke(
            app,
            ["labelstudio", "start", "--public", NAME, "--public-port", str(base), "--json"],
        )
        assert out.exit_code == 0, out.output
        started = json.loads(out.output)
        assert started["door"]["running"] and started["door"]["ca_file"]
        assert started["services"] == []  # RCEA_DOOR_*_URL: not rcea's to start
        status = runner.invoke(app, ["labelstudio", "status", "--json"])
        assert status.exit_code == 0, status.output
        rows = json.loads(status.output)["servers"]
        assert [r["public_url"] for r in rows] == [f"https://{NAME}:{base + 2}"]
        invited = runner.invoke(app, ["labelstudio", "invite"])
        assert invited.exit_code == 0, invited.output
        assert f"https://{NAME}:{base + 2}/" in invited.stdout
        assert "password you were given separately" in invited.stdout
        # a view without login is never put behind the door
        monkeypatch.setenv("RCEA_VIEW_AUTH", "none")
        get_settings.cache_clear()
        open_view = runner.invoke(app, ["labelstudio", "start", "--public", NAME, "--json"])
        assert open_view.exit_code == 1
        assert "RCEA_VIEW_AUTH=none" in json.loads(open_view.output)["error"]
        monkeypatch.delenv("RCEA_VIEW_AUTH")
        get_settings.cache_clear()
        # a wrong port: one clear line, JSON still
        low = runner.invoke(
            app, ["labelstudio", "start", "--public", NAME, "--public-port", "80", "--json"]
        )
        assert low.exit_code == 1 and "from 1024 to 65533" in json.loads(low.output)["error"]
        stopped = runner.invoke(app, ["labelstudio", "stop", "--json"])
        # a port taken by something else: one clear line naming it
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", base))
            taken.listen()
            busy = runner.invoke(
                app, ["labelstudio", "start", "--public", NAME, "--public-port", str(base)]
            )
        assert busy.exit_code == 1
        assert f"front door ports not free on 127.0.0.1: {base} (view view" in busy.output
        assert json.loads(stopped.output)["door_closed"] is True
        down = runner.invoke(app, ["labelstudio", "status"])
        assert down.exit_code == 3 and "front door at labelling.rcea.test: NOT running" in (
            down.output
        )
    finally:
        FrontDoor(data).stop()
        server.shutdown()
        get_settings.cache_clear()


@pytest.mark.slow
def test_add_annotator_opens_a_route_and_remove_closes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, labelstudio_pool: list
) -> None:
    """With the door open, `add-annotator` for a fourth and a fifth person (real Label
    Studio servers of the session pool, registered as servers run elsewhere) opens each
    one's HTTPS route at once, with the login page behind it; `remove` closes it."""
    from rcea.app.cli import app
    from rcea.study.settings import get_settings

    nginx_executable()
    data = tmp_path / "data"
    monkeypatch.setenv("RCEA_DATA_DIR", str(data))
    monkeypatch.setenv("RCEA_PUBLIC_BIND", "127.0.0.1")
    for what in ("VIEW", "API"):  # not started here (test_frontdoor_team.py starts them)
        monkeypatch.setenv(f"RCEA_DOOR_{what}_URL", "http://127.0.0.1:9")
    get_settings.cache_clear()
    base = free_port_run(6)
    runner = CliRunner()
    try:
        opened = runner.invoke(
            app, ["labelstudio", "start", "--public", NAME, "--public-port", str(base)]
        )
        assert opened.exit_code == 0, opened.output
        ca = data / "frontdoor" / "ca.crt"
        urls = {}
        for who, handle in zip(("d", "e"), labelstudio_pool[:2], strict=True):
            email = f"{who}-{base}@rcea.test"
            out = runner.invoke(
                app,
                ["labelstudio", "add-annotator", email, "--server-url", handle.url,
                 "--server-token", handle.token, "--password", "door-pass-123", "--json"],
            )  # fmt: skip
            assert out.exit_code == 0, out.output
            got = json.loads(out.output)
            assert got["login_url"] == f"{got['public_url']}/user/login/"
            assert "door-pass-123" not in got["public_url"]
            urls[email] = got["public_url"]
            port = int(got["public_url"].rsplit(":", 1)[1])
            page = _https("GET", port, "/user/login/", ca)
            assert page.status_code == 200 and 'name="password"' in page.text
        assert sorted(int(u.rsplit(":", 1)[1]) for u in urls.values()) == [base + 2, base + 3]
        gone = next(iter(urls))
        removed = runner.invoke(app, ["labelstudio", "remove", gone, "--json"])
        assert removed.exit_code == 0, removed.output
        with pytest.raises(httpx.ConnectError):
            _https("GET", int(urls[gone].rsplit(":", 1)[1]), "/user/login/", ca)
        kept = int(urls[list(urls)[1]].rsplit(":", 1)[1])
        assert _https("GET", kept, "/user/login/", ca).status_code == 200
    finally:
        FrontDoor(data).stop()
        get_settings.cache_clear()
