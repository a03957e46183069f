"""Append-only that holds on PostgreSQL too (migration 0008_secure): TRUNCATE of the event
log and of every frozen table is refused by their own trigger, and an audit's bound rubric
and partition (ids and hashes) cannot be updated, on SQLite and PostgreSQL."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from rcea.study.settings import Settings
from rcea.study.store import open_store
from tests.support.helpers import audit_study, draw_test_audit

FROZEN = (
    "rubric",
    "partition",
    "partition_assignment",
    "audit_pair",
    "codebook_version",
    "codebook_export",
    "judge_version",
    "judge_verdict",
    "validity_item",
)
ANY_GUARD = r"\w+ rows are frozen: create a new version instead|event table is append-only"
BOUND_MSG = "audit rows bind their rubric and partition"


def _refused(engine: sa.Engine, sql: str, message: str) -> None:
    """``sql`` fails with the trigger's own message (not any SQL error)."""
    with pytest.raises(DBAPIError, match=re.escape(message)), engine.begin() as conn:
        conn.execute(sa.text(sql))


@pytest.fixture
def audited(store_url: str, tmp_path: Path) -> sa.Engine:
    engine = open_store(Settings(data_dir=tmp_path / "data", database_url=store_url))
    audit_study(engine, tmp_path)
    draw_test_audit(engine, tmp_path)
    return engine


def test_frozen_migration_list_is_complete() -> None:
    """The 0008 list is the union of the frozen lists of 0002, 0003 and 0005."""
    import importlib

    lists = [
        importlib.import_module(f"rcea.study.store.migrations.versions.{m}").FROZEN_TABLES
        for m in ("0002_pair_audit_tables", "0003_codebook", "0005_judge", "0008_secure")
    ]
    assert set(lists[-1]) == set(lists[0]) | set(lists[1]) | set(lists[2]) == set(FROZEN)


@pytest.mark.postgres
def test_truncate_is_refused_on_postgres(audited: sa.Engine) -> None:
    if audited.dialect.name != "postgresql":
        pytest.skip("SQLite has no TRUNCATE")
    _refused(audited, "TRUNCATE event", "event table is append-only")
    inspector = sa.inspect(audited)
    referenced = {
        fk["referred_table"]
        for t in inspector.get_table_names()
        for fk in inspector.get_foreign_keys(t)
    }
    leaves = set()
    for table in FROZEN:
        msg = f"{table} rows are frozen: create a new version instead"
        # A plain TRUNCATE of a table others reference stops at the foreign key; where it
        # does not, the table's own trigger refuses it.
        with pytest.raises(DBAPIError) as plain, audited.begin() as conn:
            conn.execute(sa.text(f'TRUNCATE "{table}"'))
        if "referenced in a foreign key" not in str(plain.value):
            assert msg in str(plain.value), str(plain.value)
            leaves.add(table)
        # CASCADE passes the foreign keys: the first frozen table's trigger refuses it.
        with pytest.raises(DBAPIError, match=ANY_GUARD), audited.begin() as conn:
            conn.execute(sa.text(f'TRUNCATE "{table}" CASCADE'))
    assert leaves == set(FROZEN) - referenced and leaves  # every unreferenced one
    # Tables that are not frozen but referenced by frozen ones: CASCADE reaches them.
    for table in ("study", "audit"):
        with pytest.raises(DBAPIError, match=ANY_GUARD), audited.begin() as conn:
            conn.execute(sa.text(f'TRUNCATE "{table}" CASCADE'))
    with audited.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM event")).scalar_one() > 0
        assert conn.execute(sa.text("SELECT count(*) FROM audit_pair")).scalar_one() == 18


def test_audit_bound_hashes_are_immutable(audited: sa.Engine) -> None:
    with audited.connect() as conn:
        before = conn.execute(
            sa.text("SELECT rubric_id, rubric_hash, partition_id, partition_hash FROM audit")
        ).one()
    for sql in (
        "UPDATE audit SET partition_hash = 'f00'",
        "UPDATE audit SET rubric_hash = 'f00'",
        "UPDATE audit SET partition_id = partition_id + 1",
        "UPDATE audit SET rubric_id = rubric_id + 1",
    ):
        _refused(audited, sql, BOUND_MSG)
    # The audit's other state (Label Studio project ids) stays writable.
    with audited.begin() as conn:
        conn.execute(sa.text("UPDATE audit SET created_by = 'someone else'"))
    with audited.connect() as conn:
        after = conn.execute(
            sa.text("SELECT rubric_id, rubric_hash, partition_id, partition_hash FROM audit")
        ).one()
    assert tuple(after) == tuple(before)
