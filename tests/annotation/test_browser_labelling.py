"""An annotator labels a pair in the real Label Studio web UI (headless Debian chromium,
Playwright) on their own server: log in through ``/user/login/``, see only their own
projects, open a task, click a same/different choice, Submit; the label then shows in
``rcea audit sync`` / ``gate``. The other annotator's project does not open."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from rcea.annotation.tasks import PAIR_CHOICE
from rcea.study.labelling.push import TITLE_SHOWN, round_title
from rcea.study.store import session_scope
from rcea.study.store.models import AuditLabel, AuditTask
from tests.support.helpers import chromium_executable
from tests.support.labelling_study import PASSWORD, Study

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
CLICKED = "different"  # the choice the annotator clicks in the UI
QUESTION = "Do these two solutions use the same strategy?"  # header of pair_label_config


def _json_out(runner: CliRunner, args: list[str]) -> dict:  # type: ignore[type-arg]
    from rcea.app.cli import app

    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


def test_annotator_labels_in_the_browser(
    study: Study, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A labels in the browser on A's own server; A's project list holds A's projects
    only; B's project and task URLs (B's server) do not open for A's browser."""
    chromium = chromium_executable()  # fails instead of skipping when CI requires it
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import expect, sync_playwright

    pushed = study.push()
    project_id = pushed["projects"]["A"]["project_id"]
    b_project = pushed["projects"]["B"]["project_id"]
    with session_scope(study.engine) as s:
        task = (
            s.exec(
                sa.select(AuditTask)
                .where(AuditTask.audit_id == study.audit_id, AuditTask.role == "A")
                .order_by(AuditTask.task_id)
            )
            .scalars()
            .first()
        )
        task_id, pair_id = task.task_id, task.pair_id
    b_task = next(iter(study.tasks("B").values()))
    a_url, b_url = study.pool["A"].url, study.pool["B"].url
    a_email = study.emails["A"]
    a_id = study.people.client(study.person("A")).users.list()
    a_id = next(u.id for u in a_id if u.email == a_email)

    # --- annotator A in a real browser
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(60_000)
            try:
                # The Django login form (its labels have no ``for``: fields go by name).
                page.goto(f"{a_url}/user/login/")
                page.locator("input[name='email']").fill(a_email)
                page.locator("input[name='password']").fill(PASSWORD)
                page.get_by_role("button", name="Log in").click()
                page.wait_for_url(lambda u: "/user/login" not in u)
                who = page.request.get(f"{a_url}/api/current-user/whoami")
                assert who.ok and who.json()["id"] == a_id, who.text()

                # A's project list: A's projects only (B's live on B's server)
                page.goto(f"{a_url}/projects/")
                mine = f"Pairs {study.audit_id} · annotator A"
                expect(page.get_by_text(mine).first).to_be_visible()
                expect(page.get_by_text(f"Pairs {study.audit_id} · annotator B")).to_have_count(0)
                # the card shows the whole title (not cut with an ellipsis): the title
                # element and its two parents are not narrower than their text; and so
                # does the longest title rcea makes for ids below 1000 (TITLE_SHOWN chars)
                clipped = """(el) => {
                    const out = [];
                    for (let e = el, i = 0; e && i < 3; e = e.parentElement, i++)
                        if (e.scrollWidth > e.clientWidth + 1)
                            out.push([e.className, e.scrollWidth, e.clientWidth]);
                    return out;
                }"""
                card = page.get_by_text(mine).first.element_handle()
                assert card.evaluate(clipped) == []
                longest = round_title("validity", 999, "annotator-2")
                assert len(longest) == TITLE_SHOWN
                card.evaluate("(el, t) => { el.textContent = t; }", longest)
                assert card.evaluate(clipped) == [], f"{longest!r} is cut on the card"
                page.screenshot(path=str(tmp_path / "a-projects-longest.png"))
                page.reload()
                page.screenshot(path=str(tmp_path / "a-projects.png"))
                titles = page.request.get(f"{a_url}/api/projects/?page_size=1000").json()
                titles = [p["title"] for p in titles.get("results", titles)]
                assert not any("annotator B" in t or "adjudication" in t for t in titles)

                # The data manager opens the labelling interface on ?task=<id>.
                page.goto(f"{a_url}/projects/{project_id}/data?task={task_id}")
                expect(page.get_by_text(QUESTION)).to_be_visible()
                choice = page.get_by_role("checkbox", name=CLICKED, exact=False)
                expect(choice).to_have_count(1)
                expect(page.get_by_role("checkbox", name="same")).not_to_be_checked()
                choice.check()
                expect(choice).to_be_checked()
                page.screenshot(path=str(tmp_path / "before-submit.png"))
                submit = page.get_by_role("button", name=re.compile(r"^submit", re.I))
                with page.expect_response(
                    lambda r: (
                        r.request.method == "POST" and f"/api/tasks/{task_id}/annotations" in r.url
                    )
                ) as posted:
                    submit.click()
                resp = posted.value
                assert resp.status == 201, resp.text()
                made = resp.json()

                # B's project and task, on B's server, in A's browser: the login page
                for url in (
                    f"{b_url}/projects/{b_project}/data?task={b_task}",
                    f"{b_url}/projects/{b_project}/",
                ):
                    page.goto(url)
                    page.wait_for_url(lambda u: "/user/login" in u)
                    expect(page.locator("input[name='password']")).to_be_visible()
                assert page.request.get(f"{b_url}/api/tasks/{b_task}/").status in (401, 403)
                page.screenshot(path=str(tmp_path / "b-project-refused.png"))
            except (PlaywrightError, AssertionError):
                page.screenshot(path=str(tmp_path / "failure.png"))  # for debugging
                raise
        finally:
            browser.close()
    assert made["completed_by"] == a_id
    assert [r["value"]["choices"] for r in made["result"] if r["from_name"] == PAIR_CHOICE] == [
        [CLICKED]
    ]

    # --- the operator's side: `rcea audit sync`, then `rcea audit gate`, in-process
    monkeypatch.setenv("RCEA_DATABASE_URL", str(study.engine.url))
    from rcea.study.settings import get_settings

    get_settings.cache_clear()
    runner = CliRunner()
    synced = _json_out(runner, ["audit", "sync", "--json"])
    assert synced["annotations_seen"] == 1 and synced["changed"] == 1
    gate = _json_out(runner, ["audit", "gate", "--json"])
    assert gate["progress"]["A"] == 1 and gate["progress"]["B"] == 0
    assert gate["labels"] == {"counted": 1}
    assert gate["status"] == "pending"
    with session_scope(study.engine) as s:
        row = (
            s.exec(sa.select(AuditLabel).where(AuditLabel.annotation_id == made["id"]))
            .scalars()
            .one()
        )
        assert (row.label, row.status, row.role) == (CLICKED, "counted", "A")
        assert (row.task_id, row.pair_id, row.user_id) == (task_id, pair_id, a_id)
