"""The documentation site: generated reference pages match the code (every command, every
setting, every route), and `mkdocs build --strict` is clean."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path

import typer

from rcea.study.settings import Settings
from tools.reference_docs import _commands, cli_page, main, settings_page

ROOT = Path(__file__).resolve().parents[1]


def test_generated_reference_pages_are_up_to_date() -> None:
    assert main(["--check"]) == 0, "docs/reference is stale: run `python -m tools.reference_docs`"


def test_every_command_and_option_is_in_the_reference() -> None:
    from rcea.app.cli import app

    page = cli_page()
    for path, cmd in _commands(typer.main.get_command(app), ["rcea"]):
        if len(path) > 1:
            assert f"## `{' '.join(path)}`" in page, path
        for param in cmd.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("-"):
                    assert f"`{opt}`" in page, (path, opt)


def test_every_setting_is_in_the_reference() -> None:
    page = settings_page()
    for name in Settings.model_fields:
        assert f"`RCEA_{name.upper()}`" in page, name


def test_mkdocs_build_is_strict_clean(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert (tmp_path / "reference" / "cli" / "index.html").exists()
    assert (tmp_path / "estimators" / "index.html").exists()


#: the screenshots `make screenshots` (tools/screenshots.py) takes from the real pages
SCREENSHOTS = {
    "view-overview.png",
    "view-modes.png",
    "view-audit.png",
    "labelstudio-pair-task.png",
    "labelstudio-rendered-task.png",
}


def _images(page: Path) -> list[Path]:
    """The local images a Markdown page shows (``![alt](path)``), resolved from the page."""
    refs = re.findall(r"!\[[^\]]*\]\(([^)\s]+)", page.read_text(encoding="utf-8"))
    return [(page.parent / r).resolve() for r in refs if "://" not in r]


def test_readme_and_tutorial_images_exist() -> None:
    """Every image the README and the tutorial show is on disk (mkdocs checks the site's
    pages, not the README); the README shows the view and the Label Studio task; the
    tutorial shows every screenshot; each is a 1280 × 800 PNG under 300 KB."""
    from tools.screenshots import MAX_BYTES, VIEW_PAGES, VIEWPORT

    shots = {"labelstudio-pair-task.png", "labelstudio-rendered-task.png"}
    assert {name for _, _, name in VIEW_PAGES.values()} | shots == SCREENSHOTS
    img = ROOT / "docs" / "img"
    readme, tutorial = _images(ROOT / "README.md"), _images(ROOT / "docs" / "tutorial.md")
    for path in readme + tutorial:
        assert path.is_file(), f"missing image {path}"
    assert {p.name for p in readme} >= {"labelstudio-pair-task.png"}
    assert any(p.name.startswith("view-") for p in readme)
    assert {p.name for p in tutorial} == SCREENSHOTS
    for name in SCREENSHOTS:
        data = (img / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", name
        width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
        assert (width, height) == (VIEWPORT["width"], VIEWPORT["height"]), name
        assert len(data) < MAX_BYTES, (name, len(data))


def test_benchmarks_page_is_rendered_from_the_stored_results() -> None:
    from benchmarks.figures import main as figures_main

    assert figures_main(["--check"]) == 0, "docs/benchmarks.md: run `python -m benchmarks.figures`"


def test_screenshots_are_shrunk_only_above_the_limit(tmp_path: Path) -> None:
    """A small PNG is written as it is; one above the limit is re-encoded with a palette
    (same size in pixels, fewer bytes, at most 256 colours)."""
    import io

    import numpy as np
    from PIL import Image

    from tools.screenshots import save_png

    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, size=(200, 320, 3), dtype=np.uint8)  # noise: a big PNG
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    png = buf.getvalue()
    small = tmp_path / "small.png"
    assert save_png(png, small, max_bytes=len(png)) == len(png)
    assert small.read_bytes() == png
    big = tmp_path / "big.png"
    size = save_png(png, big, max_bytes=len(png) - 1)
    assert size == big.stat().st_size < len(png)
    out = Image.open(big)
    assert out.mode == "P" and out.size == (320, 200)
    assert len(out.getcolors(maxcolors=257) or []) <= 256
