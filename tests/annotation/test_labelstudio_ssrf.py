"""Annotator A cannot make A's own Label Studio server fetch URLs for A: URL
import, a webhook or an ML backend aimed at loopback are refused by Label Studio's SSRF
protection, which rcea launches on; the one exception, rcea's webhook receiver, still
gets its notifications live."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx
import pytest

from tests.support.helpers import serve_http
from tests.support.labelling_study import Study, wait_for

pytestmark = pytest.mark.slow

SECRET_DOC = b'[{"data": {"text": "loopback-only-secret"}}]'


class _Loopback(BaseHTTPRequestHandler):
    """A loopback service only this machine should reach; counts every request."""

    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).hits.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(SECRET_DOC)))
        self.end_headers()
        self.wfile.write(SECRET_DOC)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def loopback_service() -> Iterator[str]:
    _Loopback.hits = []
    with serve_http(_Loopback) as url:
        yield url


def test_annotator_cannot_make_the_server_fetch_loopback_urls(
    study: Study, api: str, loopback_service: str
) -> None:
    pushed = study.push()  # creates the webhook to the loopback receiver: allowed
    a_project = pushed["projects"]["A"]["project_id"]
    api_root = api.split("/webhooks/")[0]
    health = httpx.get(f"{api_root}/health").text
    assert '"status":"ok"' in health
    targets = [
        f"{loopback_service}/tasks.json",
        f"{api_root}/health",
        f"{api_root}/openapi.json",
        f"{study.pool['B'].url}/api/projects/",  # another person's server, on loopback
        f"{study.pool['A'].url}/api/current-user/whoami",
    ]
    with closing(study.session_of("A")) as web:
        for url in targets:
            r = web.post(f"/api/projects/{a_project}/import", data={"url": url})
            assert r.status_code >= 400, (url, r.status_code, r.text[:300])
            assert '"status":"ok"' not in r.text and "openapi" not in r.text, r.text[:300]
            assert "loopback-only-secret" not in r.text
    assert _Loopback.hits == []  # never even asked
    with closing(study.session_of("A")) as web:
        # a webhook of A's own aimed at loopback (other than rcea's receiver path)
        r = web.post(
            "/api/webhooks/",
            json={"project": a_project, "url": f"{api_root}/health", "send_payload": True},
        )
        assert r.status_code in (400, 403), r.text
        r = web.post("/api/ml/", json={"project": a_project, "url": f"{api_root}/health"})
        assert r.status_code in (400, 403), r.text
    # rcea's own receiver still gets A's labels live (no sync)
    task = next(iter(study.tasks("A").values()))
    [ann] = study.label_all("A", {task: "same"})
    assert wait_for(lambda: ("A", ann, "counted", "same") in study.labels())
