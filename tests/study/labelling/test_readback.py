"""The read-back queue on its own (no API): per-person bound, merged ids, stop, and a
failing read-back (the person's server refuses connections) that is logged while the
worker goes on to the next person. The route side and a stalling server are in
``tests/app/api/test_webhook_queue.py``."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sqlmodel import Session

from rcea.annotation.people import People
from rcea.study.labelling.readback import MAX_PENDING_IDS, QueueFull, ReadBackQueue
from rcea.study.store.models import LabellingProject
from tests.support.helpers import free_port


def _people(tmp_path: Path) -> tuple[People, object, object]:
    people = People(tmp_path / "d", "http://127.0.0.1:1")
    # nothing listens on these ports: connection refused
    a = people.add("a@x.test", url=f"http://127.0.0.1:{free_port()}", token="tok123456")
    b = people.add("b@x.test", url=f"http://127.0.0.1:{free_port()}", token="tok123456")
    return people, a, b


def test_bound_merge_and_stop(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    people, a, b = _people(tmp_path)
    queue = ReadBackQueue(engine, people)
    assert queue.offer(a, list(range(1, 101)), None) == 100
    assert queue.offer(a, list(range(51, 151)), None) == 50  # 51..100 already wait
    assert queue.offer(a, [1, 1, 2], None) == 0  # a replay adds nothing
    with pytest.raises(QueueFull, match=f"at most {MAX_PENDING_IDS}"):
        queue.offer(a, list(range(1000, 1051)), None)  # 150 + 51 > 200
    assert queue.offer(a, list(range(1000, 1050)), None) == 50  # exactly the bound
    assert queue.offer(b, list(range(1, 101)), 7) == 100  # B's own bound
    queue.start()
    assert queue.drain(timeout=30)
    # no project is bound: nothing to read, every distinct id ignored, one round each
    assert queue.counts["ignored"] == 300
    assert dict(queue.rounds) == {a.slug: 1, b.slug: 1}
    queue.stop()
    assert queue.alive() == 0
    with pytest.raises(QueueFull, match="shutting down"):
        queue.offer(a, [1], None)


def test_a_failing_read_back_is_logged_and_the_worker_goes_on(  # type: ignore[no-untyped-def]
    engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    people, a, b = _people(tmp_path)
    with Session(engine) as s:
        s.add(
            LabellingProject(
                family="pair", owner_id=1, role="A", person=a.email, person_slug=a.slug,
                server_url=a.url, user_id=1, project_id=3, marker="m", state="created",
            )
        )  # fmt: skip
        s.commit()
    queue = ReadBackQueue(engine, people, workers=1)  # one worker: it must survive A
    queue.start()
    try:
        with caplog.at_level(logging.ERROR, logger="rcea.api.readback"):
            queue.offer(a, [5], None)
            assert queue.drain(timeout=60)
            queue.offer(b, [6], None)
            assert queue.drain(timeout=30)
        assert dict(queue.rounds) == {a.slug: 1, b.slug: 1}
        assert queue.counts["ignored"] == 1  # B's; A's read-back failed, nothing counted
        assert any(f"read-back for {a.slug} failed" in r.getMessage() for r in caplog.records)
    finally:
        queue.stop()
