"""List function-local imports (``import`` inside a function body) and their reasons.

The house rule (docs/development.md, "Imports"): a module imports what it needs at its
top. An import may stay inside a function only with a one-line reason in a comment, and
only for a heavy optional dependency (:data:`HEAVY`, or a module of the tree that imports
one) or an import that cannot run earlier (a Django app's ``ready``). Precisely, a local
import is *explained* when

* one of its own lines, or the line just above it, holds a comment, or
* the line just above it is the last line of an explained local import (one comment
  above a block of consecutive imports covers the block).

A comment that is only a tool's marker (``# noqa…``, ``# type: …``, ``# pragma: …``) is no
reason. ``tests/test_local_imports.py`` keeps every local import of the tree (all but
``tests/`` and ``benchmarks/``) explained, and ``rcea/study/`` and ``rcea/app/demo/`` free of any
but the :data:`HEAVY` ones.

    python -m tools.local_imports [PATH ...] [--all]

prints every local import without a reason (exit 1 when there is one) and a count per
package; ``--all`` also lists the explained ones, each with its reason.
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import sys
import tokenize
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]

#: every package of the tree the rule covers: all but tests/ and benchmarks/
TREE = ("rcea/audits", "rcea/annotation", "rcea/pipeline", "rcea/study", "rcea/app", "tools")

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

#: a comment (or a ``#``-separated part of one) that is a tool's marker, not a reason
_MARKER = re.compile(r"^(noqa\b|type:|pragma:|fmt:|isort:)", re.IGNORECASE)


class LocalImport(NamedTuple):
    line: int
    text: str  # the import's first line, stripped
    heavy: bool  # every module it loads is in HEAVY
    reason: str | None  # the comment that explains it, None when there is none


def imported_roots(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The top-level module names one import statement loads."""
    if isinstance(node, ast.ImportFrom):
        return [(node.module or "").split(".")[0]] if node.level == 0 else ["."]
    return [alias.name.split(".")[0] for alias in node.names]


def reasons(source: str) -> dict[int, str]:
    """Line → the text of its comment, tools' markers left out (lines with none absent). A
    comment on a line of its own carries on the comment lines right above it."""
    out: dict[int, str] = {}
    alone: set[int] = set()  # lines that hold nothing but a comment
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        parts = [p.strip() for p in tok.string.split("#")]
        text = " # ".join(p for p in parts if p and not _MARKER.match(p))
        if not text:
            continue
        line = tok.start[0]
        if not tok.line[: tok.start[1]].strip():
            alone.add(line)
            if line - 1 in alone:
                text = f"{out[line - 1]} {text}"
        out[line] = text
    return out


def local_imports(path: Path) -> Iterator[LocalImport]:
    """Every import inside a function of *path*, in line order, with its reason."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(path))
    lines = source.splitlines()
    comments = reasons(source)
    nodes = {
        node
        for fn in ast.walk(tree)
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        for node in ast.walk(fn)
        if isinstance(node, (ast.Import, ast.ImportFrom))
    }
    explained_until: dict[int, str] = {}  # last line of an explained import → its reason
    for node in sorted(nodes, key=lambda n: n.lineno):
        end = node.end_lineno or node.lineno
        own = [comments[i] for i in range(node.lineno, end + 1) if i in comments]
        above = node.lineno - 1
        reason = (own or [None])[0] or comments.get(above) or explained_until.get(above)
        if reason is not None:
            explained_until[end] = reason
        heavy = all(root in HEAVY for root in imported_roots(node))
        yield LocalImport(node.lineno, lines[node.lineno - 1].strip(), heavy, reason)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=[str(ROOT / p) for p in TREE])
    parser.add_argument(
        "--all", action="store_true", help="also list the explained imports and their reasons"
    )
    args = parser.parse_args(argv)
    bare: Counter[str] = Counter()
    explained: Counter[str] = Counter()
    heavy: Counter[str] = Counter()
    for root in map(Path, args.paths):
        files = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for path in files:
            shown = (
                path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path
            )
            package = "/".join(shown.parts[:2]) if len(shown.parts) > 2 else shown.parts[0]
            for imp in local_imports(path):
                (explained if imp.reason else bare)[package] += 1
                heavy[package] += imp.heavy
                if imp.reason is None:
                    print(f"{shown}:{imp.line}: {imp.text}  [no reason]")
                elif args.all:
                    print(f"{shown}:{imp.line}: {imp.text}  [{imp.reason}]")
    print("\nfunction-local imports per package (without a reason / with one, of which heavy):")
    for package in sorted(set(bare) | set(explained)):
        print(f"  {package}: {bare[package]} / {explained[package]}, {heavy[package]}")
    total = sum(bare.values()), sum(explained.values()), sum(heavy.values())
    print(f"  total: {total[0]} / {total[1]}, {total[2]}")
    return 1 if total[0] else 0


if __name__ == "__main__":
    sys.exit(main())
