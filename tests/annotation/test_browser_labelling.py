"""An annotator labels a pair in the real Label Studio web UI (headless Debian chromium,
Playwright): log in through ``/user/login/``, open a task of their own project, click a
same/different choice, Submit; the label then shows in ``rcea audit sync`` / ``gate``."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from annotation.accounts import create_annotator
from annotation.client import make_client
from annotation.tasks import PAIR_CHOICE
from app.audit.push import assign_role, push_audit
from app.store import make_engine, session_scope, upgrade
from app.store.models import Audit, AuditLabel, AuditTask
from tests.helpers import audit_study, chromium_executable, draw_test_audit
from tests.labelstudio_fixture import LabelStudioHandle

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PASSWORD = "annot-pass-123"
CLICKED = "different"  # the choice the annotator clicks in the UI
QUESTION = "Do these two solutions use the same strategy?"  # header of pair_label_config


def _json_out(runner: CliRunner, args: list[str]) -> dict:  # type: ignore[type-arg]
    from app.cli import app

    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


def test_annotator_labels_in_the_browser(
    labelstudio: LabelStudioHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chromium = chromium_executable()  # fails instead of skipping when CI requires it
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import expect, sync_playwright

    # --- the store and the audit, pushed to Label Studio (as in test_pair_audit.py)
    db_url = f"sqlite:///{tmp_path / 'audit.db'}"
    engine = make_engine(db_url)
    upgrade(engine)
    audit_study(engine, tmp_path)
    audit_id = draw_test_audit(engine, tmp_path)
    people = {}
    for role in ("A", "B"):
        email = f"browser-{role.lower()}-{uuid.uuid4().hex[:8]}@rcea.test"
        people[role] = (
            create_annotator(labelstudio.url, labelstudio.token, email, PASSWORD).id,
            email,
        )
    client = make_client(labelstudio.url, labelstudio.token)
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        for role, (user_id, email) in people.items():
            assign_role(audit, role, user_id=user_id, email=email)
        pushed = push_audit(s, audit, client, webhook_url=None, webhook_secret=None, actor="test")
    project_id = pushed["projects"]["A"]["project_id"]
    with session_scope(engine) as s:
        task = (
            s.exec(
                sa.select(AuditTask)
                .where(AuditTask.audit_id == audit_id, AuditTask.role == "A")
                .order_by(AuditTask.task_id)
            )
            .scalars()
            .first()
        )
        task_id, pair_id = task.task_id, task.pair_id
    a_id, a_email = people["A"]

    # --- annotator A in a real browser
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(60_000)
            try:
                # The Django login form (its labels have no ``for``: fields go by name).
                page.goto(f"{labelstudio.url}/user/login/")
                page.locator("input[name='email']").fill(a_email)
                page.locator("input[name='password']").fill(PASSWORD)
                page.get_by_role("button", name="Log in").click()
                page.wait_for_url(lambda u: "/user/login" not in u)
                who = page.request.get(f"{labelstudio.url}/api/current-user/whoami")
                assert who.ok and who.json()["id"] == a_id, who.text()

                # The data manager opens the labelling interface on ?task=<id>.
                page.goto(f"{labelstudio.url}/projects/{project_id}/data?task={task_id}")
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
    monkeypatch.setenv("RCEA_DATABASE_URL", db_url)
    monkeypatch.setenv("RCEA_LABELSTUDIO_URL", labelstudio.url)
    monkeypatch.setenv("RCEA_LABELSTUDIO_TOKEN", labelstudio.token)
    from app.settings import get_settings

    get_settings.cache_clear()
    runner = CliRunner()
    synced = _json_out(runner, ["audit", "sync", "--json"])
    assert synced["annotations_seen"] == 1 and synced["changed"] == 1
    gate = _json_out(runner, ["audit", "gate", "--json"])
    assert gate["progress"]["A"] == 1 and gate["progress"]["B"] == 0
    assert gate["labels"] == {"counted": 1}
    assert gate["status"] == "pending"
    with session_scope(engine) as s:
        row = (
            s.exec(sa.select(AuditLabel).where(AuditLabel.annotation_id == made["id"]))
            .scalars()
            .one()
        )
        assert (row.label, row.status, row.role) == (CLICKED, "counted", "A")
        assert (row.task_id, row.pair_id, row.user_id) == (task_id, pair_id, a_id)
    engine.dispose()
