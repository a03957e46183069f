"""The FastAPI service: auth on everything but /health, studies and summaries."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from rcea.app.api import create_app
from rcea.study.records.ingest import ingest_file
from rcea.study.settings import Settings
from tests.support.helpers import free_port, make_record, wait_for_http, write_jsonl

TOKEN = "test-token-123"


@pytest.fixture
def client(engine, tmp_path: Path) -> TestClient:  # type: ignore[no-untyped-def]
    settings = Settings(data_dir=tmp_path / "d", api_token=TOKEN)
    path = write_jsonl(tmp_path / "a.jsonl", [make_record(i) for i in range(5)])
    ingest_file(
        engine,
        path,
        study="alpha",
        artifacts_dir=tmp_path / "d" / "artifacts",
        data_dir=tmp_path / "d",
    )
    return TestClient(create_app(settings, engine=engine))


AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_health_needs_no_token(client: TestClient) -> None:
    r = client.get("/health")
    assert r.status_code == 200 and r.json()["status"] == "ok"


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}]
)
def test_api_requires_token(client: TestClient, headers: dict[str, str]) -> None:
    for url in ("/api/studies", "/api/studies/1/summary"):
        assert client.get(url, headers=headers).status_code == 401


def test_studies_and_summary(client: TestClient) -> None:
    studies = client.get("/api/studies", headers=AUTH).json()
    assert [s["name"] for s in studies] == ["alpha"]
    summ = client.get(f"/api/studies/{studies[0]['id']}/summary", headers=AUTH).json()
    assert summ["n_trajectories"] == 5 and summ["n_questions"] == 3
    assert summ["groups"] == [
        {"run": "grpo", "model": "tiny", "step": 0, "n": 5, "n_success": 2, "n_failure": 3}
    ]
    assert client.get("/api/studies/999/summary", headers=AUTH).status_code == 404


def test_openapi_served_with_the_token_only(client: TestClient) -> None:
    spec = client.get("/openapi.json", headers=AUTH).json()
    assert "/api/studies/{study_id}/summary" in spec["paths"]
    assert client.get("/openapi.json").status_code == 401
    for page in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        assert client.get(page).status_code == 404, page


@pytest.mark.parametrize(
    "url",
    [
        "/api/studies/99999999999999999999/summary",
        "/api/studies/2147483648/summary",
        "/api/studies/0/summary",
        "/api/studies/-1/summary",
        "/api/studies/99999999999999999999/report",
        "/api/studies/1/report?base_step=99999999999999999999",
        "/api/studies/1/report?k_min=99999999999999999999",
        "/api/studies/99999999999999999999/audits/a/gate",
    ],
)
def test_ids_out_of_range_are_422_not_500(client: TestClient, url: str) -> None:
    assert client.get(url, headers=AUTH).status_code == 422


def test_real_server_with_uvicorn(tmp_path: Path) -> None:
    """`rcea serve` on a free loopback port; the token comes from the data dir file."""
    port = free_port()
    exe = Path(sys.executable).parent / "rcea"
    env = {"RCEA_DATA_DIR": str(tmp_path / "srv"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(
        [str(exe), "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for_http(f"{base}/health", timeout=60, proc=proc)
        token = (tmp_path / "srv" / "api-token").read_text().strip()
        assert httpx.get(f"{base}/api/studies", timeout=5).status_code == 401
        r = httpx.get(
            f"{base}/api/studies", headers={"Authorization": f"Bearer {token}"}, timeout=5
        )
        assert r.status_code == 200 and r.json() == []
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=20)
    token = (tmp_path / "srv" / "api-token").read_text().strip()
    assert token not in out  # the secret is never printed or logged
