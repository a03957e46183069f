"""Rendered Markdown and TeX in a real Label Studio task page (headless Debian chromium,
Playwright): a fraction, a root, a display block, an aligned block, a code block and
``\\boxed{}`` are MathML/HTML elements in the DOM; hostile inputs stay inert; both
solutions stand side by side on a 1280-px screen, each scrolling on its own; the source
is one click away; the choice is unchanged."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest

from rcea.annotation.client import make_client
from rcea.annotation.projects import create_project, import_tasks
from rcea.annotation.tasks import build_pair_task, pair_label_config
from tests.support.helpers import chromium_executable
from tests.support.labelstudio_fixture import LabelStudioHandle

pytestmark = [pytest.mark.browser, pytest.mark.slow]

MATH = (
    r"""The sum is $\frac{n}{2}(a + l)$ and $\sqrt{2} < 2$.

\[
S = \frac{100}{2}(1 + 100)
\]

$$\begin{aligned} x &= 1 \\ y &= 2 \end{aligned}$$

```output
print(sum(range(101)))
```

The answer is $\boxed{5050}$.
"""
    + "\n\nfiller line\n" * 200  # taller than the column: it scrolls
)
HOSTILE = (
    "<script>window.__pwned = 1</script>\n\n"
    '<img src="x" onerror="window.__pwned = 2">\n\n'
    '[click](javascript:window.__pwned=3) <a href="javascript:window.__pwned=4">a</a>\n\n'
    r"$\href{javascript:window.__pwned=5}{y}$ $\text{<img src=x onerror=window.__pwned=6>}$"
    "\n\n"
    '<div style="position:fixed;inset:0;background:red;z-index:9999">overlay</div>\n\n'
    '<math><maction actiontype="statusline"><mi href="javascript:1">m</mi></maction></math>'
)
HUGE_FORMULA = "$" + "x" * 1_000_000 + "$"
WIDTH = 1280


@pytest.fixture(scope="module")
def task(labelstudio: LabelStudioHandle) -> tuple[int, int, bool]:
    sdk = make_client(labelstudio.url, labelstudio.token)
    project_id = create_project(
        sdk,
        title=f"rendered {uuid.uuid4().hex[:6]}",
        label_config=pair_label_config("same idea", question=True),
    )
    built = build_pair_task("p-render", MATH, HOSTILE, rng=random.Random(0), question=HUGE_FORMULA)
    mapping = import_tasks(sdk, project_id, [built.data])
    return project_id, mapping["p-render"], built.left_is_a


def test_rendered_pair_task_in_the_browser(
    labelstudio: LabelStudioHandle, task: tuple[int, int, bool], tmp_path: Path
) -> None:
    chromium = chromium_executable()
    from playwright.sync_api import expect, sync_playwright

    project_id, task_id, left_is_a = task
    math_side, hostile_side = (0, 1) if left_is_a else (1, 0)
    admin = labelstudio.server.credentials()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 900})
            page.set_default_timeout(90_000)
            dialogs: list[str] = []
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(f"{labelstudio.url}/user/login/")
            page.locator("input[name='email']").fill(admin.username)
            page.locator("input[name='password']").fill(admin.password)
            page.get_by_role("button", name="Log in").click()
            page.wait_for_url(lambda u: "/user/login" not in u)
            page.goto(f"{labelstudio.url}/projects/{project_id}/data?task={task_id}")
            try:
                rendered = page.locator("div.rendered")
                expect(rendered).to_have_count(3, timeout=90_000)  # problem, 2 solutions
                solution = rendered.filter(has=page.locator("mfrac"))
                expect(solution).to_have_count(1)
                for sel in (
                    "math mfrac",
                    "math msqrt",
                    'div.math.block math[display="block"]',
                    "math mtable mtr",
                    "pre code",
                    'menclose[notation="box"]',
                ):
                    expect(solution.locator(sel).first).to_be_attached()
                assert solution.locator("mtable mtr").count() == 2  # aligned: two rows
                # the code block is monospaced and wraps; the box is drawn
                code = solution.locator("pre").first
                assert "mono" in code.evaluate("e => getComputedStyle(e).fontFamily")
                assert code.evaluate("e => getComputedStyle(e).whiteSpace") == "pre-wrap"
                boxed = solution.locator('menclose[notation="box"]').first
                assert boxed.evaluate("e => getComputedStyle(e).borderTopStyle") == "solid"
                # a radical is drawn: the msqrt is wider than its content
                sqrt = solution.locator("msqrt").first
                inner = sqrt.locator("mrow").first
                assert sqrt.bounding_box()["width"] > inner.bounding_box()["width"]  # type: ignore[index]

                # the 1 MB formula: shown as source, not converted
                expect(page.locator("pre.source-only")).to_have_count(1)

                # hostile inputs are inert
                page.wait_for_timeout(1_000)
                assert page.evaluate("() => window.__pwned") is None
                assert dialogs == []
                for sel in (
                    "div.rendered script",
                    "div.rendered img",
                    "div.rendered a",
                    "div.rendered iframe",
                    "div.rendered [style]",
                    "div.rendered [onerror]",
                    "div.rendered [href]",
                    "div.rendered maction",
                ):
                    assert page.locator(sel).count() == 0, sel
                overlay = page.get_by_text("overlay", exact=False).first
                assert overlay.evaluate("e => getComputedStyle(e).position") != "fixed"

                # side by side on 1280 px, each scrolling on its own
                columns = page.locator("div.rendered").filter(
                    has_not=page.locator("pre.source-only")
                )
                boxes = [columns.nth(i).bounding_box() for i in range(2)]
                assert all(b is not None for b in boxes)
                assert boxes[0]["x"] + boxes[0]["width"] <= boxes[1]["x"]  # type: ignore[index]
                assert boxes[1]["x"] + boxes[1]["width"] <= WIDTH  # type: ignore[index]
                scroller = """e => { let c = e;
                    while (c && getComputedStyle(c).overflowY !== 'auto') c = c.parentElement;
                    return c; }"""
                col = [columns.nth(i).evaluate_handle(scroller) for i in range(2)]
                math_col = col[math_side]
                assert math_col.evaluate("c => c.scrollHeight > c.clientHeight")
                math_col.evaluate("c => { c.scrollTop = 400; }")
                assert math_col.evaluate("c => c.scrollTop") > 0
                assert col[hostile_side].evaluate("c => c.scrollTop") == 0

                # the choice is unchanged; the source is one click away
                expect(page.get_by_role("checkbox", name="same")).to_have_count(1)
                expect(page.get_by_role("checkbox", name="different")).to_have_count(1)
                page.get_by_text("Source of solution 1", exact=True).click()
                expect(page.get_by_text(r"\frac{n}{2}(a + l)", exact=False).first).to_be_visible()
            finally:
                page.screenshot(path=str(tmp_path / "rendered-pair.png"))
                (tmp_path / "dom.html").write_text(page.content()[:3_000_000])
        finally:
            browser.close()
