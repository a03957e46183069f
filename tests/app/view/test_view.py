"""The view's reads on SQLite and PostgreSQL, and the running view (``rcea view`` on a free
port) in a real headless Debian chromium (Playwright), every page."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rcea.annotation.payloads import ParsedAnnotation
from rcea.app.view import data
from rcea.app.view.data import audit as audit_data
from rcea.app.view.data import modes as modes_data
from rcea.app.view.data import overview as overview_data
from rcea.app.view.data import report as report_data
from rcea.study.pair_audit.gate import record_final_gate
from rcea.study.pair_audit.labels import record_annotation
from rcea.study.pair_audit.sampling import audit_pairs, get_audit
from rcea.study.records.ingest import ingest_file
from rcea.study.settings import Settings
from rcea.study.store import open_store, session_scope
from tests.support.helpers import (
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
from tests.support.training_events import write_run
from tests.support.view_store import full_store

NAV = {"": "Overview", "entropy": "Entropy", "modes": "Modes", "covariance": "Covariance",
       "training": "Training", "audit": "Audit"}  # fmt: skip
PAGES = {
    "": "RCEA Audit — overview",
    "entropy": "Entropy",
    "modes": "Modes",
    "covariance": "Covariance",
    "training": "Training",
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
    studies = overview_data.studies_frame(settings)
    assert studies["study"].tolist() == ["viewstudy"]
    cp = overview_data.checkpoints_frame("viewstudy", settings)
    assert cp["step"].tolist() == [0, 10]
    assert cp["accuracy"].tolist() == [0.5, 0.5]


def test_audit_reads_on_both_backends(store_url: str, tmp_path: Path) -> None:
    """Status, gate values vs thresholds, progress, disagreements and the version stamp,
    on SQLite and PostgreSQL."""
    settings = Settings(data_dir=tmp_path / "data", database_url=store_url)
    engine = open_store(settings)
    audit_study(engine, tmp_path)
    audit_id = draw_test_audit(engine, tmp_path)
    frame = overview_data.audits_frame("s", settings)
    assert frame["status"].tolist() == ["pending"] and frame["pairs"].tolist() == [18]
    assert frame["automatic_macro_f1"].isna().all()
    reqs = overview_data.gate_requirements_frame("s", settings)
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
    detail = audit_data.audit_detail("s-audit-1", settings)
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
    frame = overview_data.audits_frame("s", settings)
    assert frame["status"].tolist() == ["passed"] and frame["stage"].tolist() == ["final"]
    assert frame["automatic_macro_f1"].tolist() == [0.93]
    reqs = overview_data.gate_requirements_frame("s", settings)
    assert reqs[["requirement", "passed"]].values.tolist() == [["automatic_macro_f1", True]]


@pytest.mark.browser
def test_view_renders_in_chromium(tmp_path: Path) -> None:
    """`rcea view` on a free port in chromium: before logging in, every page shows the
    login form only (no data grid, no chart); a wrong password is refused; logged in
    (the account made with `rcea view add-researcher`), every page's title and its charts
    render, and no exception block appears. Then what a reader sees, read
    from the rendered SVG charts and the grids' accessible tables: every checkpoint has its
    x label on the paired-ratio and retention charts; the mode bars name the codebook's
    modes; max|residual| is in scientific notation; the Covariance page has no bare JSON
    widget; the Audit page has validity-calibration progress, no "pairs labelled" chart
    before any label (an audit without labels) and an integer axis after, a pair-audit
    summary and a disagreement table that do not scroll sideways, and "need adjudication"
    drops to 0 once the adjudication is recorded. Screenshots under tmp."""
    chromium = chromium_executable()  # fails instead of skipping when CI requires it
    from playwright.sync_api import expect, sync_playwright

    settings = full_store(tmp_path)
    write_run(tmp_path / "data" / "runs" / "grpo", "grpo")  # the Training page's event files
    expected = _expected_view(settings)
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
            page.add_init_script(RECORD_CANVAS_TEXT)
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
                PAGE_CHECKS[path](page, expected)
            # "need adjudication" follows the store: the adjudication is recorded, the
            # page is opened again
            _adjudicate(settings)
            nav.get_by_role("link", name="Overview", exact=True).click()
            page.wait_for_url(f"{url}/", timeout=60_000)
            nav.get_by_role("link", name="Audit", exact=True).click()
            page.wait_for_url(f"{url}/audit", timeout=60_000)
            metric = page.locator("[data-testid='stMetric']").filter(has_text="need adjudication")
            expect(metric.locator("[data-testid='stMetricValue']")).to_have_text(
                "0", timeout=60_000
            )
            # a new audit without any label (shown first: newest first): no "pairs
            # labelled" chart, a caption instead
            _draw_unlabelled(settings)
            nav.get_by_role("link", name="Overview", exact=True).click()
            page.wait_for_url(f"{url}/", timeout=60_000)
            nav.get_by_role("link", name="Audit", exact=True).click()
            page.wait_for_url(f"{url}/audit", timeout=60_000)
            page.get_by_text("No pair is labelled yet.").wait_for(timeout=60_000)
            page.wait_for_timeout(1000)
            assert not [a for c in _charts(page) for a in c if "pairs labelled" in a["aria"]]
            page.screenshot(path=str(tmp_path / "view-audit-empty.png"), full_page=True)
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


# --------------------------------------------------------------------------- what a reader sees

#: the axes of every Vega chart on the page (Streamlit renders them as SVG): for each
#: axis its ARIA description and the text of its labels as drawn (a label cut to the
#: label limit ends in "…"; one hidden on overlap is not drawn)
CHART_AXES = """() => [...document.querySelectorAll("[data-testid='stVegaLiteChart']")].map(
    (chart) => [...chart.querySelectorAll("g.role-axis")].map((ax) => ({
        aria: ax.getAttribute("aria-label") || "",
        labels: [...ax.querySelectorAll("g.role-axis-label text")]
            .filter((t) => (t.getAttribute("opacity") ?? "1") !== "0")
            .map((t) => t.textContent),
    })))"""

#: records every string drawn on a canvas (the data grids draw their cells there), so a
#: test sees the formatted text a reader sees
RECORD_CANVAS_TEXT = """(() => {
    const drawn = new Set();
    window.__drawn = drawn;
    const fill = CanvasRenderingContext2D.prototype.fillText;
    CanvasRenderingContext2D.prototype.fillText = function (text, ...rest) {
        drawn.add(String(text));
        return fill.call(this, text, ...rest);
    };
})()"""

#: every data grid: its column headers and cell texts (the grid's accessible table) and
#: whether it scrolls sideways
GRIDS = """() => [...document.querySelectorAll("[data-testid='stDataFrame']")].map((g) => {
    const scroller = g.querySelector(".dvn-scroller");
    return {
        headers: [...g.querySelectorAll("table th")].map((t) => t.textContent),
        cells: [...g.querySelectorAll("table td")].map((t) => t.textContent),
        scroll: scroller ? scroller.scrollWidth - scroller.clientWidth : null,
    };
})"""


def _charts(page: Any) -> list[list[dict[str, Any]]]:
    return page.evaluate(CHART_AXES)


def _grids(page: Any) -> list[dict[str, Any]]:
    return page.evaluate(GRIDS)


def _x_labels(page: Any, title: str) -> list[str]:
    """The drawn labels of the x axis titled ``title`` of the one chart that has it
    (waiting up to 30 s for it to render)."""
    for _ in range(60):
        found = [
            ax["labels"]
            for chart in _charts(page)
            for ax in chart
            if ax["aria"].startswith("X-axis") and f"'{title}'" in ax["aria"]
        ]
        if found:
            assert len(found) == 1, (title, _charts(page))
            return found[0]
        page.wait_for_timeout(500)
    raise AssertionError((title, _charts(page)))


def _grid_with(page: Any, header: str) -> dict[str, Any]:
    """The first grid with a column ``header`` (waiting up to 30 s for it to render)."""
    for _ in range(60):
        grids = [g for g in _grids(page) if header in g["headers"]]
        if grids:
            return grids[0]
        page.wait_for_timeout(500)
    raise AssertionError((header, [g["headers"] for g in _grids(page)]))


def _expected_view(settings: Settings) -> dict[str, Any]:
    """What the pages must show, from the report model the view reads (checkpoints of the
    ratio and retention charts)."""
    from rcea.app.view import report_frames as rf

    rep = report_data.report("s", settings, n_boot=50)
    ratio = rf.ratio_frame(rep).dropna(subset=["paired_ratio"])
    retention = rf.retention_frame(rep).dropna(subset=["retention"])
    out = {
        "ratio_checkpoints": list(dict.fromkeys(ratio["checkpoint"])),
        "retention_checkpoints": list(dict.fromkeys(retention["checkpoint"])),
        # what a mode bar may be labelled: a codebook name ("name (m1)" when the partition
        # labels by id) or a mode-column value of the records — never a bare id
        "mode_labels": {
            lab
            for names in modes_data.mode_names("s", settings).values()
            for i, n in names.items()
            for lab in (n, f"{n} ({i})")
        }
        | set(modes_data.mode_distribution("s", rep.audits.pair.model_dump(), settings)["mode"]),
    }
    assert {"direct", "distribute"} <= out["mode_labels"]
    assert len(out["ratio_checkpoints"]) >= 3 and len(out["retention_checkpoints"]) >= 2
    return out


def _draw_unlabelled(settings: Settings) -> None:
    from rcea.study.pair_audit.sampling import draw_audit

    with session_scope(open_store(settings)) as s:
        draw_audit(s, study="s", rubric="view-rubric", name="unlabelled", actor="r")


def _adjudicate(settings: Settings) -> None:
    """The adjudicator decides the one pair that went to adjudication (as sync would
    record it)."""
    import sqlalchemy as sa

    from rcea.study.store.models import AuditTask

    with session_scope(open_store(settings)) as s:
        audit = get_audit(s, study="s", name="s-audit-1")
        task = s.exec(
            sa.select(AuditTask).where(
                AuditTask.audit_id == audit.id, AuditTask.role == "adjudicator"
            )
        ).scalar_one()
        ann = ParsedAnnotation(9001, task.task_id, task.project_id, 13, "same", None, False)
        record_annotation(s, audit, ann, source="test")


def _check_overview(page: Any, expected: dict[str, Any]) -> None:
    summary = _grid_with(page, "A–B F1")
    assert summary["scroll"] == 0, f"the pair-audit summary scrolls sideways: {summary}"


def _check_entropy(page: Any, expected: dict[str, Any]) -> None:
    labels = _x_labels(page, "checkpoint")
    assert labels == expected["ratio_checkpoints"], "paired-ratio chart x labels"
    # the decomposition table is wider than the page (the measure of sideways scrolling
    # sees it): scroll its grid to the right end to see the column
    assert _grid_with(page, "H(R|x)")["scroll"] > 0
    page.evaluate(
        """() => document.querySelectorAll("[data-testid='stDataFrame'] .dvn-scroller")
            .forEach((s) => { s.scrollLeft = s.scrollWidth; })"""
    )
    decomp = _grid_with(page, "max |residual|")
    col = decomp["headers"].index("max |residual|")
    width = len(decomp["headers"])
    values = [float(decomp["cells"][i]) for i in range(col, len(decomp["cells"]), width)]
    assert values and all(0 < v < 1e-9 for v in values), values  # tiny, not zero
    # what the grid draws: scientific notation, never a run of zeros
    page.wait_for_timeout(1000)
    drawn = page.evaluate("() => [...window.__drawn]")
    missing = [f"{v:.2e}" for v in values if f"{v:.2e}" not in drawn]
    assert not missing, (missing, [t for t in drawn if "e-" in t or t.startswith("0.0")])
    assert not [t for t in drawn if re.fullmatch(r"0\.0{6,}", t)]


def _check_modes(page: Any, expected: dict[str, Any]) -> None:
    assert _x_labels(page, "checkpoint") == expected["retention_checkpoints"]
    mode_labels = [
        lab
        for chart in _charts(page)
        for ax in chart
        if "'mode'" in ax["aria"]
        for lab in ax["labels"]
    ]
    assert mode_labels, _charts(page)
    assert not [m for m in mode_labels if re.fullmatch(r"m\d+", m)], mode_labels
    assert set(mode_labels) <= expected["mode_labels"], mode_labels


def _check_covariance(page: Any, expected: dict[str, Any]) -> None:
    assert page.locator("[data-testid='stJson']").count() == 0
    page.get_by_text("Direction counts").wait_for(timeout=10_000)
    assert _grid_with(page, "selection")["cells"]


def _check_training(page: Any, expected: dict[str, Any]) -> None:
    # the entropy split and the outcome entropy, and the last step's rcea/ numbers
    assert page.locator("[data-testid='stVegaLiteChart']").count() == 2
    latest = _grid_with(page, "rcea/outcome_entropy")
    assert latest["cells"] and latest["cells"][0] == "grpo", latest


def _check_audit(page: Any, expected: dict[str, Any]) -> None:
    labels = _x_labels(page, "pairs labelled")
    assert labels and all(re.fullmatch(r"\d+", v) for v in labels), labels
    assert labels[0] == "0" and int(labels[-1]) == 12, labels
    metric = page.locator("[data-testid='stMetric']").filter(has_text="need adjudication")
    assert metric.locator("[data-testid='stMetricValue']").inner_text() == "1"
    page.get_by_role("heading", name="Validity calibration").wait_for(timeout=10_000)
    page.get_by_text("No validity calibration yet").wait_for(timeout=10_000)
    dis = _grid_with(page, "pair_key")
    assert dis["scroll"] == 0, f"the disagreement table scrolls sideways: {dis}"


PAGE_CHECKS = {
    "": _check_overview,
    "entropy": _check_entropy,
    "modes": _check_modes,
    "covariance": _check_covariance,
    "training": _check_training,
    "audit": _check_audit,
}
