"""The store's leader lock: one holder per store at a time (two holders in one process
stand for two API processes: each has its own connection or file descriptor), a free lock
is taken at once, a released one by the next to try; SQLite and PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from rcea.study.store import make_engine
from rcea.study.store.leader import Leadership, lock_key


def test_one_holder_at_a_time(engine) -> None:  # type: ignore[no-untyped-def]
    first, second = Leadership(engine, "job"), Leadership(engine, "job")
    other_job = Leadership(engine, "another-job")
    try:
        assert first.acquire() and first.acquire()  # held, and re-checked
        assert not second.acquire() and not second.held
        assert other_job.acquire()  # another job's lock is its own
        first.release()
        assert second.acquire() and second.held
        assert not first.acquire()
    finally:
        for held in (first, second, other_job):
            held.release()


def test_another_process_cannot_take_it(store_url: str) -> None:
    """A second OS process (as ``rcea serve --workers 2`` starts) sees the lock taken."""
    engine = make_engine(store_url)
    holder = Leadership(engine, "job")
    script = textwrap.dedent(f"""
        from rcea.study.store import make_engine
        from rcea.study.store.leader import Leadership
        print(Leadership(make_engine({store_url!r}), "job").acquire())
    """)

    def other() -> str:
        out = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    try:
        assert holder.acquire()
        assert other() == "False"
        holder.release()
        assert other() == "True"  # and its exit gave the lock back
        assert holder.acquire()
    finally:
        holder.release()
        engine.dispose()


def test_memory_store_is_its_own_leader() -> None:
    engine = make_engine("sqlite://")
    assert Leadership(engine, "job").acquire() and Leadership(engine, "job").acquire()


def test_lock_key_is_stable_and_64_bit() -> None:
    assert lock_key("background-sync") == lock_key("background-sync") != lock_key("x")
    assert -(2**63) <= lock_key("background-sync") < 2**63
