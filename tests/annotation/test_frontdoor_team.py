"""One command brings the team up behind the door, seen from a laptop in another network
namespace (the fixtures of ``test_frontdoor_laptop.py``).

``rcea labelstudio start --public NAME`` (a real subprocess, as a lab runs it) starts the
real REST API (``rcea serve``) and the real view (``rcea view``) on loopback and opens the
door (real nginx) on the server end of the laptop's link. Then:

* from the laptop, with plain Python: 11 view logins at once get ten 401s (wrong password,
  answered by the view) and one 429 (the door); the API answers ``/health``, refuses its
  schema without the token and gives it with the token; the webhook receiver is not served
  at the door (404); the API's and the view's own ports are unreachable;
* on the server, the webhook receiver answers on loopback (401 without the secret: reached);
* from the laptop, headless chromium trusting the local CA: the view shows no password form
  through the door, only the link to the HTTP login; a wrong password is refused there; the
  right one sets a Secure, HttpOnly session cookie and the view opens logged in;
* ``status --json`` lists the API and the view with their public URLs; starting again
  reuses both (same pids); ``stop`` closes the door and stops both (ports closed, pid files
  gone).

Skipping is a failure under CI (``RCEA_REQUIRE_FRONTDOOR=1`` / ``RCEA_REQUIRE_BROWSER=1``)."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rcea.annotation.frontdoor import LOGIN_BURST
from rcea.study.logins import SESSION_COOKIE
from tests.annotation.test_frontdoor_laptop import (  # noqa: F401 - the laptop fixture
    CHROMIUM_ARGS,
    Laptop,
    _trusting_chromium,
    laptop,
)
from tests.support.helpers import chromium_executable, free_port, nginx_executable

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NAME = "team.rcea.test"
REPO = Path(__file__).resolve().parents[2]
RESEARCHER, PASSWORD = "erin", "s3cret-passphrase"
#: after the burst the door admits one login every 60 / 10 s: two chromium logins follow
REFILL_S = 13

PROBE = textwrap.dedent(
    """
    import json, ssl, socket, sys
    from concurrent.futures import ThreadPoolExecutor
    import httpx

    a = json.loads(sys.argv[1])
    ip, name, ctx = a["ip"], a["name"], ssl.create_default_context(cafile=a["ca"])
    out = {}

    def call(port, method, path, **kw):
        with httpx.Client(transport=httpx.HTTPTransport(verify=ctx), timeout=30) as c:
            return c.request(method, f"https://{ip}:{port}{path}",
                             headers={"Host": f"{name}:{port}", **kw.pop("headers", {})},
                             extensions={"sni_hostname": name}, **kw)

    def guess(i):
        r = call(a["view_port"], "POST", "/_rcea/login",
                 data={"name": f"guess-{i}", "password": "not-the-password"})
        return r.status_code
    with ThreadPoolExecutor(a["attempts"]) as pool:  # all within a second
        out["logins"] = sorted(pool.map(guess, range(a["attempts"])))

    token = {"Authorization": "Bearer " + a["token"]}
    out["api"] = [
        call(a["api_port"], "GET", "/health").status_code,
        call(a["api_port"], "GET", "/openapi.json").status_code,
        call(a["api_port"], "GET", "/openapi.json", headers=token).status_code,
        call(a["api_port"], "POST", "/webhooks/label-studio/x", json={}).status_code,
    ]
    reach = {}
    for port in a["backend_ports"]:
        for host in (ip, "127.0.0.1"):
            try:
                socket.create_connection((host, port), timeout=3).close()
                reach[f"{host}:{port}"] = "open"
            except OSError as exc:
                reach[f"{host}:{port}"] = type(exc).__name__
    out["backends"] = reach
    print(json.dumps(out))
    """
)


def _rcea(
    env: dict[str, str], *args: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rcea.app.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _listens(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_one_command_brings_up_the_api_and_the_view_behind_the_door(
    laptop: Laptop,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    nginx_executable()
    chromium_executable()
    from playwright.sync_api import expect, sync_playwright

    data = tmp_path / "data"
    api_port, view_port = free_port(), free_port()
    base = 20000 + random.randrange(2000) * 10
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RCEA_DOOR_VIEW_URL", "RCEA_DOOR_API_URL", "RCEA_PUBLIC_HOST")
    }
    env |= {
        "RCEA_DATA_DIR": str(data),
        "RCEA_API_PORT": str(api_port),
        "RCEA_VIEW_PORT": str(view_port),
        "RCEA_PUBLIC_BIND": laptop.server_ip,
        "RCEA_VIEW_AUTH": "password",
        "PYTHONPATH": str(REPO),
    }
    added = _rcea_stdin(env, PASSWORD, "view", "add-researcher", RESEARCHER, "--password-stdin")
    assert added.returncode == 0, added.stderr
    up = ["labelstudio", "start", "--public", NAME, "--public-port", str(base), "--json"]
    started = _rcea(env, *up)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        got = json.loads(started.stdout)
        services = {s["name"]: s for s in got["services"]}
        assert sorted(services) == ["api", "view"], got
        for name, port, public in (("api", api_port, base + 1), ("view", view_port, base)):
            svc = services[name]
            assert svc["running"] and svc["healthy"], svc
            assert svc["url"] == f"http://127.0.0.1:{port}"
            assert svc["public_url"] == f"https://{NAME}:{public}"
            assert Path(svc["log"]).parent == data / "frontdoor"
        ca = got["door"]["ca_file"]

        status = _rcea(env, "labelstudio", "status", "--json", timeout=120)
        assert status.returncode == 0, status.stdout + status.stderr
        listed = {s["name"]: s["public_url"] for s in json.loads(status.stdout)["services"]}
        assert listed == {"api": f"https://{NAME}:{base + 1}", "view": f"https://{NAME}:{base}"}
        again = _rcea(env, *up)
        assert again.returncode == 0, again.stdout + again.stderr
        pids = {s["name"]: s["pid"] for s in json.loads(again.stdout)["services"]}
        assert pids == {n: s["pid"] for n, s in services.items()}  # reused, not restarted

        # --- the laptop, plain Python
        args = {
            "ip": laptop.server_ip,
            "name": NAME,
            "ca": ca,
            "view_port": base,
            "api_port": base + 1,
            "attempts": LOGIN_BURST + 1,
            "token": (data / "api-token").read_text().strip(),
            "backend_ports": [api_port, view_port],
        }
        probe_env = {**os.environ, "PYTHONPATH": str(REPO)}
        res = laptop.run(sys.executable, "-c", PROBE, json.dumps(args), env=probe_env)
        burst_done = time.monotonic()
        assert res.returncode == 0, res.stderr
        seen = json.loads(res.stdout)
        assert seen["logins"] == [401] * LOGIN_BURST + [429], seen["logins"]
        assert seen["api"] == [200, 401, 200, 404], seen["api"]
        assert set(seen["backends"].values()) == {"ConnectionRefusedError"}, seen["backends"]
        # the webhook receiver is there on loopback (where Label Studio posts)
        import httpx

        hook = httpx.post(f"http://127.0.0.1:{api_port}/webhooks/label-studio/x", json={})
        assert hook.status_code == 401, hook.text

        # --- the laptop, chromium: the view's login over HTTPS
        time.sleep(max(0.0, REFILL_S - (time.monotonic() - burst_done)))
        launcher = _trusting_chromium(tmp_path, laptop, Path(ca))
        rules = f"--host-resolver-rules=MAP {NAME} {laptop.server_ip}"
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=str(launcher), args=[*CHROMIUM_ARGS, rules]
            )
            try:
                page = browser.new_page()
                page.set_default_timeout(60_000)
                try:
                    page.goto(f"https://{NAME}:{base}/")
                    page.get_by_role("heading", name="RCEA Audit — log in").wait_for()
                    assert page.locator("input[type='password']").count() == 0
                    page.get_by_role("link", name="Log in").click()
                    page.wait_for_url(f"https://{NAME}:{base}/_rcea/login")
                    page.get_by_label("Researcher").fill(RESEARCHER)
                    page.get_by_label("Password").fill("wrong-password")
                    with page.expect_response(lambda r: r.request.method == "POST") as wrong:
                        page.get_by_role("button", name="Log in").click()
                    assert wrong.value.status == 401
                    expect(page.get_by_text("Wrong researcher name or password.")).to_be_visible()
                    assert SESSION_COOKIE not in {c["name"] for c in page.context.cookies()}

                    page.get_by_label("Researcher").fill(RESEARCHER)
                    page.get_by_label("Password").fill(PASSWORD)
                    with page.expect_response(lambda r: r.request.method == "POST") as right:
                        page.get_by_role("button", name="Log in").click()
                    assert right.value.status == 303
                    page.get_by_text("Logged in as").wait_for()
                    assert page.url == f"https://{NAME}:{base}/"
                    cookie = {c["name"]: c for c in page.context.cookies()}[SESSION_COOKIE]
                    assert cookie["secure"] and cookie["httpOnly"], cookie
                except Exception:
                    page.screenshot(path=str(tmp_path / "failure.png"))
                    raise
            finally:
                browser.close()
    finally:
        stopped = _rcea(env, "labelstudio", "stop", "--json", timeout=120)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    down = json.loads(stopped.stdout)
    assert down["door_closed"] is True and down["services_stopped"] == ["view", "api"], down
    assert not _listens(api_port) and not _listens(view_port)
    assert not (data / "frontdoor" / "api.pid").exists()
    assert not (data / "frontdoor" / "view.pid").exists()


def _rcea_stdin(env: dict[str, str], text: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rcea.app.cli", *args],
        input=f"{text}\n",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
