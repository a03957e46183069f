"""Webhook notifications read back off the request path: a bounded queue per person and
a few worker threads (one queue per API process; docs/labelstudio.md, "Webhooks").

The webhook route only validates a notification and :meth:`ReadBackQueue.offer` s its ids:
it answers at once. The workers do the read-backs (:func:`rcea.study.labelling.notify`: one
listing call per bound project) and record what they find. The rules that keep one
person's flood from holding up anyone else:

* a person has at most :data:`MAX_PENDING_IDS` distinct annotation ids waiting; a
  notification that would pass it is refused (:class:`QueueFull`, 429 at the route) and
  left to the next sync, which reconciles what it named;
* ids waiting for one person are merged (a replay or a burst of one person's labels costs
  one read-back, not one per notification);
* a person's ids are read back by one worker at a time, and people take turns (round
  robin): with :data:`WORKERS` workers, another person's labels never wait behind a
  flooding person's read-back, however slow that person's server answers.

The queue lives in memory: what is waiting when the API stops is dropped (logged) and the
next sync records it — a notification is only a hint (docs/labelstudio.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from rcea.annotation.people import People, Person
from rcea.study.labelling.sync import notify

log = logging.getLogger("rcea.api.readback")

MAX_NOTIFY_IDS = 100  # annotations one notification may name (a bulk action of more: 429)
MAX_PENDING_IDS = 2 * MAX_NOTIFY_IDS  # distinct ids waiting per person (beyond: 429)
WORKERS = 2  # read-back threads per API process; one person holds at most one


class QueueFull(Exception):
    """The person's queue cannot take this notification; the next sync reconciles it."""


class ReadBackQueue:
    """Per-person bounded queues of annotation ids to read back, served round robin by
    ``workers`` threads between :meth:`start` and :meth:`stop`."""

    def __init__(
        self,
        engine: Any,
        people: People,
        *,
        workers: int = WORKERS,
        max_pending_ids: int = MAX_PENDING_IDS,
    ) -> None:
        self.engine = engine
        self.people = people
        self.workers = workers
        self.max_pending_ids = max_pending_ids
        self._cond = threading.Condition()
        self._pending: dict[str, dict[int | None, dict[int, None]]] = {}  # slug → project → ids
        self._persons: dict[str, Person] = {}
        self._ready: deque[str] = deque()  # people with ids waiting and no read-back running
        self._busy: set[str] = set()
        self._threads: list[threading.Thread] = []
        self._stopping = False
        #: read-back rounds finished per person slug, and their outcome counts
        self.rounds: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()

    # ------------------------------------------------------------------ the route's side

    def offer(self, person: Person, ids: list[int], project: int | None) -> int:
        """Queue ``ids`` (of ``project``, when the notification named it) for ``person``;
        returns how many were new to the queue. Never blocks on a read-back."""
        with self._cond:
            if self._stopping:
                raise QueueFull("the API is shutting down; the next sync reconciles this")
            waiting = self._pending.get(person.slug, {})
            known = {i for group in waiting.values() for i in group}
            new = [i for i in dict.fromkeys(ids) if i not in known]
            if len(known) + len(new) > self.max_pending_ids:
                raise QueueFull(
                    f"{len(known)} annotation(s) of this person are waiting to be read back "
                    f"(at most {self.max_pending_ids}); the next sync reconciles these"
                )
            if not new:
                return 0
            group = self._pending.setdefault(person.slug, {}).setdefault(project, {})
            group.update(dict.fromkeys(new))
            self._persons[person.slug] = person
            if person.slug not in self._busy and person.slug not in self._ready:
                self._ready.append(person.slug)
            self._cond.notify()
            return len(new)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        for n in range(self.workers):
            t = threading.Thread(target=self._work, name=f"rcea-readback-{n}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop taking notifications, let running read-backs finish (up to ``timeout``),
        drop what is still waiting (the next sync records it)."""
        with self._cond:
            self._stopping = True
            dropped = sum(len(g) for p in self._pending.values() for g in p.values())
            self._pending.clear()
            self._ready.clear()
            self._cond.notify_all()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        if dropped:
            log.info("read-back queue stopped: %d id(s) left to the next sync", dropped)

    def alive(self) -> int:
        """Worker threads still running."""
        return sum(t.is_alive() for t in self._threads)

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until nothing waits and nothing runs (tests, benchmarks); whether it did."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
            return True

    # ------------------------------------------------------------------ the workers' side

    def _take(self) -> tuple[Person, dict[int | None, list[int]]] | None:
        with self._cond:
            while not self._ready and not self._stopping:
                self._cond.wait()
            if self._stopping:
                return None
            slug = self._ready.popleft()
            batch = {p: list(ids) for p, ids in self._pending.pop(slug).items()}
            self._busy.add(slug)
            return self._persons[slug], batch

    def _work(self) -> None:
        while (job := self._take()) is not None:
            person, batch = job
            done: Counter[str] = Counter()
            try:
                for project, ids in batch.items():
                    done.update(self._read_back(person, ids, project))
            except Exception:  # noqa: BLE001 - logged; the next sync reconciles these ids
                log.exception("read-back for %s failed", person.slug)
            finally:
                with self._cond:
                    self._busy.discard(person.slug)
                    self.rounds[person.slug] += 1
                    self.counts.update(done)
                    if person.slug in self._pending and not self._stopping:
                        self._ready.append(person.slug)  # back of the line: people take turns
                    self._cond.notify_all()

    def _read_back(self, person: Person, ids: list[int], project: int | None) -> dict[str, int]:
        """Read back and record in one transaction; two read-backs of one annotation (this
        process and the periodic sync, or another API process) may race on insert: the
        loser retries and finds the row."""
        for attempt in range(3):
            try:
                with Session(self.engine, expire_on_commit=False) as session:
                    counts = notify(session, self.people, person, ids, project)
                    session.commit()
                    return counts
            except IntegrityError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")
