"""The periodic background sync runs once per API deployment, not once per API process:
two app instances on one store (as ``rcea serve --workers 2``) — one syncs each round,
the other waits, and takes over when the first stops (docs/labelstudio.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rcea.app.api import create_app
from rcea.study.settings import Settings
from tests.support.labelling_study import wait_for


def test_two_api_processes_one_sync(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings = Settings(
        data_dir=tmp_path / "d", api_token="t", webhook_secret="s", sync_interval_s=0.1
    )
    first = create_app(settings, engine=engine, background_sync=True)
    second = create_app(settings, engine=engine, background_sync=True)
    with TestClient(first):
        assert wait_for(lambda: first.state.sync_rounds >= 2, timeout=10)
        with TestClient(second):
            start = first.state.sync_rounds
            assert wait_for(lambda: first.state.sync_rounds >= start + 5, timeout=15)
            assert second.state.sync_rounds == 0  # it tried each round and waited
    # counted once the first has stopped (read inside the block above, a round still
    # running at shutdown made this test flaky); shutdown waits up to 30 s for a round
    # in flight, so on a loaded machine wait for the thread itself
    first.state.sync_thread.join(timeout=120)
    assert not first.state.sync_thread.is_alive(), "the stopped app still syncs"
    ran_first = first.state.sync_rounds
    # the first stopped; a new one (the second's successor) now syncs
    third = create_app(settings, engine=engine, background_sync=True)
    with TestClient(third):
        assert wait_for(lambda: third.state.sync_rounds >= 2, timeout=10)
    assert ran_first >= 7 and first.state.sync_rounds == ran_first


def test_a_round_that_loses_the_insert_race_runs_again(  # type: ignore[no-untyped-def]
    engine, tmp_path: Path, monkeypatch, caplog
) -> None:
    """A webhook's read-back may record an annotation between a sync round's read and its
    insert (the unique key then refuses the round's row, as `rcea serve` logged in the
    how-to walk): the round rolls back and runs again at once — no failed round, no
    traceback — and only a round that keeps losing is logged as failed."""
    import logging

    from sqlalchemy.exc import IntegrityError

    from rcea.study.labelling import sync as labelling_sync

    calls: list[int] = []

    def racing(session, people):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 1:
            raise IntegrityError("INSERT INTO audit_label", {}, Exception("UNIQUE constraint"))
        return []

    monkeypatch.setattr(labelling_sync, "sync_all", racing)
    settings = Settings(
        data_dir=tmp_path / "d", api_token="t", webhook_secret="s", sync_interval_s=0.1
    )
    app = create_app(settings, engine=engine, background_sync=True)
    with caplog.at_level(logging.ERROR, logger="rcea.api.sync"), TestClient(app):
        assert wait_for(lambda: app.state.sync_rounds >= 1, timeout=10)
    assert calls[:2] == [1, 1]
    assert "background sync failed" not in caplog.text

    def always(session, people):  # type: ignore[no-untyped-def]
        raise IntegrityError("INSERT INTO audit_label", {}, Exception("UNIQUE constraint"))

    monkeypatch.setattr(labelling_sync, "sync_all", always)
    with pytest.raises(IntegrityError):
        labelling_sync.sync_everything(engine, app.state.people)
