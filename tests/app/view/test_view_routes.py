"""`rcea view` as served: Streamlit's `/_stcore/metrics` (process statistics, answered
without a login by a stock Streamlit) is closed; the page and the health check answer."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support.helpers import free_port


def test_metrics_endpoint_is_closed(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "RCEA_DATA_DIR": str(tmp_path / "data")}
    exe = Path(sys.executable).parent / "rcea"
    proc = subprocess.Popen(
        [str(exe), "view", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/_stcore/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        assert httpx.get(f"{url}/_stcore/health", timeout=5).status_code == 200
        assert httpx.get(url, timeout=5).status_code == 200
        for path in ("/_stcore/metrics", "/_stcore/metrics/"):
            r = httpx.get(f"{url}{path}", timeout=5)
            assert r.status_code == 404, (path, r.text[:200])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
