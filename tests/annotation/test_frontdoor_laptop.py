"""A team member's laptop, from another network namespace, through the front door.

The test makes a network namespace for the laptop and a veth pair with private addresses of
its own (the server end on this machine, the laptop end inside the namespace; no route
anywhere else), puts rcea's front door (real nginx, the local CA rcea makes) on the server
end in front of the session's real Label Studio servers (one per person), and then, from
inside the laptop:

* headless Debian chromium, trusting the generated CA (its NSS store), logs in as annotator
  A at A's public HTTPS address, opens a pair task, labels it, and the label reaches the
  store through rcea's sync;
* A's password on B's address does not log in;
* plain HTTP on a public port is redirected to HTTPS and never shows a login page;
* the Label Studio servers' own ports (and the view's and the API's) are unreachable;
* a researcher logs in to the real view (the HTTP login the door holds), and the real API
  answers behind the door;
* the 11th login attempt within a minute gets 429;
* the certificate verifies for the public name and fails for another.

Namespaces and links are removed afterwards. Skipping is a failure under CI."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import sqlalchemy as sa

from rcea.annotation.frontdoor import LOGIN_BURST, FrontDoor
from rcea.annotation.tasks import PAIR_CHOICE
from rcea.annotation.team_door import DoorSettings, invitation, open_door
from rcea.study.store import session_scope
from rcea.study.store.models import AuditTask
from tests.support.helpers import (
    CERTUTIL,
    chromium_executable,
    free_port,
    laptop_namespace_support,
    nginx_executable,
    wait_for_http,
)
from tests.support.labelling_study import PASSWORD, Study

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NAME = "labelling.rcea.test"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
CLICKED = "different"
QUESTION = "Do these two solutions use the same strategy?"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@dataclass(frozen=True)
class Laptop:
    namespace: str
    server_ip: str  # the server end of the veth pair (the door listens here)
    laptop_ip: str

    def run(self, *cmd: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ip", "netns", "exec", self.namespace, *cmd],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )


@pytest.fixture
def laptop() -> Iterator[Laptop]:
    """A network namespace with one veth link to this machine (private /30, no route on)."""
    laptop_namespace_support()
    tag = f"{os.getpid() % 10000:04d}{random.randrange(16**3):03x}"
    ns, host_end, laptop_end = f"rcea-laptop-{tag}", f"rcv{tag}h", f"rcv{tag}l"
    net = random.randrange(256)
    server_ip, laptop_ip = f"10.211.{net}.1", f"10.211.{net}.2"
    try:
        _ip("netns", "add", ns)
        _ip("link", "add", host_end, "type", "veth", "peer", "name", laptop_end)
        _ip("link", "set", laptop_end, "netns", ns)
        _ip("addr", "add", f"{server_ip}/30", "dev", host_end)
        _ip("link", "set", host_end, "up")
        _ip("-n", ns, "addr", "add", f"{laptop_ip}/30", "dev", laptop_end)
        _ip("-n", ns, "link", "set", laptop_end, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        yield Laptop(ns, server_ip, laptop_ip)
    finally:
        subprocess.run(["ip", "link", "del", host_end], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


PROBE = textwrap.dedent(
    """
    import json, socket, ssl, sys
    import httpx

    a = json.loads(sys.argv[1])
    out = {}
    ip, name, ca = a["ip"], a["name"], a["ca"]

    def tls(port, sni):
        ctx = ssl.create_default_context(cafile=ca)
        try:
            with socket.create_connection((ip, port), timeout=5) as raw:
                with ctx.wrap_socket(raw, server_hostname=sni) as s:
                    return "ok " + s.version()
        except ssl.SSLCertVerificationError as exc:
            return "refused: " + exc.verify_message
        except OSError as exc:
            return "error: " + str(exc)

    out["cert_public_name"] = tls(a["a_port"], name)
    out["cert_other_name"] = tls(a["a_port"], "other.rcea.test")

    plain = httpx.get(f"http://{ip}:{a['a_port']}/user/login/",
                      headers={"Host": name}, follow_redirects=False, timeout=10)
    out["plain"] = [plain.status_code, plain.headers.get("location"),
                    "name=\\"password\\"" in plain.text]

    reach = {}
    for port in a["backend_ports"]:
        for host in (ip, "127.0.0.1"):
            try:
                socket.create_connection((host, port), timeout=3).close()
                reach[f"{host}:{port}"] = "open"
            except OSError as exc:
                reach[f"{host}:{port}"] = type(exc).__name__
    out["backends"] = reach

    ctx = ssl.create_default_context(cafile=ca)
    with httpx.Client(transport=httpx.HTTPTransport(verify=ctx), timeout=10) as c:
        url = f"https://{ip}:{a['held_port']}/user/login/"
        hdr = {"Host": f"{name}:{a['held_port']}"}
        out["logins"] = [
            c.post(url, headers=hdr, data={"email": "x@y.z", "password": "guess-123"},
                   extensions={"sni_hostname": name}).status_code
            for _ in range(a["attempts"])
        ]
    api = f"https://{ip}:{a['api_port']}"
    with httpx.Client(transport=httpx.HTTPTransport(verify=ctx), timeout=10) as c:
        hdr = {"Host": f"{name}:{a['api_port']}"}
        out["api"] = [
            c.get(api + path, headers=hdr, extensions={"sni_hostname": name}).status_code
            for path in ("/health", "/openapi.json", "/webhooks/label-studio/x")
        ]
    print(json.dumps(out))
    """
)


def _trusting_chromium(tmp_path: Path, laptop: Laptop, ca: Path) -> Path:
    """A chromium launcher that runs inside the laptop namespace with a home whose NSS
    store trusts ``ca`` (as a person does after importing the CA file)."""
    home = tmp_path / "laptop-home"
    nssdb = home / ".pki" / "nssdb"
    nssdb.mkdir(parents=True)
    for cmd in (
        [CERTUTIL, "-N", "-d", f"sql:{nssdb}", "--empty-password"],
        [CERTUTIL, "-A", "-d", f"sql:{nssdb}", "-t", "C,,", "-n", "rcea-team", "-i", str(ca)],
    ):
        subprocess.run(cmd, check=True, capture_output=True, timeout=60)
    launcher = tmp_path / "laptop-chromium"
    launcher.write_text(
        "#!/bin/sh\n"
        f'exec ip netns exec {laptop.namespace} env HOME="{home}" '
        f'{chromium_executable()} "$@"\n'
    )
    launcher.chmod(0o755)
    return launcher


def _fetch(page, path: str) -> dict:  # type: ignore[no-untyped-def,type-arg]
    """GET ``path`` from inside the page (the laptop's network, the page's cookies);
    Playwright's own request context would resolve names outside the laptop."""
    return page.evaluate(  # type: ignore[no-any-return]
        "async (p) => { const r = await fetch(p, {credentials: 'same-origin'});"
        " return {status: r.status, body: await r.text()}; }",
        path,
    )


RESEARCHER, RESEARCHER_PASSWORD = "erin", "s3cret-passphrase"


@pytest.fixture
def view(tmp_path: Path) -> Iterator[str]:
    """`rcea view` (password login, one researcher) on a free loopback port; its URL."""
    port = free_port()
    env = {**os.environ, "RCEA_DATA_DIR": str(tmp_path / "view-data")}
    exe = Path(sys.executable).parent / "rcea"
    subprocess.run(
        [str(exe), "view", "add-researcher", RESEARCHER, "--password-stdin"],
        input=f"{RESEARCHER_PASSWORD}\n",
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
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
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_annotator_labels_from_a_laptop_through_the_front_door(
    study: Study, api: str, view: str, laptop: Laptop, tmp_path: Path
) -> None:
    """Also: a researcher logs in to the real view (its HTTP login, then Streamlit's
    websocket through the door) and the real API answers its health check and refuses the
    OpenAPI schema without the token; its webhook receiver is not served at the door."""
    nginx_executable()
    chromium_executable()
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import expect, sync_playwright

    pushed = study.push()
    project_id = pushed["projects"]["A"]["project_id"]
    with session_scope(study.engine) as s:
        task_id = (
            s.exec(
                sa.select(AuditTask.task_id)
                .where(AuditTask.audit_id == study.audit_id, AuditTask.role == "A")
                .order_by(AuditTask.task_id)
            )
            .scalars()
            .first()
        )
    base = 20000 + random.randrange(2000) * 10
    door = open_door(
        study.people,
        DoorSettings(
            NAME,
            base,
            bind=laptop.server_ip,
            view_url=view,
            api_url=api.split("/webhooks/")[0],
        ),
    )
    data_dir = study.people.root.parent
    try:
        assert door.running and door.state is not None and door.state.ca is not None
        ca = Path(door.state.ca)
        url = {r: door.state.public_url(study.person(r).slug) for r in study.pool}
        port = {r: int(u.rsplit(":", 1)[1]) for r, u in url.items()}  # type: ignore[union-attr]
        line = invitation(study.people, study.emails["A"])
        assert f"{url['A']}/" in line and PASSWORD not in line

        # --- annotator A in chromium on the laptop
        launcher = _trusting_chromium(tmp_path, laptop, ca)
        rules = f"--host-resolver-rules=MAP {NAME} {laptop.server_ip}"
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=str(launcher), args=[*CHROMIUM_ARGS, rules]
            )
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.set_default_timeout(60_000)
                try:
                    page.goto(f"{url['A']}/user/login/")
                    page.locator("input[name='email']").fill(study.emails["A"])
                    page.locator("input[name='password']").fill(PASSWORD)
                    page.get_by_role("button", name="Log in").click()
                    page.wait_for_url(lambda u: "/user/login" not in u)
                    cookies = {c["name"]: c for c in page.context.cookies()}
                    assert cookies["sessionid"]["secure"] and cookies["csrftoken"]["secure"]
                    who = _fetch(page, "/api/current-user/whoami")
                    assert who["status"] == 200, who
                    assert json.loads(who["body"])["email"] == study.emails["A"], who

                    page.goto(f"{url['A']}/projects/{project_id}/data?task={task_id}")
                    expect(page.get_by_text(QUESTION)).to_be_visible(timeout=60_000)
                    choice = page.get_by_role("checkbox", name=CLICKED, exact=False)
                    choice.check()
                    submit = page.get_by_role("button", name=re.compile(r"^submit", re.I))
                    with page.expect_response(
                        lambda r: (
                            r.request.method == "POST"
                            and f"/api/tasks/{task_id}/annotations" in r.url
                        )
                    ) as posted:
                        submit.click()
                    assert posted.value.status == 201, posted.value.text()

                    # A's password on B's address: the login form again, no session
                    other = browser.new_page()
                    other.goto(f"{url['B']}/user/login/")
                    other.locator("input[name='email']").fill(study.emails["A"])
                    other.locator("input[name='password']").fill(PASSWORD)
                    with other.expect_response(
                        lambda r: r.request.method == "POST" and "/user/login/" in r.url
                    ) as tried:
                        other.get_by_role("button", name="Log in").click()
                    assert tried.value.status == 200  # the form again (a login redirects)
                    expect(other.locator("input[name='password']")).to_be_visible()
                    assert _fetch(other, "/api/current-user/whoami")["status"] in (401, 403)
                    # a researcher on the view: through the door its login is the HTTP
                    # form the door holds (never the websocket form)
                    researcher = browser.new_page()
                    researcher.goto(f"{door.state.public_url('view')}/")
                    heading = researcher.get_by_role("heading", name="RCEA Audit — log in")
                    heading.wait_for(timeout=60_000)
                    assert researcher.locator("input[type='password']").count() == 0
                    researcher.get_by_role("link", name="Log in").click()
                    researcher.get_by_label("Researcher").fill(RESEARCHER)
                    researcher.get_by_label("Password").fill(RESEARCHER_PASSWORD)
                    researcher.get_by_role("button", name="Log in").click()
                    researcher.get_by_text("Logged in as").wait_for(timeout=60_000)
                except (PlaywrightError, AssertionError):
                    page.screenshot(path=str(tmp_path / "failure.png"))
                    raise
            finally:
                browser.close()

        # --- the label reaches the store
        study.sync()
        labels = [row for row in study.labels() if row[0] == "A"]
        assert [(row[2], row[3]) for row in labels] == [("counted", CLICKED)], labels
        assert PAIR_CHOICE  # the pair task's choice the UI sent

        # --- the rest from the laptop, with plain Python
        backends = [int(h.url.rsplit(":", 1)[1]) for h in study.pool.values()]
        backends += [int(u.split(":")[2].split("/")[0]) for u in (view, api)]  # view, API
        args = {
            "ip": laptop.server_ip,
            "name": NAME,
            "ca": str(ca),
            "a_port": port["A"],
            "held_port": port["adjudicator"],
            "attempts": LOGIN_BURST + 1,
            "backend_ports": backends,
            "api_port": door.state.route("api").port,  # type: ignore[union-attr]
        }
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        res = laptop.run(sys.executable, "-c", PROBE, json.dumps(args), env=env)
        assert res.returncode == 0, res.stderr
        got = json.loads(res.stdout)
        assert got["cert_public_name"].startswith("ok TLSv1.3"), got
        assert got["cert_other_name"].startswith("refused: Hostname mismatch"), got
        status, location, login_form = got["plain"]
        assert (status, location, login_form) == (
            301,
            f"https://{NAME}:{port['A']}/user/login/",
            False,
        )
        assert set(got["backends"].values()) == {"ConnectionRefusedError"}, got["backends"]
        assert got["logins"][-1] == 429 and 429 not in got["logins"][:-1], got["logins"]
        assert got["api"] == [200, 401, 404], got["api"]

        # --- the password in no log and no process's command line
        door_dir = FrontDoor(data_dir).dir
        for log in ("access.log", "error.log"):
            assert PASSWORD not in (door_dir / log).read_text(errors="replace"), log
        for proc in psutil.process_iter(["cmdline"]):
            assert PASSWORD not in " ".join(proc.info["cmdline"] or []), proc.pid
    finally:
        FrontDoor(data_dir).stop()
