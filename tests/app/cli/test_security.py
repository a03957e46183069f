"""Secure by default: credentials in URLs never leave secret storage, files are
owner-only, names never escape their directory, and an unreachable service is one line.

The CLI runs in-process (CliRunner) where the code paths matter, and as the installed
``rcea`` in a subprocess where the entry point matters (umask, the one-line errors)."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rcea.app.cli import app
from rcea.pipeline.safety import install_log_masking, mask_url, mask_urls_in, path_under, safe_name
from rcea.study.settings import Settings, get_settings
from rcea.study.store import list_events, open_store, session_scope
from tests.support.codebook_study import PHASE1
from tests.support.fake_llm import FakeLLM, domain_records
from tests.support.helpers import audit_study, draw_test_audit, fake_tasks, free_port, write_jsonl

RCEA = str(Path(sys.executable).parent / "rcea")
ROOT = Path(__file__).resolve().parents[3]
PLANTED_PASSWORD = "planted-Pa55word-7f3c"
PLANTED_KEY = "sk-planted-key-91d2"
PLANTED_TOKEN = "planted-query-token-5e"
runner = CliRunner()


def rcea(*args: str, code: int = 0) -> str:
    out = runner.invoke(app, list(args))
    assert out.exit_code == code, out.output
    return out.output


def rcea_subprocess(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [RCEA, *args], env=full, cwd=cwd, capture_output=True, text=True, timeout=300
    )


# ----------------------------------------------------------------------- the one mask


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("https://user:pass@host/v1", "https://user:***@host/v1"),
        ("https://sk-token@host:8443/v1", "https://***@host:8443/v1"),
        ("https://:pass@host/v1", "https://***@host/v1"),
        ("postgresql+psycopg://rcea:pw@postgres:5432/rcea", "postgresql+psycopg://rcea:***@postgres:5432/rcea"),
        ("http://host/hook?token=abc&x=1", "http://host/hook?token=***&x=1"),
        ("http://h/v1?api_key=abc", "http://h/v1?api_key=***"),
        ("http://127.0.0.1:8000/webhooks/label-studio", "http://127.0.0.1:8000/webhooks/label-studio"),
        ("sqlite:////data/rcea.db", "sqlite:////data/rcea.db"),
        ("not a url", "not a url"),
    ],
)  # fmt: skip
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_mask_urls_in_text() -> None:
    text = "POST https://u:secret@h/v1/chat 'x' and http://tok@h2/y failed"
    assert mask_urls_in(text) == "POST https://u:***@h/v1/chat 'x' and http://***@h2/y failed"


def test_config_masks_every_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RCEA_LLM_BASE_URL", f"https://alice:{PLANTED_PASSWORD}@llm.example/v1")
    monkeypatch.setenv("RCEA_LLM_API_KEY", PLANTED_KEY)
    monkeypatch.setenv("RCEA_DATABASE_URL", f"postgresql://rcea:{PLANTED_PASSWORD}@db:5432/x")
    monkeypatch.setenv("RCEA_WEBHOOK_URL", f"http://api:8000/hook?token={PLANTED_TOKEN}")
    monkeypatch.setenv("RCEA_LABELSTUDIO_URL", f"http://bob:{PLANTED_PASSWORD}@ls:8080")
    get_settings.cache_clear()
    text = rcea("config") + rcea("config", "--json")
    for secret in (PLANTED_PASSWORD, PLANTED_KEY, PLANTED_TOKEN):
        assert secret not in text
    cfg = json.loads(rcea("config", "--json"))
    assert cfg["llm_base_url"] == "https://alice:***@llm.example/v1"
    assert cfg["llm_api_key"] == "<set>"
    assert cfg["resolved_database_url"] == "postgresql+psycopg://rcea:***@db:5432/x"
    assert cfg["webhook_url"] == cfg["resolved_webhook_url"] == "http://api:8000/hook?token=***"
    assert cfg["labelstudio_url"] == "http://bob:***@ls:8080"


# ------------------------------------------------------- planted secrets, private files


def _records(folder: Path) -> Path:
    """The fake endpoint's domain, with token entropies (so ingest writes an artifact)."""
    recs = domain_records(questions=PHASE1)
    for i, rec in enumerate(recs):
        rec["token_entropies"] = [0.1 * (i % 5), 0.2, 0.3]
    return write_jsonl(folder / "r.jsonl", recs)


def _all_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_planted_secrets_reach_no_file_and_no_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A codebook stage against the fake endpoint (with credentials in its URL and a key),
    a stage against the same credentials on a closed port (failures are stored with their
    error), a published bundle: the store file (and its WAL), the event log, the LLM cache,
    the artifacts, the bundle, the CLI output and the log records hold no planted secret,
    while the masked URL is what the run records show. Every file and folder written is
    owner-only, with the test's own umask at 022."""
    old_umask = os.umask(0o022)
    install_log_masking()
    caplog.set_level(logging.DEBUG)
    data = tmp_path / "data"
    try:
        with FakeLLM() as llm:
            port = llm.base_url.rsplit(":", 1)[1].split("/")[0]
            url = f"http://alice:{PLANTED_PASSWORD}@127.0.0.1:{port}/v1"
            monkeypatch.setenv("RCEA_LLM_BASE_URL", url)
            monkeypatch.setenv("RCEA_LLM_MODEL", "fake")
            monkeypatch.setenv("RCEA_LLM_API_KEY", PLANTED_KEY)
            get_settings.cache_clear()
            out = rcea("ingest", str(_records(tmp_path)), "--study", "s")
            out += rcea("codebook", "induce", "--study", "s", "--question", "q00")
        closed = f"http://alice:{PLANTED_PASSWORD}@127.0.0.1:{free_port()}/v1"
        monkeypatch.setenv("RCEA_LLM_BASE_URL", closed)
        get_settings.cache_clear()
        out += rcea("codebook", "induce", "--study", "s", "--question", "q01",
                    "--max-retries", "0")  # fmt: skip
        out += rcea("report", "publish", "--study", "s", "--entropy-only")
    finally:
        os.umask(old_umask)

    assert "the LLM endpoint at http://alice:***@127.0.0.1:" in out
    files = _all_files(data)
    names = {p.relative_to(data).parts[0] for p in files}
    assert {"rcea.db", "llm-cache", "artifacts", "reports"} <= names
    assert any(p.suffix == ".jsonl" for p in (data / "llm-cache").iterdir())
    for path in files:
        blob = path.read_bytes()
        for secret in (PLANTED_PASSWORD, PLANTED_KEY):
            assert secret.encode() not in blob, f"{secret} in {path}"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for folder in [data, *(p for p in data.rglob("*") if p.is_dir())]:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    with session_scope(open_store(Settings(data_dir=data))) as s:
        events = json.dumps([e.payload for e in list_events(s)], default=str)
    assert PLANTED_PASSWORD not in events and PLANTED_KEY not in events
    assert "http://alice:***@127.0.0.1:" in events  # the run records name the endpoint
    for secret in (PLANTED_PASSWORD, PLANTED_KEY):
        assert secret not in out
        assert secret not in caplog.text
    assert "alice:***@127.0.0.1" in caplog.text  # the HTTP client's request log, masked


def test_entry_point_umask_makes_files_private(tmp_path: Path) -> None:
    """The installed `rcea` (umask 077) on a fresh data dir: store, artifacts, bundle."""
    recs = _records(tmp_path)
    env = {"RCEA_DATA_DIR": str(tmp_path / "data")}
    for args in (("ingest", str(recs), "--study", "s"),
                 ("report", "publish", "--study", "s", "--entropy-only")):  # fmt: skip
        done = rcea_subprocess(*args, env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    paths = list((tmp_path / "data").rglob("*"))
    assert len(paths) >= 8
    for path in paths:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))


# -------------------------------------------------------------------------- names → paths

TRAVERSAL = ("../../x/escape", "/etc/passwd", "a/b", "..", ".", "", "a\\b", "..\\..\\w", "~/x")


@pytest.mark.parametrize("name", TRAVERSAL)
def test_path_under_never_leaves_its_base(name: str, tmp_path: Path) -> None:
    base = tmp_path / "base"
    path = path_under(base, name, suffix="-1.parquet")
    assert path.parent == base
    assert "/" not in path.name and "\\" not in path.name and not path.name.startswith(".")
    assert path.resolve().parent == base.resolve()


def test_safe_name_pins() -> None:
    assert safe_name("../../x/escape") == "_.._x_escape"
    assert safe_name("/etc/passwd") == "_etc_passwd"
    assert safe_name("a/b") == "a_b"
    assert safe_name("..") == safe_name(".") == safe_name("") == "unnamed"
    assert safe_name("study-1_v2.0") == "study-1_v2.0"
    assert safe_name("ünï") == "_n_"


@pytest.mark.parametrize("study", ["../../x/escape", "/tmp/abs-study", "a/b"])
def test_study_names_stay_inside_the_data_dir(
    study: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ingest artifacts, the codebook export's default path and report bundles of a study
    named like a path all land inside their folder under the data dir."""
    work = tmp_path / "w" / "v"
    work.mkdir(parents=True)
    data = work / "data"
    monkeypatch.setenv("RCEA_DATA_DIR", str(data))
    get_settings.cache_clear()
    before = set(tmp_path.rglob("*"))
    recs = _records(work)
    rcea("ingest", str(recs), "--study", study)
    oracle = ["--backend", "oracle", "--oracle", "tests.support.fake_llm:strategy_of"]
    rcea("codebook", "run", "--study", study, *oracle, "--sample", "6", code=3)  # queue waits
    exported = json.loads(rcea("codebook", "export", "--study", study, "--allow-incomplete",
                               "--json"))  # fmt: skip
    bundle = rcea("report", "publish", "--study", study, "--entropy-only")
    parquet = Path(exported["parquet"])
    assert parquet.parent == data / "artifacts" / "codebook"
    assert parquet.name == f"{safe_name(study)}-partition-{exported['partition_id']}.parquet"
    assert f"{data / 'reports' / safe_name(study)}-" in bundle
    (artifact_dir,) = [p for p in (data / "artifacts").iterdir() if p.name != "codebook"]
    assert artifact_dir.name == safe_name(study)
    new = set(tmp_path.rglob("*")) - before
    outside = {p for p in new if not p.is_relative_to(data) and p != recs}
    assert not outside, outside
    assert not Path("/tmp/abs-study").exists() and not (tmp_path / "x").exists()


# ------------------------------------------------------------ external services: one line


def _one_line(done: subprocess.CompletedProcess, *needles: str) -> str:
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ("studies",),
        ("db", "upgrade"),
        ("summary", "s"),
        ("audit", "gate"),
        ("codebook", "status", "--study", "s"),
        ("report", "build", "--study", "s"),
    ],
)
def test_postgres_down_is_one_line(args: tuple[str, ...], tmp_path: Path) -> None:
    port = free_port()
    url = f"postgresql://rcea:{PLANTED_PASSWORD}@127.0.0.1:{port}/rcea"
    done = rcea_subprocess(*args, env={"RCEA_DATABASE_URL": url,
                           "RCEA_DATA_DIR": str(tmp_path / "d")}, cwd=tmp_path)  # fmt: skip
    line = _one_line(
        done,
        "PostgreSQL at postgresql+psycopg://rcea:***@127.0.0.1:",
        "docker compose up -d postgres",
        "Connection refused",
    )
    assert PLANTED_PASSWORD not in done.stderr + done.stdout
    assert line.startswith("error: ")


@pytest.fixture
def audited_store(tmp_path: Path) -> Path:
    """A SQLite store with a drawn pair audit whose tasks are registered as pushed."""
    data = tmp_path / "data"
    engine = open_store(Settings(data_dir=data))
    audit_study(engine, tmp_path)
    fake_tasks(engine, draw_test_audit(engine, tmp_path))
    return data


@pytest.mark.parametrize(
    "args",
    [("audit", "push", "--annotator-a", "a@people.test", "--annotator-b", "b@people.test"),
     ("audit", "sync")],
)  # fmt: skip
def test_label_studio_down_is_one_line(
    args: tuple[str, ...], audited_store: Path, tmp_path: Path
) -> None:
    """A's server (run elsewhere, registered) does not answer: one line naming A, the URL
    and what to do; and for a server rcea runs that is stopped, the start command."""
    from rcea.annotation.people import People

    closed = f"http://127.0.0.1:{free_port()}"
    people = People(audited_store, "http://127.0.0.1:1")
    people.add("a@people.test", url=closed, token="0123456789abcdef")
    env = {"RCEA_DATA_DIR": str(audited_store)}
    done = rcea_subprocess(*args, env=env, cwd=tmp_path)
    _one_line(done, f"Label Studio of a@people.test at {closed}", "rcea labelstudio status")


def test_stopped_managed_server_names_its_start_command(
    audited_store: Path, tmp_path: Path
) -> None:
    """A person whose server rcea runs (registered, not running): `audit sync` says to
    start exactly that server."""
    from rcea.annotation.people import People

    base = free_port()
    people = People(audited_store, f"http://127.0.0.1:{base}")
    a = people.add("a@people.test")
    assert a.managed and a.port is not None
    env = {"RCEA_DATA_DIR": str(audited_store), "RCEA_LABELSTUDIO_URL": f"http://127.0.0.1:{base}"}
    # credentials exist once a server home is set up (as after a first start)
    people.server(a).credentials()
    done = rcea_subprocess("audit", "sync", env=env, cwd=tmp_path)
    _one_line(done, f"Label Studio of a@people.test at {a.url}",
              "`rcea labelstudio start a@people.test`")  # fmt: skip


def test_unreachable_server_url_for_a_new_person_is_one_line(tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    env = {"RCEA_DATA_DIR": str(tmp_path / "data")}
    done = rcea_subprocess(
        "labelstudio", "add-annotator", "c@x.test", "--server-url", closed,
        "--server-token", "0123456789abcdef", env=env, cwd=tmp_path,
    )  # fmt: skip
    _one_line(done, f"Label Studio of c@x.test at {closed}")


# --------------------------------------------------------------- the view's accounts


def test_researcher_accounts_are_hashed_private_and_checked(tmp_path: Path) -> None:
    from rcea.app.cli.demo_cmd import ensure_demo_view_login
    from rcea.study.logins import logins_path, verify

    path = logins_path(get_settings())
    add = ["view", "add-researcher", "carol", "--password-stdin"]
    assert "researcher 'carol' added" in runner.invoke(app, add, input="pw-one-1234\n").output
    refused = runner.invoke(app, add, input="pw-two-1234\n")
    assert refused.exit_code == 1 and "exists (use --reset" in refused.output
    short = runner.invoke(app, ["view", "add-researcher", "dan", "--password-stdin"], input="x\n")
    assert short.exit_code == 1 and "at least 8 characters" in short.output
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "pw-one-1234" not in path.read_text()
    entry = json.loads(path.read_text())["carol"]
    assert entry["scheme"] == "scrypt" and len(bytes.fromhex(entry["hash"])) == 32
    assert verify(path, "carol", "pw-one-1234") and not verify(path, "carol", "pw-two-1234")
    assert runner.invoke(app, [*add, "--reset"], input="pw-two-1234\n").exit_code == 0
    assert verify(path, "carol", "pw-two-1234") and not verify(path, "carol", "pw-one-1234")
    assert json.loads(rcea("view", "researchers", "--json")) == ["carol"]
    rcea("view", "remove-researcher", "carol")
    assert not verify(path, "carol", "pw-two-1234")
    # `rcea demo --serve` makes its own account once and shows the same login each time.
    first = ensure_demo_view_login(get_settings())
    assert first == ensure_demo_view_login(get_settings()) and first.startswith(
        "researcher login: demo-"
    )
    name, password = first.removeprefix("researcher login: ").split(" / ")
    assert verify(path, name, password)


def test_view_without_login_is_refused_off_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RCEA_VIEW_AUTH", "none")
    get_settings.cache_clear()
    out = runner.invoke(app, ["view", "--host", "0.0.0.0"])
    assert out.exit_code == 1 and "refused on 0.0.0.0" in out.output


# ------------------------------------------------------------------- loopback by default


def test_api_and_view_listen_on_loopback_by_default(tmp_path: Path) -> None:
    """`rcea serve` and `rcea view` started without --host: every listening socket of
    each process is on 127.0.0.1."""
    import psutil

    from tests.support.helpers import wait_for_http

    env = {**os.environ, "PYTHONPATH": str(ROOT), "RCEA_DATA_DIR": str(tmp_path / "d")}
    api_port, view_port = free_port(), free_port()
    procs = {
        api_port: subprocess.Popen([RCEA, "serve", "--port", str(api_port)], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        view_port: subprocess.Popen([RCEA, "view", "--port", str(view_port)], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    }  # fmt: skip
    try:
        wait_for_http(f"http://127.0.0.1:{api_port}/health", timeout=90, proc=procs[api_port])
        wait_for_http(
            f"http://127.0.0.1:{view_port}/_stcore/health", timeout=90, proc=procs[view_port]
        )
        for port, proc in procs.items():
            listening = [
                c.laddr
                for c in psutil.Process(proc.pid).net_connections(kind="inet")
                if c.status == psutil.CONN_LISTEN
            ]
            assert listening and {a.ip for a in listening} == {"127.0.0.1"}, listening
            assert port in {a.port for a in listening}
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(timeout=30)
