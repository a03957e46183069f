"""One process of a deployment does a periodic job: a lock held in (or beside) the store.

``rcea serve --workers N`` runs N API processes, and a team deployment may run API
replicas on several machines against one PostgreSQL store; the background sync must run
once per deployment, not once per process (docs/labelstudio.md, "Background sync"). The
first process to take the lock is the leader and keeps it while it runs; the others try
again each round and take over when the leader stops or dies (the lock goes with its
connection or file descriptor — no lease to expire, nothing to clean up).

* PostgreSQL: a session advisory lock (``pg_try_advisory_lock``) on a connection of its
  own, outside the pool, so holding it never costs a request a pooled connection; it is
  checked each round, and a dropped connection (server restart) gives the lock up.
* SQLite: ``flock`` on ``<database>.<name>.lock`` beside the database file (every process
  of a SQLite store runs on its machine); an in-memory database is one process's own.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
from typing import Any

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

log = logging.getLogger("rcea.store.leader")


def lock_key(name: str) -> int:
    """The signed 64-bit advisory-lock key of ``name`` (stable across processes)."""
    return int.from_bytes(hashlib.sha256(f"rcea:{name}".encode()).digest()[:8], "big", signed=True)


class Leadership:
    """Whether this process is the one that runs job ``name`` on ``engine``'s store."""

    def __init__(self, engine: sa.Engine, name: str) -> None:
        self.engine = engine
        self.name = name
        self._conn: sa.Connection | None = None
        self._lock_engine: sa.Engine | None = None
        self._fd: int | None = None
        self._memory = False

    @property
    def held(self) -> bool:
        return self._memory or self._conn is not None or self._fd is not None

    def acquire(self) -> bool:
        """Take the lock if free (never waits); True while this process holds it."""
        dialect = self.engine.dialect.name
        if dialect == "postgresql":
            return self._acquire_pg()
        if dialect == "sqlite":
            return self._acquire_file()
        raise ValueError(f"no leader lock for a {dialect} store")

    def release(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()  # the session lock goes with the connection
            except Exception:  # noqa: BLE001 - a dead connection holds no lock either
                log.debug("closing the leader connection failed", exc_info=True)
            self._conn = None
        if self._lock_engine is not None:
            self._lock_engine.dispose()
            self._lock_engine = None
        if self._fd is not None:
            os.close(self._fd)  # releases the flock
            self._fd = None
        self._memory = False

    def _acquire_pg(self) -> bool:
        if self._conn is not None:
            try:  # still ours? (a restarted server dropped the session and its lock)
                self._conn.execute(sa.text("SELECT 1"))
                return True
            except Exception:  # noqa: BLE001 - lost: try to take it again below
                log.warning("leader connection for %s lost; retrying", self.name)
                self.release()
        if self._lock_engine is None:
            self._lock_engine = sa.create_engine(self.engine.url, poolclass=NullPool)
        conn = self._lock_engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            got = conn.execute(
                sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": lock_key(self.name)}
            ).scalar()
        except Exception:
            conn.close()
            raise
        if not got:
            conn.close()
            return False
        self._conn = conn
        log.info("this process now runs %s for the deployment", self.name)
        return True

    def _acquire_file(self) -> bool:
        if self._fd is not None or self._memory:
            return True
        database: Any = self.engine.url.database
        if not database or database == ":memory:" or database.startswith("file:"):
            self._memory = True  # an in-memory store belongs to this one process
            return True
        fd = os.open(f"{database}.{self.name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        log.info("this process now runs %s for the deployment", self.name)
        return True
