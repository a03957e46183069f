"""The documentation site: generated reference pages match the code (every command, every
setting, every route), and `mkdocs build --strict` is clean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import typer

from app.docs import _commands, cli_page, main, settings_page
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[1]


def test_generated_reference_pages_are_up_to_date() -> None:
    assert main(["--check"]) == 0, "docs/reference is stale: run `python -m app.docs`"


def test_every_command_and_option_is_in_the_reference() -> None:
    from app.cli import app

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
