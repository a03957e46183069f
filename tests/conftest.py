"""Shared fixtures: settings in a temp data dir, and store engines on SQLite and PostgreSQL.

PostgreSQL tests use the server at 127.0.0.1:5432 (trust auth, database ``test``), each
test in its own throw-away database created from a migrated template database (SQLite: a
copy of a migrated file); when no server answers they skip, saying why — or fail
when the run requires PostgreSQL (``CI`` set or ``RCEA_REQUIRE_POSTGRES=1``; ``.ci/run``
sets both). The terminal summary names every skipped test and its reason.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

from tests.support.helpers import UNDER_CI, postgres_unavailable_reason, service_missing
from tests.support.labelling_study import api, study  # noqa: F401 - audit on per-person servers
from tests.support.labelstudio_fixture import (  # noqa: F401 - session fixtures
    BOOT_SECONDS,
    LabelStudioHandle,
    labelstudio,
    labelstudio_pool,
)

# CI runs property tests with a fixed seed (reproducible, never flaky); locally they explore.
# HYPOTHESIS_PROFILE=ci (or dev) overrides; the choice is printed in the header.
hypothesis_settings.register_profile(
    "ci", derandomize=True, deadline=None, print_blob=True, database=None
)
hypothesis_settings.register_profile("dev", deadline=None)
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if UNDER_CI else "dev")
hypothesis_settings.load_profile(HYPOTHESIS_PROFILE)


def pytest_report_header() -> str:
    return f"hypothesis profile: {HYPOTHESIS_PROFILE}"


#: The longest tests (minutes each, docs/tests.md), in this order at the head of the
#: collection: with ``--dist load --maxschedchunk 1`` (make test, three workers) the quick
#: demo and the walkthrough (which reuses what the quick demo put in the demo cache) go
#: to one worker, one after the other, and the two-scales demo to another; every later
#: test goes to whichever worker is free, so none runs alone at the end.
LONGEST_FIRST = (
    "tests/app/demo/test_demo_e2e.py",
    "tests/app/demo/test_demo_walkthrough_e2e.py",
    "tests/app/demo/test_demo_scales.py",
    "tests/test_howto_verl.py",  # the how-to word for word: to the third worker
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest tests, then the other slow ones, then the rest (a stable sort: the
    order within each group is the collection order)."""

    def rank(item: pytest.Item) -> tuple[int, int]:
        path = item.nodeid.split("::")[0]
        if path in LONGEST_FIRST:
            return (0, LONGEST_FIRST.index(path))
        return (1 if item.get_closest_marker("slow") else 2, 0)

    items.sort(key=rank)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker hands its Label Studio boot times to the controller, which prints
    them (each worker boots its own pool)."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["labelstudio_boot_seconds"] = dict(BOOT_SECONDS)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: only called when xdist runs workers
def pytest_testnodedown(node: object, error: object) -> None:
    worker = getattr(node, "workerinput", {}).get("workerid", "?")
    for what, seconds in (
        getattr(node, "workeroutput", {}).get("labelstudio_boot_seconds", {}).items()
    ):
        BOOT_SECONDS[f"{what} (worker {worker})"] = seconds


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Label Studio's boot time, then every skipped test by name with its reason (``-ra``
    groups skips by reason and location, which hides how many tests, and which, did not
    run)."""
    for what, seconds in BOOT_SECONDS.items():
        terminalreporter.write_line(f"Label Studio {what}: {seconds:.1f} s")
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    terminalreporter.section(f"{len(skipped)} skipped tests, each with its reason")
    for rep in skipped:
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        terminalreporter.write_line(f"SKIPPED {rep.nodeid}: {reason.removeprefix('Skipped: ')}")


PG_BASE_URL = os.environ.get(
    "RCEA_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test reads the developer's RCEA_* variables or .env; data goes to tmp."""
    for key in list(os.environ):
        if key.startswith("RCEA_") and key != "RCEA_TEST_POSTGRES_URL":
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("RCEA_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    from rcea.study.settings import get_settings

    get_settings.cache_clear()


@pytest.fixture(scope="session")
def demo_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's recipe cache of this test session (``$RCEA_DEMO_CACHE_DIR`` of every demo
    test, :mod:`rcea.app.demo.cache`): the first test that needs a base policy, a training run
    or a probe output builds it, every later one with the same recipe copies it. Shared
    by the xdist workers of one run (the cache locks each recipe)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    path = base / "demo-cache"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture
def settings(tmp_path: Path):  # type: ignore[no-untyped-def]
    from rcea.study.settings import Settings

    return Settings(data_dir=tmp_path / "data")


@pytest.fixture(scope="session")
def migrated_sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SQLite store per test session made by exactly ``upgrade()`` from an empty file:
    every SQLite ``store_url`` starts as a copy of it (a later upgrade is a no-op)."""
    from rcea.study.store import make_engine, upgrade

    path = tmp_path_factory.mktemp("store-template") / "store.db"
    eng = make_engine(f"sqlite:///{path}")
    upgrade(eng)
    with eng.connect() as conn:  # everything in the main file: the copy needs no -wal
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    eng.dispose()
    return path


def _pg_url(database: str) -> str:
    """PG_BASE_URL with another database name (same server, user and query)."""
    from sqlalchemy.engine import make_url

    return make_url(PG_BASE_URL).set(database=database).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def migrated_postgres_template() -> Iterator[str]:
    """One PostgreSQL database per test session (per xdist worker) made by exactly
    ``upgrade()`` from an empty database: every PostgreSQL ``store_url`` is a database
    created from it (``CREATE DATABASE … TEMPLATE``). Dropped at the end of the session."""
    reason = postgres_unavailable_reason(PG_BASE_URL)
    if reason:
        service_missing("postgres", reason)
    import sqlalchemy as sa

    from rcea.study.store import make_engine, upgrade

    name = f"rcea_tpl_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(PG_BASE_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        eng = make_engine(_pg_url(name))
        upgrade(eng)
        eng.dispose()  # a template may have no other connection while it is copied
        yield name
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database URL for a store migrated to the head revision, once per backend: a copy
    of the session's template (SQLite: the file; PostgreSQL: a database created from the
    template database), i.e. exactly what ``upgrade()`` makes from an empty database, so
    ``upgrade``/``open_store`` on it is a no-op and ``downgrade`` works as on any store.
    ``tests/study/store/test_store_template.py`` checks that the copy equals a store migrated from
    empty on each engine."""
    if request.param == "sqlite":
        template: Path = request.getfixturevalue("migrated_sqlite_template")
        path = tmp_path / "store.db"
        shutil.copy2(template, path)  # the template's owner-only mode too
        yield f"sqlite:///{path}"
        return
    template_db: str = request.getfixturevalue("migrated_postgres_template")
    import sqlalchemy as sa

    name = f"rcea_t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(PG_BASE_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"'))
    try:
        yield _pg_url(name)
    finally:
        with admin.connect() as conn:  # FORCE: a connection the test left open is ended
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def engine(store_url: str):  # type: ignore[no-untyped-def]
    from rcea.study.store import make_engine, upgrade

    eng = make_engine(store_url)
    upgrade(eng)
    yield eng
    eng.dispose()
