"""Shared fixtures: settings in a temp data dir, and store engines on SQLite and PostgreSQL.

PostgreSQL tests use the server at 127.0.0.1:5432 (trust auth, database ``test``), each
test in its own throw-away schema; when no server answers they skip, saying why — or fail
when the run requires PostgreSQL (``CI`` set or ``RCEA_REQUIRE_POSTGRES=1``; ``.ci/run``
sets both). The terminal summary names every skipped test and its reason.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

from tests.helpers import UNDER_CI, postgres_unavailable_reason, service_missing
from tests.labelling_study import api, study  # noqa: F401 - audit on per-person servers
from tests.labelstudio_fixture import (  # noqa: F401 - session fixtures
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
    from study.settings import get_settings

    get_settings.cache_clear()


@pytest.fixture
def settings(tmp_path: Path):  # type: ignore[no-untyped-def]
    from study.settings import Settings

    return Settings(data_dir=tmp_path / "data")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database URL for an empty store, once per backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    reason = postgres_unavailable_reason(PG_BASE_URL)
    if reason:
        service_missing("postgres", reason)
    import sqlalchemy as sa

    schema = f"rcea_t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(PG_BASE_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    sep = "&" if "?" in PG_BASE_URL else "?"
    try:
        yield f"{PG_BASE_URL}{sep}options=-csearch_path%3D{schema}"
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture
def engine(store_url: str):  # type: ignore[no-untyped-def]
    from study.store import make_engine, upgrade

    eng = make_engine(store_url)
    upgrade(eng)
    yield eng
    eng.dispose()
