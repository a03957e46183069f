"""The team's services behind the door (rcea/annotation/team_services.py), with a real small
HTTP server standing in for the API: started detached with its pid record and log, reused
when started again, refused on a port something else holds, reported down when it died,
stopped with its children. (``test_frontdoor_team.py`` runs the real API and view.)"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import psutil
import pytest

from rcea.annotation.team_services import (
    Service,
    ServiceError,
    ServiceProcess,
    service_statuses,
    start_services,
    stop_services,
)
from tests.support.helpers import free_port


def _service(port: int, name: str = "api") -> Service:
    cmd = (sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1")
    return Service(name, cmd, port, "/")


def test_start_reuse_status_stop(tmp_path: Path) -> None:
    svc = _service(free_port())
    [first] = start_services(tmp_path, [svc], timeout=60)
    try:
        assert first.running and first.healthy and first.pid is not None
        record = json.loads((tmp_path / "frontdoor" / "api.pid").read_text())
        assert record["pid"] == first.pid and record["port"] == svc.port
        assert "starting the api" in (tmp_path / "frontdoor" / "api.log").read_text()
        # idempotent: the running one is reused
        again = ServiceProcess(tmp_path, svc).start(timeout=60)
        assert again.pid == first.pid
        statuses = service_statuses(tmp_path, ["api", "view"])
        assert list(statuses) == ["api"] and statuses["api"].healthy
    finally:
        stopped = stop_services(tmp_path, ["view", "api"])
    assert stopped == ["api"]
    assert not psutil.pid_exists(first.pid) or psutil.Process(first.pid).status() == "zombie"
    assert not (tmp_path / "frontdoor" / "api.pid").exists()
    assert stop_services(tmp_path, ["api"]) == []


def test_busy_port_and_a_dead_service(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ServiceError, match=f"port {port} on 127.0.0.1 is in use by a proc"):
            ServiceProcess(tmp_path, _service(port)).start(timeout=10)
    # a command that exits at once: one error naming its log
    bad = Service("view", (sys.executable, "-c", "raise SystemExit(3)"), free_port(), "/")
    with pytest.raises(ServiceError, match="the view exited before answering"):
        ServiceProcess(tmp_path, bad).start(timeout=30)
    assert not (tmp_path / "frontdoor" / "view.pid").exists()
    # one that died after starting: reported down (not running, not healthy)
    svc = _service(free_port())
    started = ServiceProcess(tmp_path, svc).start(timeout=60)
    psutil.Process(started.pid).kill()
    psutil.Process(started.pid).wait(timeout=10)
    down = service_statuses(tmp_path, ["api"])["api"]
    assert not down.running and not down.healthy
    assert stop_services(tmp_path, ["api"]) == []
