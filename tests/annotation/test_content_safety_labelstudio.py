"""Content safety against the real Label Studio (session fixture ``labelstudio``): a rubric
definition with ``" & < > '`` survives the label config round trip and renders as text;
task texts arrive sanitised (bidi shown, a 1 MB line cut so Solution 2 stays on screen);
a note with NUL comes back from the export and parses into a storable note."""

from __future__ import annotations

import random
import uuid
from pathlib import Path
from xml.etree import ElementTree

import pytest

from rcea.annotation.client import http_client, make_client
from rcea.annotation.display import storable, visible
from rcea.annotation.payloads import parse_annotation
from rcea.annotation.projects import create_project, export_tasks, import_tasks
from rcea.annotation.tasks import NOTE_FIELD, PAIR_CHOICE, build_pair_task, pair_label_config
from rcea.annotation.validity_tasks import validity_label_config
from tests.support.labelstudio_fixture import LabelStudioHandle

pytestmark = pytest.mark.slow

DEFINITION = 'Same "key step" & <decisive> idea > notation; it\'s the method'
BIDI = "the answer is \u202eevil\u202c here"
LONG = "7" * 1_000_000
NOTE = "line 1\x00 NUL\nline 2"
CHROMIUM = "/usr/bin/chromium"


def _definition(config: str) -> str | None:
    root = ElementTree.fromstring(config)
    return next(t.get("value") for t in root.iter("Text") if t.get("name") == "definition")


@pytest.fixture(scope="module")
def project(labelstudio: LabelStudioHandle) -> tuple[int, int]:
    """A project with the hostile definition and one task with hostile texts."""
    sdk = make_client(labelstudio.url, labelstudio.token)
    project_id = create_project(
        sdk,
        title=f"content safety {uuid.uuid4().hex[:6]}",
        label_config=pair_label_config(DEFINITION),
        description=DEFINITION,
    )
    task = build_pair_task("p-safety", BIDI, LONG, rng=random.Random(0))
    mapping = import_tasks(sdk, project_id, [task.data])
    return project_id, mapping["p-safety"]


def test_label_config_with_quotes_round_trips_through_label_studio(
    labelstudio: LabelStudioHandle, project: tuple[int, int]
) -> None:
    sdk = make_client(labelstudio.url, labelstudio.token)
    stored = sdk.projects.get(id=project[0]).label_config
    assert stored is not None
    assert _definition(stored) == DEFINITION


def test_both_label_configs_are_accepted_as_sent(labelstudio: LabelStudioHandle) -> None:
    sdk = make_client(labelstudio.url, labelstudio.token)
    for config in (pair_label_config(DEFINITION, adjudication=True), validity_label_config()):
        project_id = create_project(
            sdk, title=f"config {uuid.uuid4().hex[:6]}", label_config=config
        )
        assert sdk.projects.get(id=project_id).label_config == config


def test_tasks_arrive_sanitised_and_a_nul_note_parses_storably(
    labelstudio: LabelStudioHandle, project: tuple[int, int]
) -> None:
    project_id, task_id = project
    sdk = make_client(labelstudio.url, labelstudio.token)
    with http_client(labelstudio.url) as http:
        r = http.post(
            f"/api/tasks/{task_id}/annotations/",
            headers={"Authorization": f"Token {labelstudio.token}"},
            json={
                "result": [
                    {
                        "from_name": PAIR_CHOICE,
                        "to_name": "left",
                        "type": "choices",
                        "value": {"choices": ["different"]},
                    },
                    {
                        "from_name": NOTE_FIELD,
                        "to_name": "left",
                        "type": "textarea",
                        "value": {"text": [NOTE]},
                    },
                ]
            },
        )
        assert r.status_code == 201, r.text
    [task] = export_tasks(sdk, project_id)
    assert {task["data"]["left"], task["data"]["right"]} == {visible(BIDI), visible(LONG)}
    assert "⟨U+202E⟩evil⟨U+202C⟩" in visible(BIDI)
    [ann] = task["annotations"]
    parsed = parse_annotation(ann, task_id=task_id, project_id=project_id)
    assert (parsed.label, parsed.note) == ("different", storable(NOTE))
    assert parsed.note == "line 1⟨U+0000⟩ NUL\nline 2"


@pytest.mark.browser
def test_definition_and_marks_render_as_text_and_solution_2_stays_on_screen(
    labelstudio: LabelStudioHandle, project: tuple[int, int], tmp_path: Path
) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} missing")
    from playwright.sync_api import expect, sync_playwright

    project_id, task_id = project
    admin = labelstudio.server.credentials()
    width = 1400
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": width, "height": 1000})
            page.set_default_timeout(90_000)
            page.goto(f"{labelstudio.url}/user/login/")
            page.locator("input[name='email']").fill(admin.username)
            page.locator("input[name='password']").fill(admin.password)
            page.get_by_role("button", name="Log in").click()
            page.wait_for_url(lambda u: "/user/login" not in u)
            page.goto(f"{labelstudio.url}/projects/{project_id}/data?task={task_id}")
            try:
                # The data manager loads the 1 MB task before it opens the editor.
                expect(page.get_by_text(DEFINITION, exact=True)).to_be_visible(timeout=90_000)
                # In the labelling interface's rendered text (the data manager's table may
                # show the HTML source too).
                marks = page.locator("div.rendered", has_text="⟨U+202E⟩evil⟨U+202C⟩")
                expect(marks).to_be_visible(timeout=30_000)
                # Wholly inside the 1400 px viewport (it sat at x = 1500 before the
                # columns got min-width: 0).
                header = page.get_by_text("Solution 2", exact=True)
                expect(header).to_be_in_viewport(ratio=1, timeout=30_000)
                box = header.bounding_box()
                assert box is not None and box["x"] + box["width"] <= width, box
            finally:
                page.screenshot(path=str(tmp_path / "content-safety.png"))
        finally:
            browser.close()
