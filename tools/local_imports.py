"""List function-local imports (``import`` inside a function body), per package.

The house rule (docs/development.md, "Imports") keeps imports at module level
except for heavy optional dependencies, which carry a one-line reason. This
walks the tree with :mod:`ast` and prints every import found inside a
function, plus a count per top-level package.

    python -m tools.local_imports [PATH ...] [--heavy]

``--heavy`` also lists the allowed heavy-dependency imports (hidden by default).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

# Imports of these top-level modules may stay inside a function: heavy optional
# dependencies (the train, gpu, llm, sign and dev extras) and the two heavy servers only
# `rcea serve` and `rcea view` start (docs/development.md "Imports").
HEAVY = frozenset(
    {
        "accelerate",
        "cryptography",
        "datasets",
        "math_verify",
        "openai",
        "peft",
        "playwright",
        "streamlit",
        "torch",
        "transformers",
        "trl",
        "uvicorn",
        "verl",
        "vllm",
    }
)


def imported_roots(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The top-level module names one import statement loads."""
    if isinstance(node, ast.ImportFrom):
        return [(node.module or "").split(".")[0]] if node.level == 0 else ["."]
    return [alias.name.split(".")[0] for alias in node.names]


def local_imports(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line, source text, heavy?) for every import inside a function of *path*."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    lines = path.read_text(encoding="utf-8").splitlines()
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                heavy = all(root in HEAVY for root in imported_roots(node))
                yield node.lineno, lines[node.lineno - 1].strip(), heavy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "paths", nargs="*", default=["audits", "annotation", "pipeline", "study", "app", "tools"]
    )
    parser.add_argument(
        "--heavy", action="store_true", help="also list heavy optional-dependency imports"
    )
    args = parser.parse_args(argv)
    counts: Counter[str] = Counter()
    heavy_counts: Counter[str] = Counter()
    seen: set[tuple[Path, int]] = set()
    for root in map(Path, args.paths):
        files = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for path in files:
            package = "/".join(path.parts[:2]) if len(path.parts) > 2 else path.parts[0]
            for line, text, heavy in local_imports(path):
                if (path, line) in seen:
                    continue
                seen.add((path, line))
                (heavy_counts if heavy else counts)[package] += 1
                if not heavy or args.heavy:
                    print(f"{path}:{line}: {text}{'  [heavy]' if heavy else ''}")
    print("\nfunction-local imports per package (other / heavy):")
    for package in sorted(set(counts) | set(heavy_counts)):
        print(f"  {package}: {counts[package]} / {heavy_counts[package]}")
    print(f"  total: {sum(counts.values())} / {sum(heavy_counts.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
