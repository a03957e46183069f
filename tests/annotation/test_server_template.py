"""The migrated template database new Label Studio data dirs start from
(``rcea.annotation.server_template``): made once per installation, even by concurrent starts;
never carrying a user, organisation or token; a failure only costs the server its own
migrations. The fast tests use a stand-in ``python`` next to a stand-in executable; the
slow ones read the real template and the session pool's servers."""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
import time
from pathlib import Path

import pytest

from rcea.annotation import server_template
from rcea.annotation.client import http_client
from rcea.annotation.server import LabelStudioServer, server_env
from tests.support.labelstudio_fixture import LabelStudioHandle


def _installation(tmp_path: Path, migrate_body: str) -> Path:
    """bin/label-studio (never run here) and bin/python, which stands in for the
    installation's interpreter: it logs each run to bin/runs and executes ``migrate_body``
    in the data dir (its cwd)."""
    bin_dir = tmp_path / "install" / "bin"
    bin_dir.mkdir(parents=True)
    exe = bin_dir / "label-studio"
    exe.write_text("#!/bin/sh\nexit 9\n")
    exe.chmod(0o755)
    python = bin_dir / "python"
    python.write_text(
        f"#!{sys.executable}\n"
        "import os, sys, time\n"
        f"runs = open({str(bin_dir / 'runs')!r}, 'a')\n"
        "runs.write(os.environ['LABEL_STUDIO_BASE_DATA_DIR'] + '\\n')\n"
        "runs.close()\n"
        f"{migrate_body}\n"
    )
    python.chmod(0o755)
    return exe


ORIGINAL_CACHE = os.environ.get("XDG_CACHE_HOME")
MAKES_DB = "time.sleep(0.5); open('label_studio.sqlite3', 'w').write('migrated')"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_concurrent_first_uses_migrate_once_and_share_the_template(tmp_path: Path) -> None:
    exe = _installation(tmp_path, MAKES_DB)
    env = server_env(tmp_path / "unused", base={"PATH": os.defpath})
    got: list[Path] = []
    threads = [
        threading.Thread(target=lambda: got.append(server_template.migrated_database(exe, env, 30)))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 4 and len(set(got)) == 1
    template = got[0]
    assert template.read_text() == "migrated"
    assert template.parent.parent == tmp_path / "cache" / "rcea" / "labelstudio-db"
    assert os.stat(template).st_mode & 0o777 == 0o600
    runs = (exe.parent / "runs").read_text().splitlines()
    assert len(runs) == 1, runs  # one migration, in a temporary data dir since removed
    assert not Path(runs[0]).exists() and Path(runs[0]).parent == template.parent
    assert server_template.migrated_database(exe, env, 30) == template
    assert len((exe.parent / "runs").read_text().splitlines()) == 1


def test_the_migration_sees_no_credentials(tmp_path: Path) -> None:
    exe = _installation(
        tmp_path,
        "assert not [k for k in os.environ if k.startswith('LABEL_STUDIO_USER')"
        " or k == 'LABEL_STUDIO_PASSWORD'], sorted(os.environ)\n" + MAKES_DB,
    )
    from rcea.annotation.server import Credentials

    creds = Credentials("admin@x.org", "pw-12345678", "tok123456")
    env = server_env(tmp_path / "home", creds, base={"PATH": os.defpath})
    assert "LABEL_STUDIO_USER_TOKEN" in env
    assert server_template.migrated_database(exe, env, 30).exists()


def test_a_reinstalled_label_studio_gets_a_new_template(tmp_path: Path) -> None:
    exe = _installation(tmp_path, MAKES_DB)
    env = server_env(tmp_path / "unused", base={"PATH": os.defpath})
    first = server_template.migrated_database(exe, env, 30)
    stamp = exe.stat().st_mtime_ns + 5_000_000_000
    os.utime(exe, ns=(stamp, stamp))  # pip rewrites the entry point on reinstall
    second = server_template.migrated_database(exe, env, 30)
    assert second != first and second.exists()
    assert len((exe.parent / "runs").read_text().splitlines()) == 2


def test_a_failed_migration_leaves_no_template(tmp_path: Path) -> None:
    exe = _installation(tmp_path, "open('label_studio.sqlite3', 'w').write('half'); sys.exit(3)")
    env = server_env(tmp_path / "unused", base={"PATH": os.defpath})
    with pytest.raises(server_template.TemplateError, match="exit 3"):
        server_template.migrated_database(exe, env, 30)
    where = server_template.template_dir(exe)
    assert not (where / server_template.DB_FILE).exists()
    assert [p.name for p in where.iterdir()] == [".lock"]


def test_a_slow_migration_times_out_into_an_error(tmp_path: Path) -> None:
    exe = _installation(tmp_path, "time.sleep(30)")
    env = server_env(tmp_path / "unused", base={"PATH": os.defpath})
    began = time.monotonic()
    with pytest.raises(server_template.TemplateError, match="longer than 1 s"):
        server_template.migrated_database(exe, env, 1)
    assert time.monotonic() - began < 15


def test_an_executable_outside_a_venv_has_no_template(tmp_path: Path) -> None:
    exe = tmp_path / "label-studio"
    exe.write_text("#!/bin/sh\n")
    with pytest.raises(server_template.TemplateError, match="not a virtual environment"):
        server_template.migrated_database(exe, {}, 30)
    assert not (tmp_path / "cache").exists()


def test_seeding_never_replaces_an_existing_database(tmp_path: Path) -> None:
    template = tmp_path / "template.sqlite3"
    template.write_text("empty")
    home = tmp_path / "home"
    home.mkdir()
    assert server_template.seed_data_dir(home, template) is True
    db = home / server_template.DB_FILE
    assert db.read_text() == "empty" and os.stat(db).st_mode & 0o777 == 0o600
    db.write_text("a person's labels")
    assert server_template.seed_data_dir(home, template) is False
    assert db.read_text() == "a person's labels"
    assert sorted(p.name for p in home.iterdir()) == [server_template.DB_FILE]


def test_start_seeds_a_new_data_dir_and_logs_it(tmp_path: Path) -> None:
    """``start`` copies the template before the first launch (here the stand-in server
    exits at once, which start reports as usual) and says so in the server log; a data dir
    whose template cannot be made is left to migrate itself, with the reason logged."""
    from rcea.annotation.server import LabelStudioError

    exe = _installation(tmp_path, MAKES_DB)
    server = LabelStudioServer(tmp_path / "data", 1, executable=exe)
    with pytest.raises(LabelStudioError):
        server.start(timeout=10)
    assert (server.home / server_template.DB_FILE).read_text() == "migrated"
    assert "database copied from the migrated template" in server.log_file.read_text()

    broken = _installation(tmp_path / "other", "sys.exit(4)")
    server = LabelStudioServer(tmp_path / "data2", 1, executable=broken)
    with pytest.raises(LabelStudioError):
        server.start(timeout=10)
    assert not (server.home / server_template.DB_FILE).exists()
    log = server.log_file.read_text()
    assert "no migrated template" in log and "migrates this database itself" in log


# ------------------------------------------------------------- the real installation


@pytest.mark.slow
def test_the_real_template_holds_no_account_and_servers_do_not_share_one(
    labelstudio_pool: list[LabelStudioHandle], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session pool's servers started from the template (none ran its own migrations);
    the template has the schema but no user, organisation, token or project; each server's
    admin token works on its own server only, and each has its own secret key."""
    if ORIGINAL_CACHE is None:  # the cache the pool used (it started before _own_cache)
        monkeypatch.delenv("XDG_CACHE_HOME")
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", ORIGINAL_CACHE)
    exe = labelstudio_pool[0].server.executable()
    template = server_template.template_dir(exe) / server_template.DB_FILE
    assert template.exists()
    with sqlite3.connect(f"file:{template}?mode=ro", uri=True) as db:
        tables = {r[0] for r in db.execute("select name from sqlite_master where type='table'")}
        assert {"htx_user", "organization", "authtoken_token", "project"} <= tables
        for table in ("htx_user", "organization", "authtoken_token", "project"):
            assert db.execute(f"select count(*) from {table}").fetchone() == (0,), table
        assert db.execute("select count(*) from django_migrations").fetchone()[0] > 100

    secrets = set()
    for handle in labelstudio_pool:
        log = handle.server.log_file.read_text()
        assert "database copied from the migrated template" in log
        assert "Initializing database" not in log  # Label Studio's own migration banner
        secrets.add((handle.server.home / ".env").read_text())
    assert len(secrets) == len(labelstudio_pool)
    a, b = labelstudio_pool[0], labelstudio_pool[1]
    auth = {"Authorization": f"Token {a.token}"}
    with http_client(b.url) as client:
        assert client.get("/api/current-user/whoami", headers=auth).status_code == 401
    with http_client(a.url) as client:
        assert client.get("/api/current-user/whoami", headers=auth).status_code == 200
