"""Imports live at module level (docs/development.md "Imports"): every function-local
import of the tree (all but tests/ and benchmarks/) carries a one-line reason in a comment
on its line or just above it, and rcea/study/ and rcea/app/demo/ keep none but those of heavy
optional dependencies."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tools.local_imports import HEAVY, TREE, LocalImport, local_imports, reasons

ROOT = Path(__file__).resolve().parents[1]
HEAVY_ONLY = ("rcea/study", "rcea/app/demo")


def test_the_tree_is_every_package_but_the_tests() -> None:
    packages = {
        str(p.relative_to(ROOT))
        for p in [*ROOT.iterdir(), *(ROOT / "rcea").iterdir()]
        if (p / "__init__.py").is_file()
    }
    assert packages - {"tests", "rcea"} == set(TREE)


def _offending(package: str, breaks_rule: Callable[[LocalImport], bool]) -> list[str]:
    """``path:line: import`` of every function-local import in ``package`` that breaks
    the rule."""
    return [
        f"{path.relative_to(ROOT)}:{imp.line}: {imp.text}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for imp in local_imports(path)
        if breaks_rule(imp)
    ]


@pytest.mark.parametrize("package", TREE)
def test_every_local_import_has_a_reason(package: str) -> None:
    found = _offending(package, lambda imp: imp.reason is None)
    assert not found, "hoist to module level, or say why not in a comment:\n" + "\n".join(found)


@pytest.mark.parametrize("package", HEAVY_ONLY)
def test_no_local_import_but_heavy_ones(package: str) -> None:
    found = _offending(package, lambda imp: not imp.heavy)
    assert not found, "hoist to module level:\n" + "\n".join(found)


def test_the_lister_finds_a_local_import_and_its_reason(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import json\n\n"
        "def f():\n"
        "    import os\n"
        "    import torch  # heavy\n"
        "    return os, torch, json\n"
    )
    assert list(local_imports(module)) == [
        LocalImport(4, "import os", False, None),
        LocalImport(5, "import torch  # heavy", True, "heavy"),
    ]


def test_a_comment_above_covers_the_block_below_it(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n"
        "    # torch and transformers: the train extra\n"  # 2
        "    import torch\n"  # 3: the line above
        "    from transformers import (\n"  # 4: the block goes on
        "        AutoModel,\n"
        "    )\n"
        "    import trl\n"  # 7: still the block
        "\n"
        "    import peft\n"  # 9: a blank line ends it
        "    import vllm  # noqa: F401\n"  # 10: a tool's marker is no reason
        "    import verl  # type: ignore # the train extra\n"  # 11: a reason beside a marker
        "    return torch\n"
    )
    got = {imp.line: imp.reason for imp in local_imports(module)}
    block = "torch and transformers: the train extra"
    assert got == {3: block, 4: block, 7: block, 9: None, 10: None, 11: "the train extra"}


def test_a_reason_may_run_over_several_comment_lines() -> None:
    source = "x = 1  # not alone\n# first line\n# second line\ny = 2\n"
    assert reasons(source) == {1: "not alone", 2: "first line", 3: "first line second line"}


def test_the_heavy_list_is_the_documented_one() -> None:
    doc = (ROOT / "docs" / "development.md").read_text(encoding="utf-8").lower()
    section = doc.split("### imports", 1)[1].split("\n### ", 1)[0]
    named = {"trl": "trl", "peft": "peft", "vllm": "vllm", "math_verify": "math-verify"}
    missing = [m for m in sorted(HEAVY) if named.get(m, m) not in section]
    assert not missing, f"docs/development.md 'Imports' does not name {missing}"
