"""A multi-turn transcript in a real Label Studio validity task (headless Debian
chromium, Playwright): one block per turn, stacked in order, each under its role and set
apart by the stylesheet's rule; Markdown and TeX rendered inside a turn; the source one
click away lists each turn under its role."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from rcea.annotation.client import make_client
from rcea.annotation.projects import create_project, import_tasks
from rcea.annotation.validity_tasks import build_validity_task, validity_label_config
from tests.support.helpers import chromium_executable
from tests.support.labelstudio_fixture import LabelStudioHandle

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TURNS = [
    ("assistant", "I will ask the calculator.\n<tool_call>48/2</tool_call>"),
    ("tool", "<tool_response>\n24\n</tool_response>"),
    ("assistant", r"So $48 + \frac{48}{2} = 72$ and the answer is $\boxed{72}$."),
]


def test_transcript_turns_are_separate_blocks_in_the_browser(
    labelstudio: LabelStudioHandle, tmp_path: Path
) -> None:
    chromium = chromium_executable()
    from playwright.sync_api import expect, sync_playwright

    sdk = make_client(labelstudio.url, labelstudio.token)
    project_id = create_project(
        sdk, title=f"transcript {uuid.uuid4().hex[:6]}", label_config=validity_label_config()
    )
    data = build_validity_task("v-turns", "Natalia sold 48 clips ... How many?", TURNS)
    task_id = import_tasks(sdk, project_id, [data], key="item")["v-turns"]
    admin = labelstudio.server.credentials()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(90_000)
            page.goto(f"{labelstudio.url}/user/login/")
            page.locator("input[name='email']").fill(admin.username)
            page.locator("input[name='password']").fill(admin.password)
            page.get_by_role("button", name="Log in").click()
            page.wait_for_url(lambda u: "/user/login" not in u)
            page.goto(f"{labelstudio.url}/projects/{project_id}/data?task={task_id}")
            try:
                turns = page.locator("div.rendered.transcript div.turn")
                expect(turns).to_have_count(3, timeout=90_000)
                roles = [turns.nth(i).locator("p.turn-role").inner_text() for i in range(3)]
                assert [r.strip().lower() for r in roles] == [r for r, _ in TURNS]
                boxes = [turns.nth(i).bounding_box() for i in range(3)]
                assert all(b is not None for b in boxes)
                for a, b in zip(boxes, boxes[1:], strict=False):
                    assert a["y"] + a["height"] <= b["y"] + 1  # type: ignore[index]  # stacked
                for i in range(3):
                    style = "e => getComputedStyle(e).borderLeftStyle"
                    assert turns.nth(i).evaluate(style) == "solid"
                assert "calculator" in turns.nth(0).inner_text()
                assert "calculator" not in turns.nth(2).inner_text()
                expect(turns.nth(2).locator("math mfrac")).to_have_count(1)
                expect(turns.nth(2).locator('menclose[notation="box"]')).to_have_count(1)
                page.get_by_text("Source of the solution", exact=True).click()
                expect(page.get_by_text("[tool]", exact=False).first).to_be_visible()
            finally:
                page.screenshot(path=str(tmp_path / "transcript.png"))
        finally:
            browser.close()
