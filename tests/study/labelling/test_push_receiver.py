"""Before a push registers Label Studio webhooks, ``check_receiver`` makes sure that the
receiver at the configured API address is this data dir's: rcea's own app accepts the
derived secret; another data dir's ``rcea serve`` on the same port (a shared machine),
a closed port and a server that is not rcea are refused, naming RCEA_API_HOST /
RCEA_API_PORT and the other options."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from rcea.app.api.main import create_app
from rcea.study.labelling import ReceiverError, WebhookTarget, check_receiver
from rcea.study.settings import Settings
from tests.support.helpers import free_port

BASE = "http://testserver/webhooks/label-studio"


def receiver(engine, tmp_path: Path, secret: str) -> TestClient:  # type: ignore[no-untyped-def]
    settings = Settings(data_dir=tmp_path / secret, api_token="t", webhook_secret=secret)
    return TestClient(create_app(settings, engine=engine))


def test_own_receiver_passes(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    check_receiver(WebhookTarget(BASE, "mine"), client=receiver(engine, tmp_path, "mine"))


def test_another_users_receiver_is_refused(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    theirs = receiver(engine, tmp_path, "theirs")
    with pytest.raises(ReceiverError) as info:
        check_receiver(WebhookTarget(BASE, "mine"), client=theirs)
    msg = str(info.value)
    assert "refuses this study's secret" in msg and "another rcea data dir" in msg
    assert "RCEA_API_HOST/RCEA_API_PORT" in msg and "--no-webhook" in msg


def test_closed_port_is_refused() -> None:
    url = f"http://127.0.0.1:{free_port()}/webhooks/label-studio"
    with pytest.raises(ReceiverError, match="no webhook receiver answers at"):
        check_receiver(WebhookTarget(url, "mine"), timeout=2.0)


def test_a_server_that_is_not_rcea_is_refused() -> None:
    other = FastAPI()

    @other.post("/webhooks/label-studio/{anything}")
    def ok(anything: str) -> dict[str, bool]:
        return {"ok": True}

    with pytest.raises(
        ReceiverError, match=r"did not answer as an rcea webhook receiver \(HTTP 200\)"
    ):
        check_receiver(WebhookTarget(BASE, "mine"), client=TestClient(other))
