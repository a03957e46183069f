"""Test helpers shared across the test tree."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rcea.annotation.people import Person, person_slug
from rcea.study.pair_audit.freeze import freeze_partition_from_modes, freeze_rubric
from rcea.study.pair_audit.sampling import audit_pairs, draw_audit
from rcea.study.records.ingest import ingest_file
from rcea.study.store import session_scope
from rcea.study.store.models import Audit, AuditTask

# Read once, when the test session imports this module: the autouse ``_isolated_env``
# fixture clears every RCEA_* variable before each test runs.
CHROMIUM = "/usr/bin/chromium"
_TRUE = {"1", "true", "yes", "on"}


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


UNDER_CI = bool(os.environ.get("CI", "").strip()) and os.environ["CI"].strip().lower() not in {
    "0",
    "false",
    "no",
}
REQUIRED_SERVICES: dict[str, bool] = {
    "postgres": UNDER_CI or _flag("RCEA_REQUIRE_POSTGRES"),
    "browser": UNDER_CI or _flag("RCEA_REQUIRE_BROWSER"),
    "labelstudio": UNDER_CI or _flag("RCEA_REQUIRE_LABELSTUDIO"),
    "verl": UNDER_CI or _flag("RCEA_REQUIRE_VERL"),
    "trackio": UNDER_CI or _flag("RCEA_REQUIRE_TRACKIO"),
    "latex": UNDER_CI or _flag("RCEA_REQUIRE_LATEX"),
    "frontdoor": UNDER_CI or _flag("RCEA_REQUIRE_FRONTDOOR"),
    "triton": UNDER_CI or _flag("RCEA_REQUIRE_TRITON"),
}
_REQUIRED_BY = {
    "postgres": "RCEA_REQUIRE_POSTGRES=1",
    "browser": "RCEA_REQUIRE_BROWSER=1",
    "labelstudio": "RCEA_REQUIRE_LABELSTUDIO=1",
    "verl": "RCEA_REQUIRE_VERL=1",
    "trackio": "RCEA_REQUIRE_TRACKIO=1",
    "latex": "RCEA_REQUIRE_LATEX=1",
    "frontdoor": "RCEA_REQUIRE_FRONTDOOR=1",
    "triton": "RCEA_REQUIRE_TRITON=1",
}


def service_missing(service: str, reason: str) -> None:
    """Skip the test because ``service`` is missing — or fail it when the run requires the
    service (``CI`` set, or ``RCEA_REQUIRE_<SERVICE>=1``): a green CI run must contain
    every PostgreSQL, browser and Label Studio test."""
    if REQUIRED_SERVICES[service]:
        why = "CI is set" if UNDER_CI else f"{_REQUIRED_BY[service]} is set"
        pytest.fail(f"required service missing ({why}): {reason}", pytrace=False)
    pytest.skip(reason)


def chromium_executable() -> str:
    """Debian chromium's path for Playwright; skips (or fails, when required) without it."""
    if not Path(CHROMIUM).exists():
        service_missing(
            "browser",
            f"{CHROMIUM} missing: `apt-get install chromium` (`make install` and .ci/run do this)",
        )
    return CHROMIUM


def free_port_run(n: int) -> int:
    """The first of ``n`` consecutive free loopback ports (a front door's view, API and
    people)."""
    import random

    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 60000)
        socks: list[socket.socket] = []
        try:
            for port in range(base, base + n):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError(f"no {n} consecutive free ports")


NGINX = "/usr/sbin/nginx"
CERTUTIL = "/usr/bin/certutil"


def nginx_executable() -> str:
    """Debian nginx's path for the front door tests; skips (or fails, when required:
    ``CI`` or ``RCEA_REQUIRE_FRONTDOOR=1``) without it."""
    if not Path(NGINX).exists():
        service_missing(
            "frontdoor", f"{NGINX} missing: `apt-get install nginx-light` (`make install` does it)"
        )
    return NGINX


def laptop_namespace_support() -> None:
    """The laptop test makes network namespaces (root, ``ip netns``) and has chromium trust
    a local CA (``certutil``); skips (or fails, when required) without them."""
    if os.geteuid() != 0:
        service_missing("frontdoor", "network namespaces need root (`ip netns add`)")
    if not Path("/usr/sbin/ip").exists() and not Path("/usr/bin/ip").exists():
        service_missing("frontdoor", "`ip` missing: `apt-get install iproute2`")
    if not Path(CERTUTIL).exists():
        service_missing(
            "frontdoor", f"{CERTUTIL} missing: `apt-get install libnss3-tools` (.ci/nginx)"
        )


@lru_cache(maxsize=4)
def postgres_unavailable_reason(url: str) -> str | None:
    """None when PostgreSQL answers at ``url``, else a sentence saying why not."""
    import sqlalchemy as sa

    try:
        eng = sa.create_engine(url, connect_args={"connect_timeout": 3})
        with eng.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        eng.dispose()
    except Exception as exc:  # noqa: BLE001
        return f"no PostgreSQL server answers at {url}: {type(exc).__name__}: {exc}"[:300]
    return None


@contextmanager
def serve_http(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A threaded HTTP server on a free loopback port while the block runs; yields its
    base URL (``http://127.0.0.1:PORT``)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_record(i: int = 0, **overrides: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "trajectory_id": f"t{i:05d}",
        "question_id": f"q{i % 3}",
        "text": f"2+3 = 5\n\\boxed{{{i}}}",
        "reward": i % 2,
        "run": "grpo",
        "model": "tiny",
        "step": 0,
        "seed": i,
    }
    rec.update(overrides)
    return rec


def store_counts(engine) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Rows in the study, question, ingest and trajectory tables."""
    import sqlalchemy as sa

    from rcea.study.store import Ingest, Question, Study, Trajectory

    with engine.connect() as conn:
        return {
            t.__tablename__: conn.execute(sa.select(sa.func.count()).select_from(t)).scalar()
            for t in (Study, Question, Ingest, Trajectory)
        }


def ingest_into(engine, path: Path, data: Path, study: str = "s"):  # type: ignore[no-untyped-def]
    """``ingest_file`` with artifacts under ``data/artifacts``."""
    return ingest_file(engine, path, study=study, artifacts_dir=data / "artifacts", data_dir=data)


def write_jsonl(path: Path, records: list[dict[str, Any]] | list[str]) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for rec in records:
            fh.write((rec if isinstance(rec, str) else json.dumps(rec)) + "\n")
    return path


# --------------------------------------------------------------------------- audits


RUBRIC = """
[rubric]
name = "test-rubric"
version = "1"

[pairs]
seed = 5
pairs_per_question = 6
n_questions = 3
"""


def audit_study(engine, tmp_path: Path, n_q: int = 5, per_q: int = 6) -> None:  # type: ignore[no-untyped-def]
    recs = []
    for q in range(n_q):
        for k in range(per_q):
            i = q * 100 + k
            mode = None if (q == 4 and k == 0) else ("m1" if k % 2 else "m2")
            recs.append(
                make_record(
                    i, question_id=f"q{q}", reward=1, mode=mode, validity=1, text=f"solution {i}"
                )
            )
    recs.append(make_record(999, question_id="q0", reward=0, text="wrong"))
    ingest_file(
        engine,
        write_jsonl(tmp_path / "s.jsonl", recs),
        study="s",
        artifacts_dir=tmp_path / "art",
        data_dir=tmp_path,
    )


def rubric_file(tmp_path: Path, text: str = RUBRIC) -> Path:
    path = tmp_path / "rubric.toml"
    path.write_text(text)
    return path


def draw_test_audit(engine, tmp_path: Path) -> int:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        freeze_rubric(s, path=rubric_file(tmp_path), actor="r")
        freeze_partition_from_modes(s, study="s", actor="r")
        return draw_audit(s, study="s", rubric="test-rubric", actor="r").id


def fake_person(role: str) -> Person:
    """A person on a server that is never contacted (store-level tests)."""
    email = f"{role.lower()}@people.test"
    return Person(email, person_slug(email), f"http://127.0.0.1:9/{role}", managed=False)


def bind_fake(engine, audit_id: int, role: str, *, project_id: int, user_id: int) -> None:  # type: ignore[no-untyped-def]
    """Bind ``role`` of the audit as `audit push` would (no Label Studio involved)."""
    from rcea.study.labelling import PAIR, bind_existing

    with session_scope(engine) as s:
        bind_existing(
            s,
            PAIR,
            s.get(Audit, audit_id),
            role,
            person=fake_person(role),
            user_id=user_id,
            project_id=project_id,
        )


def fake_tasks(engine, audit_id: int) -> dict[str, dict[int, int]]:  # type: ignore[no-untyped-def]
    """Register tasks as `audit push` would (task ids 1000+) for roles A (project 1, user
    11) and B (project 2, user 12)."""
    out: dict[str, dict[int, int]] = {"A": {}, "B": {}}
    bind_fake(engine, audit_id, "A", project_id=1, user_id=11)
    bind_fake(engine, audit_id, "B", project_id=2, user_id=12)
    with session_scope(engine) as s:
        for role, base, proj in (("A", 1000, 1), ("B", 2000, 2)):
            for p in audit_pairs(s, audit_id=audit_id):
                s.add(
                    AuditTask(
                        audit_id=audit_id,
                        role=role,
                        pair_id=p.id,
                        project_id=proj,
                        task_id=base + p.id,
                        left_is_a=True,
                    )
                )
                out[role][p.id] = base + p.id
    return out


def wait_for_http(url: str, *, timeout: float = 60.0, proc: Any = None) -> None:
    """Poll ``url`` until it answers 200; fail the test (with the process output, if one is
    given) when it does not within ``timeout`` or the process exits."""
    import time

    import httpx
    import pytest

    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or (proc is not None and proc.poll() is not None):
            out = ""
            if proc is not None and proc.poll() is not None and proc.stdout:
                out = proc.stdout.read()
            pytest.fail(f"{url} did not answer within {timeout:.0f}s {out}")
        time.sleep(0.2)
