"""The documentation site: generated reference pages match the code (every command, every
setting, every route), and `mkdocs build --strict` is clean."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from rcea.study.settings import Settings
from tools.reference_docs import _commands, cli_page, env_reads, main, settings_page

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


# --------------------------------------------------------------------------- command lines

#: the pages whose ``rcea …`` lines are checked (the generated reference is the parser itself)
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md"))]


def _block_lines() -> Iterator[tuple[str, str]]:
    """``(where, line)`` of every ``rcea …`` line in a fenced code block of the docs: a
    ``$ `` prompt and leading ``VAR=value`` assignments dropped, ``\\`` continuations
    joined."""
    for path in PAGES:
        fence, joined = False, ""
        for no, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if raw.lstrip().startswith("```"):
                fence, joined = not fence, ""
                continue
            if not fence:
                continue
            text = joined + raw.strip()
            if text.endswith("\\"):
                joined = text[:-1] + " "
                continue
            joined = ""
            text = re.sub(r"^(\$\s+)?(\w+=\S*\s+)*", "", text)
            if text.startswith("rcea "):
                yield f"{path.relative_to(ROOT)}:{no}", text


def _inline_spans() -> Iterator[tuple[str, str]]:
    """``(where, span)`` of every inline code span of the docs that starts with ``rcea ``."""
    for path in PAGES:
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for span in re.findall(r"`(rcea [^`]+)`", line):
                yield f"{path.relative_to(ROOT)}:{no}", span


def _words(line: str) -> list[str]:
    """The arguments after ``rcea``, with the docs' notation undone: ``[--json]`` →
    ``--json``, ``calibrate|accepted`` → ``calibrate``, ``--serve/--no-serve`` → ``--serve``;
    the line ends at a comment, a pipe or a redirection."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:  # an unbalanced quote in prose: split on blanks
        words = line.split("#", 1)[0].split()
    out: list[str] = []
    for word in words[1:]:
        if word in ("|", "&&", ";", "&") or word.startswith((">", "2>", "|")):
            break
        word = word.strip("[]")
        if "|" in word and not word.startswith("-"):
            word = word.split("|")[0]
        if word.startswith("--") and "/--" in word:
            word = word.split("/")[0]
        if word:
            out.append(word)
    return out


def parse_problem(args: list[str], *, values: bool = True) -> str | None:
    """What the CLI's parser says against ``rcea ARGS`` — an unknown command or option, or
    (``values``) an option without its value — else None. Parse only: nothing runs. Missing
    or placeholder arguments (``BUNDLE``, ``ID``) are not the question here."""
    from rcea.app.cli import app

    cmd: Any = typer.main.get_command(app)
    name, rest = "rcea", list(args)
    while hasattr(cmd, "list_commands") and rest and not rest[0].startswith("-"):
        if rest[0] in ("...", "…"):
            break
        sub = cmd.get_command(cmd.context_class(cmd, info_name=name), rest[0])
        if sub is None:
            return f"{name}: no such command {rest[0]!r}"
        cmd, name, rest = sub, f"{name} {rest[0]}", rest[1:]
    wrong = ("NoSuchOption", "BadOptionUsage") if values else ("NoSuchOption",)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # a --help prints
            cmd.make_context(name, rest, resilient_parsing=False)
    except Exception as exc:  # typer vendors click: its exception classes are private
        if type(exc).__name__ in wrong:
            return f"{name}: {exc.format_message()}"
    return None


def test_every_command_line_in_the_docs_parses() -> None:
    lines = list(_block_lines())
    assert len(lines) > 100  # the scan finds the docs' examples
    bad = [f"{w}: {t}\n  {p}" for w, t in lines if (p := parse_problem(_words(t)))]
    assert not bad, "\n".join(bad)


def test_every_inline_command_in_the_docs_names_real_commands_and_options() -> None:
    spans = list(_inline_spans())
    assert len(spans) > 200
    bad = [f"{w}: {t}\n  {p}" for w, t in spans if (p := parse_problem(_words(t), values=False))]
    assert not bad, "\n".join(bad)


def test_the_parse_check_can_fail() -> None:
    assert "no such command 'gatex'" in (parse_problem(_words("rcea audit gatex")) or "")
    assert "--nope" in (parse_problem(_words("rcea audit gate --nope")) or "")
    assert "requires an argument" in (parse_problem(_words("rcea report publish --sign")) or "")
    assert parse_problem(_words("rcea report verify B [--json] [--key PUB]  # one line")) is None
    assert parse_problem(_words("rcea judge calibrate|accepted sync --json")) is None


# --------------------------------------------------------------------------- environment


def test_every_environment_variable_the_code_reads_is_in_the_reference() -> None:
    page = (ROOT / "docs" / "reference" / "settings.md").read_text(encoding="utf-8")
    reads = env_reads()
    # the scanner finds what the options, os.environ and constants read
    assert {
        "RCEA_LLM_TIMEOUT",
        "RCEA_LLM_MAX_RETRIES",
        "RCEA_STUDY",
        "RCEA_JSON",
        "RCEA_ACTOR",
        "RCEA_PROGRESS",
        "RCEA_LLM_PRICE_INPUT",
        "RCEA_LLM_PRICE_OUTPUT",
        "RCEA_LLM_RESPONSE_FORMAT",
        "RCEA_DEMO_CACHE_DIR",
    } <= set(reads)
    missing = [f"{name} ({where[0]})" for name, where in reads.items() if f"`{name}`" not in page]
    assert not missing, missing
    # and independently of the scanner: every RCEA_ name written in the product's code
    not_variables = {"RCEA_RECEIVER_CHECK"}  # a webhook action name, not a variable
    written = {
        m
        for p in (ROOT / "rcea").rglob("*.py")
        for m in re.findall(r"\bRCEA_[A-Z0-9_]*[A-Z0-9]\b", p.read_text(encoding="utf-8"))
    }
    assert not [n for n in sorted(written - not_variables) if f"`{n}`" not in page]


# --------------------------------------------------------------------------- live help


def test_live_help_keeps_bracketed_words() -> None:
    """Rich markup would read ``[reaudit]`` as a style tag and drop it (rich_markup_mode
    is off on every Typer app): the help printed keeps every bracketed word of the
    command's text and of its options' help."""
    from typer.testing import CliRunner

    from rcea.app.cli import app

    runner = CliRunner()
    checked = 0
    for path, cmd in _commands(typer.main.get_command(app), ["rcea"]):
        texts = [cmd.help or "", *(getattr(p, "help", None) or "" for p in cmd.params)]
        words = {w for t in texts for w in re.findall(r"\[[a-z_]+\]", t)}
        if not words:
            continue
        out = runner.invoke(app, [*path[1:], "--help"], terminal_width=200).output
        flat = " ".join(out.split())
        missing = sorted(w for w in words if w not in flat)
        assert not missing, (path, missing)
        checked += 1
    assert checked >= 3  # audit sample, audit gate, audit reaudit, …
