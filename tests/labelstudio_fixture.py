"""One real Label Studio server for the whole test run (session scope), shared by every
test package (imported into ``tests/conftest.py``).

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

from annotation.server import LabelStudioServer, default_executable
from tests.helpers import service_missing

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


@pytest.fixture(scope="session")
def labelstudio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabelStudioHandle]:
    """A started server on a free loopback port in a temp dir; stopped after the run."""
    executable = default_executable()
    if not executable.exists():
        service_missing(
            "labelstudio", f"no label-studio at {executable}; `make install` creates it"
        )
    data_dir = tmp_path_factory.mktemp("labelstudio-data")
    server = LabelStudioServer(data_dir, _free_loopback_port(), executable=executable)
    began = time.monotonic()
    server.start(timeout=300)
    BOOT_SECONDS["first boot"] = time.monotonic() - began
    try:
        yield LabelStudioHandle(server.url, server.credentials().token, data_dir, server)
    finally:
        server.stop()
