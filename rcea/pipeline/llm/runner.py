"""Bounded-concurrency execution of independent jobs (LLM batches).

Workers only call ``work``; every result is handed to ``on_result`` in the calling
thread, so persistence needs no locking. On Ctrl-C (or ``stop``) no new job starts, the
jobs in flight finish and are delivered (they are paid for), then the interruption is
re-raised.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar

J = TypeVar("J")
R = TypeVar("R")


def run_jobs(
    jobs: Iterable[J],
    work: Callable[[J], R],
    *,
    concurrency: int,
    on_result: Callable[[J, R], None],
    stop: threading.Event | None = None,
) -> int:
    """Run ``work(job)`` for every job with at most ``concurrency`` in flight; return how
    many results were delivered."""
    pending = iter(jobs)
    in_flight: dict[Future[R], J] = {}
    delivered = 0
    interrupted: BaseException | None = None
    exhausted = False
    with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="llm") as pool:
        try:
            while True:
                while not exhausted and len(in_flight) < max(1, concurrency):
                    if stop is not None and stop.is_set():
                        exhausted = True
                        break
                    job = next(pending, None)
                    if job is None:
                        exhausted = True
                        break
                    in_flight[pool.submit(work, job)] = job
                if not in_flight:
                    break
                done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                for fut in done:
                    job = in_flight.pop(fut)
                    on_result(job, fut.result())
                    delivered += 1
        except KeyboardInterrupt as exc:
            interrupted = exc
        if interrupted is not None:
            for fut in list(in_flight):
                job = in_flight.pop(fut)
                try:
                    on_result(job, fut.result())
                    delivered += 1
                except Exception:  # noqa: BLE001 - the interruption is what we report
                    pass
            raise interrupted
    return delivered
