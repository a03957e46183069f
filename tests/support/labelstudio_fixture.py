"""Real Label Studio servers for the whole test run (session scope), shared by every test
package (imported into ``tests/conftest.py``): a pool of three, one per person of a round
(A, B, adjudicator), since rcea gives every person a server of their own.

Self-contained: it uses only
``tmp_path_factory`` and explicit arguments, never Settings or the RCEA_* environment
(which the function-scoped ``_isolated_env`` fixture clears for every test).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rcea.annotation.people import People
from rcea.annotation.server import LabelStudioServer, default_executable
from tests.support.helpers import service_missing

BOOT_SECONDS: dict[str, float] = {}


@dataclass(frozen=True)
class LabelStudioHandle:
    url: str
    token: str
    data_dir: Path  # the rcea data dir; Label Studio's own is data_dir / "labelstudio"
    server: LabelStudioServer


def _free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


POOL_SIZE = 3


@pytest.fixture(scope="session")
def labelstudio_pool(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[list[LabelStudioHandle]]:
    """Three started servers on free loopback ports in temp dirs (booted in parallel);
    stopped after the run."""
    from concurrent.futures import ThreadPoolExecutor

    executable = default_executable()
    if not executable.exists():
        service_missing(
            "labelstudio", f"no label-studio at {executable}; `make install` creates it"
        )
    servers = []
    for i in range(POOL_SIZE):
        data_dir = tmp_path_factory.mktemp(f"labelstudio-data-{i}")
        servers.append(LabelStudioServer(data_dir, _free_loopback_port(), executable=executable))
    began = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=POOL_SIZE) as pool:
            for fut in [pool.submit(s.start, 300) for s in servers]:
                fut.result()
        BOOT_SECONDS[f"first boot of {POOL_SIZE} servers"] = time.monotonic() - began
        yield [LabelStudioHandle(s.url, s.credentials().token, s.data_dir, s) for s in servers]
    finally:
        for s in servers:
            s.stop()


@pytest.fixture(scope="session")
def labelstudio(labelstudio_pool: list[LabelStudioHandle]) -> LabelStudioHandle:
    """The first server of the pool (tests of one server)."""
    return labelstudio_pool[0]


def register_people(data_dir: Path, pool: list[LabelStudioHandle], emails: list[str]) -> People:
    """The people registry of an rcea data dir, with person i on pool server i (as an
    external server: the pool is started by the fixture, not by rcea)."""
    people = People(data_dir, "http://127.0.0.1:1")
    for email, handle in zip(emails, pool, strict=False):
        people.add(email, url=handle.url, token=handle.token)
    return people
