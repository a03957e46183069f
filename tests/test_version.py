"""One version: ``[project] version`` in pyproject.toml is the only place it is written;
``rcea.__version__`` reads it (installed metadata, or the file for a bare checkout) and the
API, the bundles (tests/study/report/test_report_verify.py) and verify carry it."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from fastapi.testclient import TestClient

import rcea
from rcea.app.api import create_app
from rcea.study.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
DECLARED = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_the_version_is_the_declared_one() -> None:
    assert rcea.__version__ == DECLARED


def test_no_other_file_writes_a_version() -> None:
    written = [
        f"{p.relative_to(ROOT)}: {line.strip()}"
        for p in sorted((ROOT / "rcea").rglob("*.py"))
        for line in p.read_text(encoding="utf-8").splitlines()
        if re.match(r"\s*__version__\s*=\s*['\"]", line) or DECLARED in line
    ]
    assert not written, written


def test_a_checkout_without_the_distribution_reads_pyproject() -> None:
    code = (
        "import importlib.metadata as m\n"
        "def missing(name):\n"
        "    raise m.PackageNotFoundError(name)\n"
        "m.version = missing\n"
        "import rcea\n"
        "print(rcea.__version__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == DECLARED


def test_the_api_reports_it(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    api = create_app(Settings(data_dir=tmp_path / "d"), engine=engine)
    assert api.version == rcea.__version__
    assert TestClient(api).get("/health").json()["version"] == rcea.__version__
