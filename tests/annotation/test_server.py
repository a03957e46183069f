"""The managed Label Studio server: launch rules without a server, then one real server
(session fixture ``labelstudio``) for start/stop, SDK, accounts, webhooks and the CLI."""

from __future__ import annotations

import json
import socket
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import psutil
import pytest
from typer.testing import CliRunner

from rcea.annotation.accounts import (
    AccountError,
    LoginFailed,
    create_annotator,
    find_user,
    form_errors,
    login_session,
)
from rcea.annotation.client import http_client, make_client
from rcea.annotation.server import (
    SERVER_ENV,
    SITE_DIR,
    LabelStudioError,
    LabelStudioServer,
    load_or_create_credentials,
    parse_loopback_url,
    server_command,
    server_env,
)
from tests.support.helpers import serve_http
from tests.support.labelstudio_fixture import LabelStudioHandle

STRAY = {
    "USERNAME": "intruder@example.org",
    "PASSWORD": "intruder-pass-1",
    "PORT": "1",
    "HOST": "http://evil.example",
    "DEBUG": "true",
    "SECRET_KEY": "stray",
    "LABEL_STUDIO_USERNAME": "intruder2@example.org",
    "HEARTEX_PORT": "2",
    "PYTHONPATH": "/nowhere",
}

PAIR_CONFIG = """<View>
  <Text name="left" value="$left"/>
  <Text name="right" value="$right"/>
  <Choices name="verdict" toName="left" choice="single" required="true">
    <Choice value="same"/>
    <Choice value="different"/>
  </Choices>
</View>"""


def _email() -> str:
    return f"ann-{uuid.uuid4().hex[:8]}@example.org"


def _fake_executable(tmp_path: Path, body: str) -> Path:
    exe = tmp_path / "bin" / "label-studio"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(f"#!{sys.executable}\n{body}\n")
    exe.chmod(0o755)
    return exe


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ------------------------------------------------------------- no server needed


def test_env_is_allow_listed_so_stray_variables_never_reach_label_studio(tmp_path: Path) -> None:
    base = {"PATH": "/usr/bin", "HOME": "/home/x", "LC_ALL": "C.UTF-8", **STRAY}
    creds = load_or_create_credentials(tmp_path, "a@b.org", "pw-12345678", "tok123")
    env = server_env(Path("/data/ls"), creds, base)
    for key in (
        "USERNAME",
        "PASSWORD",
        "PORT",
        "HOST",
        "DEBUG",
        "SECRET_KEY",
        "HEARTEX_PORT",
    ):
        assert key not in env
    assert env["PYTHONPATH"] == str(SITE_DIR)  # ours, never the caller's
    assert env["PATH"] == "/usr/bin" and env["LC_ALL"] == "C.UTF-8"
    assert env["LABEL_STUDIO_USERNAME"] == "a@b.org"
    assert env["LABEL_STUDIO_USER_TOKEN"] == "tok123"
    assert env["LABEL_STUDIO_BASE_DATA_DIR"] == "/data/ls"
    assert env["LABEL_STUDIO_SSRF_PROTECTION_ENABLED"] == "true"
    assert env["DJANGO_SETTINGS_MODULE"] == "rcea_labelstudio_settings"
    assert env["LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN"] == "true"
    assert all(env[k] == v for k, v in SERVER_ENV.items())


def test_command_binds_loopback_and_keeps_secrets_off_argv() -> None:
    cmd = server_command(Path("/x/label-studio"), Path("/d/ls"), "127.0.0.1", 18111)
    assert cmd[:3] == ["/x/label-studio", "start", "--no-browser"]
    assert cmd[cmd.index("--internal-host") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--port") + 1] == "18111"
    assert cmd[cmd.index("--data-dir") + 1] == "/d/ls"
    assert "--password" not in cmd and "--user-token" not in cmd and "--username" not in cmd


def test_credentials_generated_once_private_and_explicit_ones_not_stored(tmp_path: Path) -> None:
    home = tmp_path / "ls"
    first = load_or_create_credentials(home, "admin@rcea.local")
    again = load_or_create_credentials(home, "admin@rcea.local")
    assert first == again and len(first.token) == 40 and len(first.password) >= 16
    path = home / "credentials.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert first.token not in repr(first) and first.password not in repr(first)
    explicit = load_or_create_credentials(home, "admin@rcea.local", "my-password-1", "mytoken99")
    assert (explicit.password, explicit.token) == ("my-password-1", "mytoken99")
    assert "mytoken99" not in path.read_text()


@pytest.mark.parametrize("token", ["abc", "x" * 41, "has space1", "semi;colon"])
def test_unusable_tokens_are_refused(tmp_path: Path, token: str) -> None:
    with pytest.raises(LabelStudioError, match="token"):
        load_or_create_credentials(tmp_path, "a@b.org", "pw-12345678", token)


def test_only_loopback_urls_are_managed() -> None:
    assert parse_loopback_url("http://127.0.0.1:8089") == ("127.0.0.1", 8089)
    assert parse_loopback_url("http://localhost:9000/") == ("localhost", 9000)
    for bad in ("http://10.0.0.5:8089", "http://127.0.0.1", "https://127.0.0.1:8089"):
        with pytest.raises(LabelStudioError):
            parse_loopback_url(bad)
    with pytest.raises(LabelStudioError, match="loopback"):
        LabelStudioServer(Path("/tmp/x"), 8089, host="0.0.0.0")


def test_missing_executable_says_make_install(tmp_path: Path) -> None:
    server = LabelStudioServer(tmp_path, _free_port(), executable=tmp_path / "nope")
    with pytest.raises(LabelStudioError, match="make install"):
        server.start(timeout=5)
    assert not server.pid_file.exists()


def test_early_exit_reports_code_and_log_tail(tmp_path: Path) -> None:
    exe = _fake_executable(tmp_path, "import sys; print('boom: no database'); sys.exit(7)")
    server = LabelStudioServer(tmp_path / "data", _free_port(), executable=exe)
    with pytest.raises(LabelStudioError) as info:
        server.start(timeout=20)
    assert "with code 7" in str(info.value) and "boom: no database" in str(info.value)
    assert not server.pid_file.exists()


def test_busy_port_is_refused_not_silently_moved(tmp_path: Path) -> None:
    exe = _fake_executable(tmp_path, "import time; time.sleep(60)")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        server = LabelStudioServer(tmp_path / "data", sock.getsockname()[1], executable=exe)
        with pytest.raises(LabelStudioError, match="already in use"):
            server.start(timeout=5)
    assert not server.pid_file.exists()


@pytest.mark.parametrize("with_create_time", [False, True])
def test_stop_never_kills_a_foreign_pid(tmp_path: Path, with_create_time: bool) -> None:
    """A pid file naming some other process (a `sleep`) is stale: removed, never signalled."""
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        server = LabelStudioServer(tmp_path, _free_port())
        server.home.mkdir(parents=True)
        record: Any = sleeper.pid
        if with_create_time:
            record = {"pid": sleeper.pid, "create_time": psutil.Process(sleeper.pid).create_time()}
        server.pid_file.write_text(json.dumps(record))
        assert server.status().running is False
        assert server.stop() is False
        assert sleeper.poll() is None, "the foreign process was killed"
        assert not server.pid_file.exists()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_stop_without_pid_file_is_a_no_op(tmp_path: Path) -> None:
    assert LabelStudioServer(tmp_path, _free_port()).stop() is False


def test_form_errors_are_read_from_the_page() -> None:
    page = '<ul class="field_errors"><li>Too short &amp; weak</li></ul><p class="error"> Bad </p>'
    assert form_errors(page) == ["Too short & weak", "Bad"]


# --------------------------------------------------------------- the real server


@pytest.mark.slow
def test_start_is_idempotent_and_status_reports(labelstudio: LabelStudioHandle) -> None:
    server = labelstudio.server
    first = server.status()
    again = server.start(timeout=60)
    assert first.running and first.healthy and first.url == labelstudio.url
    assert again.pid == first.pid
    record = json.loads(server.pid_file.read_text())
    assert record["pid"] == first.pid and record["port"] == server.port
    cmdline = psutil.Process(first.pid).cmdline()
    assert "--internal-host" in cmdline and "127.0.0.1" in cmdline
    # a second object for the same data dir sees the same process
    twin = LabelStudioServer(labelstudio.data_dir, server.port, executable=server.executable())
    assert twin.status().pid == first.pid
    moved = LabelStudioServer(labelstudio.data_dir, _free_port(), executable=server.executable())
    with pytest.raises(LabelStudioError, match="already runs on port"):
        moved.start(timeout=10)
    assert server.status().pid == first.pid


@pytest.mark.slow
def test_sdk_lists_and_creates_projects(labelstudio: LabelStudioHandle) -> None:
    sdk = make_client(labelstudio.url, labelstudio.token)
    project = sdk.projects.create(title="rcea sdk check", label_config=PAIR_CONFIG)
    assert project.id in [p.id for p in sdk.projects.list()]
    assert sdk.users.whoami().email == "admin@rcea.local"


@pytest.mark.slow
def test_wrong_token_is_rejected(labelstudio: LabelStudioHandle) -> None:
    with http_client(labelstudio.url) as client:
        resp = client.get("/api/projects", headers={"Authorization": "Token wrong0token"})
    assert resp.status_code == 401


@pytest.mark.slow
def test_invited_annotator_logs_in_through_the_form(labelstudio: LabelStudioHandle) -> None:
    email = _email()
    made = create_annotator(
        labelstudio.url, labelstudio.token, email.upper(), "annot-pass-123", first_name="Ann"
    )
    assert made.created and made.email == email
    with closing(login_session(labelstudio.url, email, "annot-pass-123")) as session:
        me = session.get("/api/current-user/whoami").json()
    assert me["email"] == email and me["first_name"] == "Ann"
    with pytest.raises(LoginFailed, match="don't match"):
        login_session(labelstudio.url, email, "wrong-pass-123")
    again = create_annotator(labelstudio.url, labelstudio.token, email, "other-pass-456")
    assert again.id == made.id and not again.created
    login_session(labelstudio.url, email, "annot-pass-123").close()  # password unchanged


@pytest.mark.slow
def test_signup_needs_the_invite_and_a_valid_password(labelstudio: LabelStudioHandle) -> None:
    with http_client(labelstudio.url, follow_redirects=False) as browser:
        page = browser.get("/user/signup/")
        token = page.text.split('name="csrfmiddlewaretoken" value="')[1].split('"')[0]
        resp = browser.post(
            "/user/signup/",
            data={"csrfmiddlewaretoken": token, "email": _email(), "password": "x" * 12},
        )
    assert resp.status_code == 403
    with pytest.raises(AccountError, match="at least 8"):
        create_annotator(labelstudio.url, labelstudio.token, _email(), "short")


@pytest.mark.slow
def test_community_edition_members_see_every_project(labelstudio: LabelStudioHandle) -> None:
    """Pins a limitation the audit design relies on knowing: in Label Studio Community every
    organisation member has every permission, so an annotator can list (and change) all
    projects. Task data and meta shown to annotators must therefore carry no condition."""
    sdk = make_client(labelstudio.url, labelstudio.token)
    title = f"other annotator {uuid.uuid4().hex[:6]}"
    sdk.projects.create(title=title)
    email = _email()
    create_annotator(labelstudio.url, labelstudio.token, email, "annot-pass-123")
    with closing(login_session(labelstudio.url, email, "annot-pass-123")) as session:
        titles = [p["title"] for p in session.get("/api/projects?page_size=1000").json()["results"]]
    assert title in titles


class _Receiver(BaseHTTPRequestHandler):
    events: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        event = json.loads(body or b"{}")
        event["_secret_header"] = self.headers.get("X-Rcea-Secret")
        type(self).events.append(event)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def webhook_receiver() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    _Receiver.events = []
    with serve_http(_Receiver) as url:
        # on loopback Label Studio admits only rcea's receiver path (SSRF protection on)
        yield f"{url}/webhooks/label-studio/receiver", _Receiver.events


@pytest.mark.slow
def test_annotator_annotates_and_the_loopback_webhook_fires(
    labelstudio: LabelStudioHandle, webhook_receiver: tuple[str, list[dict[str, Any]]]
) -> None:
    """The path the audit will take: import pair tasks, a person labels one in their own
    session, the webhook reaches a loopback receiver, the admin reads the label back."""
    hook_url, events = webhook_receiver
    sdk = make_client(labelstudio.url, labelstudio.token)
    project = sdk.projects.create(title="rcea pair check", label_config=PAIR_CONFIG)
    sdk.webhooks.create(
        url=hook_url,
        project=project.id,
        send_payload=True,
        send_for_all_actions=False,
        actions=["ANNOTATION_CREATED"],
        headers={"X-Rcea-Secret": "s3cret"},
    )
    imported = sdk.projects.import_tasks(
        id=project.id,
        request=[
            {"data": {"left": "a", "right": "b"}, "meta": {"pair": 1}},
            {"data": {"left": "c", "right": "d"}, "meta": {"pair": 2}},
        ],
        return_task_ids=True,
    )
    assert imported.task_count == 2
    task_ids = [t.id for t in sdk.tasks.list(project=project.id)]
    assert len(task_ids) == 2

    email = _email()
    person = create_annotator(labelstudio.url, labelstudio.token, email, "annot-pass-123")
    result = [
        {
            "from_name": "verdict",
            "to_name": "left",
            "type": "choices",
            "value": {"choices": ["same"]},
        }
    ]
    with closing(login_session(labelstudio.url, email, "annot-pass-123")) as session:
        resp = session.post(
            f"/api/tasks/{task_ids[0]}/annotations/", json={"result": result, "lead_time": 3.5}
        )
    assert resp.status_code == 201, resp.text

    annotations = sdk.annotations.list(id=task_ids[0])
    assert [a.completed_by for a in annotations] == [person.id]
    assert annotations[0].result[0]["value"]["choices"] == ["same"]
    done = [t for t in sdk.tasks.list(project=project.id) if t.total_annotations]
    assert [t.id for t in done] == [task_ids[0]]
    deadline = time.monotonic() + 10
    while not events and time.monotonic() < deadline:
        time.sleep(0.1)
    assert events and events[0]["action"] == "ANNOTATION_CREATED"
    assert events[0]["annotation"]["task"] == task_ids[0]
    assert events[0]["annotation"]["completed_by"] == person.id
    assert events[0]["_secret_header"] == "s3cret"
    exported = json.loads(
        b"".join(
            sdk.projects.exports.download_sync(
                project.id, export_type="JSON", download_all_tasks=True
            )
        )
    )
    by_task = {t["id"]: t for t in exported}
    assert set(by_task) == set(task_ids)
    assert by_task[task_ids[0]]["annotations"][0]["completed_by"] == person.id
    assert by_task[task_ids[0]]["meta"] == {"pair": 1}


@pytest.mark.slow
def test_restart_ignores_stray_environment(
    labelstudio: LabelStudioHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """USERNAME/PASSWORD/PORT/HOST in our environment must not reach the server: same port,
    no extra user, data kept across the restart, and our old process really gone."""
    server = labelstudio.server
    sdk = make_client(labelstudio.url, labelstudio.token)
    kept = sdk.projects.create(title="rcea survives restart").id
    old_pid = server.status().pid
    assert server.stop() is True
    assert not psutil.pid_exists(old_pid) or psutil.Process(old_pid).status() == "zombie"
    assert server.status().running is False and not server.pid_file.exists()
    for key, value in STRAY.items():
        monkeypatch.setenv(key, value)
    status = server.start(timeout=120)
    assert status.running and status.healthy and status.pid != old_pid
    assert status.url == labelstudio.url
    environ = psutil.Process(status.pid).environ()
    assert not [key for key, value in STRAY.items() if environ.get(key) == value]
    emails = {u.email for u in sdk.users.list()}
    assert "intruder@example.org" not in emails and "intruder2@example.org" not in emails
    assert kept in [p.id for p in sdk.projects.list()]


@pytest.mark.slow
def test_cli_one_server_per_person(
    labelstudio: LabelStudioHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`add-annotator` gives a new person a server rcea runs (started now, next port after
    the base) or registers one run elsewhere; `status --json` lists every server with its
    person, URL, pid and health; `stop` stops only what rcea runs."""
    from rcea.app.cli import app
    from rcea.study.settings import get_settings

    base = _free_port()
    monkeypatch.setenv("RCEA_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("RCEA_LABELSTUDIO_URL", f"http://127.0.0.1:{base}")
    monkeypatch.setenv("RCEA_LABELSTUDIO_BIN", str(labelstudio.server.executable()))
    get_settings.cache_clear()
    runner = CliRunner()

    mine, other = _email(), _email()
    out = runner.invoke(app, ["labelstudio", "add-annotator", mine, "--json"])
    assert out.exit_code == 0, out.output
    made = json.loads(out.output)
    url = made["server"]["url"]
    assert made["created"] and made["server"]["managed"] and url.startswith("http://127.0.0.1:")
    assert int(url.rsplit(":", 1)[1]) > base and made["login_url"] == f"{url}/user/login/"
    login_session(url, mine, made["password"]).close()
    out = runner.invoke(
        app,
        ["labelstudio", "add-annotator", other, "--server-url", labelstudio.url,
         "--server-token", labelstudio.token, "--password", "other-pass-123"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert labelstudio.token not in out.output

    out = runner.invoke(app, ["labelstudio", "status", "--json"])
    assert out.exit_code == 0, out.output
    servers = {s["email"]: s for s in json.loads(out.output)["servers"]}
    assert set(servers) == {mine, other}
    assert servers[mine]["url"] == url and servers[mine]["pid"] and servers[mine]["healthy"]
    assert servers[other]["url"] == labelstudio.url and servers[other]["managed"] is False
    assert all("token" not in s for s in servers.values())

    out = runner.invoke(app, ["labelstudio", "add-annotator", mine])
    assert out.exit_code == 0 and "unchanged" in out.output
    out = runner.invoke(app, ["labelstudio", "add-annotator", mine, "--password", "reset-pw-789"])
    assert out.exit_code == 0 and "reset-pw-789" in out.output
    login_session(url, mine, "reset-pw-789").close()
    with pytest.raises(LoginFailed):
        login_session(url, mine, made["password"])
    # the other person's account lives on the other server only
    assert find_user(labelstudio.url, labelstudio.token, mine) is None

    out = runner.invoke(app, ["labelstudio", "stop", "--json"])
    assert out.exit_code == 0 and json.loads(out.output)["stopped"] == [mine]
    assert labelstudio.server.status().healthy  # the server run elsewhere stays up
    out = runner.invoke(app, ["labelstudio", "status"])
    assert out.exit_code == 3 and "NOT answering" in out.output


def test_cli_status_when_down_exits_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rcea.annotation.people import People
    from rcea.app.cli import app
    from rcea.study.settings import get_settings

    monkeypatch.setenv("RCEA_LABELSTUDIO_URL", f"http://127.0.0.1:{_free_port()}")
    get_settings.cache_clear()
    out = CliRunner().invoke(app, ["labelstudio", "status"])
    assert out.exit_code == 0 and "no people yet" in out.output
    closed = f"http://127.0.0.1:{_free_port()}"
    People(tmp_path / "data", "http://127.0.0.1:1").add("x@x.test", url=closed, token="abcdef1")
    out = CliRunner().invoke(app, ["labelstudio", "status"])
    assert out.exit_code == 3 and f"x@x.test: {closed} (external" in out.output
    out = CliRunner().invoke(app, ["labelstudio", "stop", "--json"])
    assert out.exit_code == 0 and json.loads(out.output)["stopped"] == []
