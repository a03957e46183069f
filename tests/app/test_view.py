"""The view's reads on SQLite and PostgreSQL, and the running view (``rcea view`` on a free
port) in a real headless Debian chromium (Playwright), every page."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from annotation.payloads import ParsedAnnotation
from app.audit.labels import record_annotation, record_final_gate
from app.audit.sampling import audit_pairs, get_audit
from app.ingest import ingest_file
from app.settings import Settings
from app.store import open_store, session_scope
from app.view import data
from tests.app.test_view_pages import full_store
from tests.helpers import (
    audit_study,
    chromium_executable,
    draw_test_audit,
    fake_person,
    fake_tasks,
    free_port,
    make_record,
    wait_for_http,
    write_jsonl,
)

NAV = {"": "Overview", "entropy": "Entropy", "modes": "Modes", "covariance": "Covariance",
       "audit": "Audit"}  # fmt: skip
PAGES = {
    "": "RCEA Audit — overview",
    "entropy": "Entropy",
    "modes": "Modes",
    "covariance": "Covariance",
    "audit": "Audit",
}


def _seed_store(data_dir: Path) -> Settings:
    settings = Settings(data_dir=data_dir)
    recs = [make_record(i, step=0 if i < 6 else 10) for i in range(12)]
    ingest_file(
        open_store(settings),
        write_jsonl(data_dir.parent / "v.jsonl", recs),
        study="viewstudy",
        artifacts_dir=settings.artifacts_dir,
        data_dir=data_dir,
    )
    return settings


def test_view_data_frames(tmp_path: Path) -> None:
    settings = _seed_store(tmp_path / "data")
    studies = data.studies_frame(settings)
    assert studies["study"].tolist() == ["viewstudy"]
    cp = data.checkpoints_frame("viewstudy", settings)
    assert cp["step"].tolist() == [0, 10]
    assert cp["accuracy"].tolist() == [0.5, 0.5]


def test_audit_reads_on_both_backends(store_url: str, tmp_path: Path) -> None:
    """Status, gate values vs thresholds, progress, disagreements and the version stamp,
    on SQLite and PostgreSQL."""
    settings = Settings(data_dir=tmp_path / "data", database_url=store_url)
    engine = open_store(settings)
    audit_study(engine, tmp_path)
    audit_id = draw_test_audit(engine, tmp_path)
    frame = data.audits_frame("s", settings)
    assert frame["status"].tolist() == ["pending"] and frame["pairs"].tolist() == [18]
    assert frame["automatic_macro_f1"].isna().all()
    reqs = data.gate_requirements_frame("s", settings)
    assert len(reqs) == 6 and reqs["value"].isna().all() and reqs["passed"].isna().all()

    tasks = fake_tasks(engine, audit_id)
    stamp = data.version_stamp("s", settings)
    with session_scope(engine) as s:
        audit = get_audit(s, study="s")
        pairs = audit_pairs(s, audit_id=audit_id)
        n = 0
        for role, user in (("A", 11), ("B", 12)):
            for p in pairs[:10]:
                label = p.automatic or "same"
                if role == "B" and p.id == pairs[0].id:
                    label = "different" if label == "same" else "same"
                n += 1
                ann = ParsedAnnotation(n, tasks[role][p.id], None, user, label, None, False)
                record_annotation(s, audit, ann, source="test")
    assert data.version_stamp("s", settings) > stamp  # labels are events
    detail = data.audit_detail("s-audit-1", settings)
    progress = detail["progress"].set_index("role")
    assert progress.loc["A", "labelled"] == 10 and progress.loc["A", "of"] == 18
    assert progress.loc["adjudicator", "of"] == 1
    assert detail["gate"]["status"] == "pending"
    assert set(detail["confusions"]) == {"human_human", "automatic_vs_a", "automatic_vs_b"}
    hh = detail["confusions"]["human_human"]
    assert sum(v for row in hh.values() for v in row.values()) == 10
    assert sum(hh[r][c] for r in hh for c in hh[r] if r != c) == 1
    a_label = pairs[0].automatic or "same"  # confusion[reference = B][compared = A]
    assert hh["different" if a_label == "same" else "same"][a_label] == 1
    (row,) = detail["disagreements"].to_dict("records")
    assert row["pair_key"] == pairs[0].pair_key and row["adjudication_task"] is None
    # the link opens A's own server (each person labels on a server of their own)
    assert row["task_A"] == f"{fake_person('A').url}/projects/1/data?task={1000 + pairs[0].id}"

    with session_scope(engine) as s:
        fake = {
            "status": "passed",
            "report": {
                "automatic_macro_f1": 0.93,
                "requirements": [
                    {
                        "name": "automatic_macro_f1",
                        "value": 0.93,
                        "threshold": 0.85,
                        "comparator": ">=",
                        "passed": True,
                    }
                ],
            },
        }
        record_final_gate(s, get_audit(s, study="s"), fake, "tester")
    frame = data.audits_frame("s", settings)
    assert frame["status"].tolist() == ["passed"] and frame["stage"].tolist() == ["final"]
    assert frame["automatic_macro_f1"].tolist() == [0.93]
    reqs = data.gate_requirements_frame("s", settings)
    assert reqs[["requirement", "passed"]].values.tolist() == [["automatic_macro_f1", True]]


@pytest.mark.browser
def test_view_renders_in_chromium(tmp_path: Path) -> None:
    """`rcea view` on a free port in chromium: before logging in, every page shows the
    login form only (no data grid, no chart); a wrong password is refused; logged in
    (the account made with `rcea view add-researcher`), every page's title and its charts
    render, and no exception block appears. Screenshots under tmp."""
    chromium = chromium_executable()  # fails instead of skipping when CI requires it
    from playwright.sync_api import sync_playwright

    full_store(tmp_path)
    port = free_port()
    env = {**os.environ, "RCEA_DATA_DIR": str(tmp_path / "data")}
    exe = Path(sys.executable).parent / "rcea"
    made = subprocess.run(
        [str(exe), "view", "add-researcher", "erin", "--password-stdin"],
        input="s3cret-passphrase\n",
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "researcher 'erin' added" in made.stdout
    proc = subprocess.Popen(
        [str(exe), "view", "--port", str(port), "--n-boot", "200"],
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
                executable_path=chromium,
                args=[
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--no-first-run",
                ],
            )
            page = browser.new_page(viewport={"width": 1400, "height": 3000})
            for path in PAGES:
                page.goto(f"{url}/{path}")
                page.get_by_role("heading", name="RCEA Audit — log in").wait_for(timeout=60_000)
                page.wait_for_timeout(1500)
                assert page.locator("[data-testid='stDataFrame']").count() == 0, path
                assert page.locator("[data-testid='stVegaLiteChart']").count() == 0, path
                assert page.get_by_role("button", name="Approve (refreeze)").count() == 0
            page.screenshot(path=str(tmp_path / "view-login.png"))

            def log_in(password: str) -> None:
                page.get_by_role("textbox", name="Researcher").fill("erin")
                page.get_by_role("textbox", name="Password").fill(password)
                page.get_by_role("button", name="Log in").click()

            log_in("wrong-passphrase")
            page.get_by_text("Wrong researcher name or password.").wait_for(timeout=60_000)
            assert page.locator("[data-testid='stDataFrame']").count() == 0
            log_in("s3cret-passphrase")
            page.get_by_text("Logged in as").wait_for(timeout=60_000)
            # The login lives in this browser session: move through the sidebar's links
            # (a reload starts a new session and asks for the login again).
            nav = page.locator("[data-testid='stSidebarNav']")
            for path, title in PAGES.items():
                nav.get_by_role("link", name=NAV[path], exact=True).click()
                page.wait_for_url(f"{url}/{path}", timeout=60_000)
                page.get_by_role("heading", name=title).first.wait_for(timeout=60_000)
                # Wait until the data grids and the Altair charts have actually rendered.
                page.locator("[data-testid='stDataFrame'] canvas").first.wait_for(timeout=60_000)
                chart = "[data-testid='stVegaLiteChart'] :is(canvas, svg.marks)"
                page.locator(chart).first.wait_for(timeout=60_000)
                page.wait_for_timeout(1000)
                page.screenshot(
                    path=str(tmp_path / f"view-{path or 'overview'}.png"), full_page=True
                )
                # Streamlit renders a failing page as an exception block, not as a crash.
                assert page.locator("[data-testid='stException']").count() == 0, path
                assert "Traceback" not in page.content(), path
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
