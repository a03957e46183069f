"""Imports live at module level (docs/development.md "Imports"): in the packages already
hoisted, no function-local import remains but those of heavy optional dependencies."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.local_imports import local_imports

ROOT = Path(__file__).resolve().parents[1]
HOISTED = ("study", "app/demo")


@pytest.mark.parametrize("package", HOISTED)
def test_no_function_local_import(package: str) -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, text, heavy in local_imports(path)
        if not heavy
    ]
    assert not found, "hoist to module level:\n" + "\n".join(found)


def test_the_lister_finds_a_local_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import json\n\n"
        "def f():\n    import os\n    import torch  # heavy\n    return os, torch, json\n"
    )
    assert list(local_imports(module)) == [
        (4, "import os", False),
        (5, "import torch  # heavy", True),
    ]
