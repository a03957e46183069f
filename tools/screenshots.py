"""Screenshots of the real pages for the README and the tutorial (``make screenshots``).

On a scratch data dir it runs the quick SIMULATED embedded study (``rcea demo --quick
--simulate-annotators --no-serve``), starts the people's own Label Studio servers again
(``rcea labelstudio start``) and the view (``rcea view``), and photographs, in headless
Debian chromium (Playwright):

* the view's Overview, Modes and Audit pages, logged in as a researcher
  (``docs/img/view-overview.png``, ``view-modes.png``, ``view-audit.png``);
* one blinded pair task as annotator A sees it on A's own Label Studio, logged in through
  the login form (``docs/img/labelstudio-pair-task.png``);
* a rendered pair task with the TeX of real RLVR solutions — a fraction, a root, a display
  block, an aligned block, a code block and ``\\boxed{}`` — in a second project on A's
  server (``Rendering example · annotator A``, built by the push's own
  ``rcea.annotation.tasks.build_pair_task`` under the demo audit's label config), as A sees
  it (``docs/img/labelstudio-rendered-task.png``): the toy domain's solutions hold no
  formulas.

Every image is 1280 × 800 and is re-encoded with a 256-colour palette when it would be
larger than 300 KB. Everything it started is stopped at the end. ``--data-dir DIR`` keeps
the study (a re-run skips the finished demo steps); the default is a temporary directory.

Run: ``make screenshots`` or ``python -m tools.screenshots [--data-dir DIR]``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
from PIL import Image

from rcea.annotation.people import People
from rcea.annotation.projects import create_project, import_tasks
from rcea.annotation.tasks import build_pair_task, pair_label_config
from rcea.study.pair_audit.labels import audit_rubric
from rcea.study.pair_audit.sampling import get_audit
from rcea.study.settings import Settings
from rcea.study.store import open_store, session_scope
from rcea.study.store.models import AuditTask

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "img"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
VIEWPORT = {"width": 1280, "height": 800}
MAX_BYTES = 300_000
STUDY = "toy-quick-sim"  # the study `rcea demo --quick --simulate-annotators` makes
RESEARCHER = "docs"
#: view page path → (sidebar link, heading, file)
VIEW_PAGES = {
    "": ("Overview", "RCEA Audit — overview", "view-overview.png"),
    "modes": ("Modes", "Modes", "view-modes.png"),
    "audit": ("Audit", "Audit", "view-audit.png"),
}
PAIR_QUESTION = "Do these two solutions use the same strategy?"
#: The rendered example: a problem and two solutions by different strategies, written as
#: Qwen2.5-Math-style models write them (docs/content-safety.md lists what renders how).
EXAMPLE_TITLE = "Rendering example · annotator A"
EXAMPLE_KEY = "example-7f3a9c"
EXAMPLE_QUESTION = r"Find $S = 1 + 3 + 5 + \cdots + 99$ and $\sqrt{S}$."
EXAMPLE_LEFT = r"""The terms form an arithmetic sequence with first term $a = 1$, last term
$l = 99$ and common difference $2$, so there are $n = \frac{99 - 1}{2} + 1 = 50$ terms.

The sum of an arithmetic series is

\[ S = \frac{n}{2}(a + l) = \frac{50}{2}(1 + 99) = 2500. \]

Hence $\sqrt{S} = \sqrt{2500} = 50$, and the answer is $\boxed{2500}$."""
EXAMPLE_RIGHT = r"""Pair the first term with the last, the second with the second to last,
and so on:

\[
\begin{aligned}
S &= (1 + 99) + (3 + 97) + \cdots + (49 + 51) \\
  &= 25 \cdot 100 = 2500.
\end{aligned}
\]

A quick check:

```python
print(sum(range(1, 100, 2)), 2500 ** 0.5)
```
```output
2500 50.0
```

So $\sqrt{S} = \sqrt{2500} = 50$ and $S = \boxed{2500}$."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _say(msg: str) -> None:
    print(f"[screenshots] {msg}", flush=True)


def _wait_http(url: str, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{proc.args} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise SystemExit(f"{url} did not answer within {timeout:.0f} s")


class Rcea:
    """``rcea`` subprocesses on one data dir."""

    def __init__(self, data: Path) -> None:
        self.data = data
        settings_file = data / "screenshots.json"  # the Label Studio URL of this data dir
        if settings_file.exists():
            url = json.loads(settings_file.read_text())["labelstudio_url"]
        else:
            url = f"http://127.0.0.1:{_free_port()}"
            data.mkdir(parents=True, exist_ok=True)
            settings_file.write_text(json.dumps({"labelstudio_url": url}) + "\n")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RCEA_")}
        self.env |= {"RCEA_DATA_DIR": str(data), "RCEA_LABELSTUDIO_URL": url}
        self.exe = str(Path(sys.executable).parent / "rcea")

    def run(self, *args: str, stdin: str | None = None, quiet: bool = False) -> str:
        _say("rcea " + " ".join(args))
        out = subprocess.run(
            [self.exe, *args],
            env=self.env,
            input=stdin,
            text=True,
            stdout=subprocess.PIPE if quiet else None,
            check=True,
        )
        return out.stdout or ""

    def popen(self, *args: str) -> subprocess.Popen[str]:
        _say("rcea " + " ".join(args) + " (in the background)")
        return subprocess.Popen(
            [self.exe, *args],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )


# --------------------------------------------------------------------------- pictures


def save_png(png: bytes, path: Path, max_bytes: int = MAX_BYTES) -> int:
    """Write ``png``; above ``max_bytes`` re-encode it with a 256-colour palette (screens
    of flat colours lose nothing visible). Returns the size written."""
    out = png
    if len(out) > max_bytes:
        img = Image.open(io.BytesIO(png)).convert("RGB")
        buf = io.BytesIO()
        img.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(
            buf, format="PNG", optimize=True
        )
        out = buf.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(out)
    return len(out)


@contextmanager
def _browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright  # the `dev` extra: only taking pictures

    if not Path(CHROMIUM).exists():
        raise SystemExit(f"{CHROMIUM} missing: `make chromium` installs Debian chromium")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def _shot(page: Any, path: Path) -> None:
    size = save_png(page.screenshot(), path)
    _say(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {size:,} bytes")


def view_shots(browser: Any, url: str, password: str, out: Path) -> None:
    """Log in to the view as the researcher, then each page through the sidebar (a reload
    would start a new session and ask for the login again)."""
    page = browser.new_page(viewport=VIEWPORT)
    page.set_default_timeout(120_000)
    page.goto(url)
    page.get_by_role("heading", name="RCEA Audit — log in").wait_for()
    page.get_by_role("textbox", name="Researcher").fill(RESEARCHER)
    page.get_by_role("textbox", name="Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.get_by_text("Logged in as").wait_for()
    nav = page.locator("[data-testid='stSidebarNav']")
    for path, (link, heading, name) in VIEW_PAGES.items():
        nav.get_by_role("link", name=link, exact=True).click()
        page.wait_for_url(f"{url}/{path}")
        page.get_by_role("heading", name=heading).first.wait_for()
        page.locator("[data-testid='stVegaLiteChart'] :is(canvas, svg.marks)").first.wait_for()
        page.wait_for_timeout(2500)  # the grids and charts settle
        if page.locator("[data-testid='stException']").count():
            raise SystemExit(f"the view's {link} page shows an exception")
        _shot(page, out / name)
    page.close()


def pair_task(data: Path) -> tuple[str, str, str, str]:
    """(server URL, e-mail, password, task URL) of SIMULATED annotator A's first pair task
    of the demo's pair audit."""
    logins = json.loads((data / "demo-logins.json").read_text())["simulated"]["A"]
    email, password = logins["email"], logins["password"]
    engine = open_store(Settings(data_dir=data))
    with session_scope(engine) as s:
        audit = get_audit(s, study=STUDY)
        task = (
            s.exec(
                sa.select(AuditTask)
                .where(AuditTask.audit_id == audit.id, AuditTask.role == "A")
                .order_by(AuditTask.task_id)
            )
            .scalars()
            .first()
        )
        project_id, task_id = task.project_id, task.task_id
    engine.dispose()
    server = People(data, "http://127.0.0.1:1").require(email).url
    return server, email, password, f"{server}/projects/{project_id}/data?task={task_id}"


def example_task(data: Path) -> str:
    """The task URL of the rendered example (:data:`EXAMPLE_LEFT` / :data:`EXAMPLE_RIGHT`)
    in its own project on SIMULATED annotator A's server, created once per data dir with
    the demo audit's label config; the task is built by the push's
    ``rcea.annotation.tasks.build_pair_task``."""
    email = json.loads((data / "demo-logins.json").read_text())["simulated"]["A"]["email"]
    engine = open_store(Settings(data_dir=data))
    with session_scope(engine) as s:
        definition = audit_rubric(s, get_audit(s, study=STUDY)).pairs.strategy_definition
    engine.dispose()
    people = People(data, "http://127.0.0.1:1")
    person = people.require(email)
    client = people.client(person)
    found = [p.id for p in client.projects.list() if p.title == EXAMPLE_TITLE]
    project_id = int(found[0]) if found else create_project(
        client,
        title=EXAMPLE_TITLE,
        label_config=pair_label_config(definition, question=True),
        description="How a pair task shows Markdown and TeX (docs/labelstudio.md).",
    )  # fmt: skip
    task = build_pair_task(
        EXAMPLE_KEY, EXAMPLE_LEFT, EXAMPLE_RIGHT, rng=random.Random(0), question=EXAMPLE_QUESTION
    )
    task_id = import_tasks(client, project_id, [task.data])[EXAMPLE_KEY]
    return f"{person.url}/projects/{project_id}/data?task={task_id}"


def labelstudio_shot(browser: Any, data: Path, out: Path) -> None:
    """Annotator A logs in through Label Studio's login form on A's own server and opens a
    pair task of A's project in the labelling interface, then the rendered example."""
    server, email, password, task_url = pair_task(data)
    page = browser.new_page(viewport=VIEWPORT)
    page.set_default_timeout(120_000)
    page.goto(f"{server}/user/login/")
    page.locator("input[name='email']").fill(email)
    page.locator("input[name='password']").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(lambda u: "/user/login" not in u)
    page.goto(task_url)
    page.get_by_text(PAIR_QUESTION).wait_for()
    page.locator("div.rendered").first.wait_for()  # the rendered texts
    page.wait_for_timeout(2500)
    _shot(page, out / "labelstudio-pair-task.png")
    page.goto(example_task(data))
    page.get_by_text(PAIR_QUESTION).wait_for()
    # every construct the example holds is on the page as MathML/HTML before the shot
    for css in ("mfrac", "msqrt", 'math[display="block"]', "mtable", 'menclose[notation="box"]',
                "pre code"):  # fmt: skip
        page.locator(f"div.rendered {css}").first.wait_for()
    page.wait_for_timeout(2500)
    _shot(page, out / "labelstudio-rendered-task.png")
    page.close()


# --------------------------------------------------------------------------- main


def take(data: Path, out: Path) -> None:
    rcea = Rcea(data)
    rcea.run("demo", "--quick", "--simulate-annotators", "--no-serve")
    password = secrets.token_urlsafe(12)
    rcea.run("view", "add-researcher", RESEARCHER, "--reset", "--password-stdin",
             stdin=password + "\n", quiet=True)  # fmt: skip
    view = None
    try:
        rcea.run("labelstudio", "start")  # the demo stopped the servers it had started
        port = _free_port()
        view = rcea.popen("view", "--port", str(port), "--n-boot", "200")
        url = f"http://127.0.0.1:{port}"
        _wait_http(f"{url}/_stcore/health", view)
        with _browser() as browser:
            view_shots(browser, url, password, out)
            labelstudio_shot(browser, data, out)
    finally:
        if view is not None:
            view.terminate()
            view.wait(timeout=30)
        subprocess.run([rcea.exe, "labelstudio", "stop"], env=rcea.env, check=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, default=None, help="keep the study here")
    ap.add_argument("--out", type=Path, default=OUT, help="where the PNGs go")
    args = ap.parse_args(argv)
    if args.data_dir is not None:
        take(args.data_dir.resolve(), args.out)
    else:
        with tempfile.TemporaryDirectory(prefix="rcea-screenshots-") as tmp:
            take(Path(tmp) / "data", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
