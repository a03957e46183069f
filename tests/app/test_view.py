"""The Streamlit view in a real headless Debian chromium (Playwright)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.ingest import ingest_file
from app.settings import Settings
from app.store import open_store
from app.view.data import checkpoints_frame, studies_frame
from tests.helpers import free_port, make_record, wait_for_http, write_jsonl

CHROMIUM = "/usr/bin/chromium"


def _seed_store(data: Path) -> Settings:
    settings = Settings(data_dir=data)
    recs = [make_record(i, step=0 if i < 6 else 10) for i in range(12)]
    ingest_file(
        open_store(settings),
        write_jsonl(data.parent / "v.jsonl", recs),
        study="viewstudy",
        artifacts_dir=settings.artifacts_dir,
        data_dir=data,
    )
    return settings


def test_view_data_frames(tmp_path: Path) -> None:
    settings = _seed_store(tmp_path / "data")
    studies = studies_frame(settings)
    assert studies["study"].tolist() == ["viewstudy"]
    cp = checkpoints_frame("viewstudy", settings)
    assert cp["step"].tolist() == [0, 10]
    assert cp["accuracy"].tolist() == [0.5, 0.5]


@pytest.mark.browser
def test_view_renders_in_chromium(tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} missing: `apt-get install chromium` (.ci/run does this)")
    from playwright.sync_api import sync_playwright

    data = tmp_path / "data"
    _seed_store(data)
    port = free_port()
    env = {**os.environ, "RCEA_DATA_DIR": str(data)}
    exe = Path(sys.executable).parent / "rcea"
    proc = subprocess.Popen(
        [str(exe), "view", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for_http(f"{url}/_stcore/health", timeout=90, proc=proc)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=CHROMIUM,
                args=[
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--no-first-run",
                ],
            )
            page = browser.new_page()
            page.goto(url)
            page.get_by_text("RCEA Audit — overview").wait_for(timeout=60_000)
            page.get_by_text("Checkpoints of viewstudy").wait_for(timeout=60_000)
            # Wait until the data grids and the chart have actually rendered.
            page.locator("[data-testid='stDataFrame'] canvas").first.wait_for(timeout=60_000)
            page.locator("[data-testid='stVegaLiteChart']").first.wait_for(timeout=60_000)
            page.wait_for_timeout(1500)
            page.screenshot(path=str(tmp_path / "overview.png"), full_page=True)
            # Streamlit renders a failing page as an exception block, not as a crash.
            assert page.locator("[data-testid='stException']").count() == 0
            assert "Traceback" not in page.content()
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_audits_frame_reports_status_and_gate(tmp_path: Path) -> None:
    from app.audit.labels import record_final_gate
    from app.audit.sampling import get_audit
    from app.store import session_scope
    from app.view.data import audits_frame
    from tests.helpers import audit_study, draw_test_audit

    settings = Settings(data_dir=tmp_path / "data")
    engine = open_store(settings)
    audit_study(engine, tmp_path)
    draw_test_audit(engine, tmp_path)
    frame = audits_frame("s", settings)
    assert frame["status"].tolist() == ["pending"] and frame["pairs"].tolist() == [18]
    assert frame["automatic_macro_f1"].isna().all()
    with session_scope(engine) as s:
        fake = {"status": "passed", "report": {"automatic_macro_f1": 0.93}}
        record_final_gate(s, get_audit(s, study="s"), fake, "tester")
    frame = audits_frame("s", settings)
    assert frame["status"].tolist() == ["passed"]
    assert frame["automatic_macro_f1"].tolist() == [0.93]
