"""`audits` is pure: it imports none of the other packages (DESIGN.md layout)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {
    "audits": (
        "app",
        "annotation",
        "pipeline",
        "sqlmodel",
        "sqlalchemy",
        "fastapi",
        "label_studio_sdk",
        "streamlit",
    ),
    "annotation": ("app", "pipeline"),
    "pipeline": ("app", "annotation"),
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_dependency_direction() -> None:
    for package, forbidden in FORBIDDEN.items():
        for path in (ROOT / package).rglob("*.py"):
            bad = _imports(path) & set(forbidden)
            assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"
