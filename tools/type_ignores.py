"""List the ``# type: ignore`` comments of the product that do not say why.

The house rule (docs/development.md, "Types"): mypy checks ``rcea/`` in ``make test``, and
every ``# type: ignore`` that stays names its error codes and carries its reason, either in
the same comment after the marker or in a comment on the line just above::

    stmt.order_by(Audit.id)  # type: ignore[arg-type]  # SQLModel types the column as an int

mypy's ``warn_unused_ignores`` (pyproject.toml) removes the ones nothing needs any more;
this lister keeps the rest explained. ``tests/test_type_ignores.py`` runs it over
:data:`TREE`.

    python -m tools.type_ignores [PATH ...]

prints every unexplained ignore (exit 1 when there is one) and the number of ignores.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]

#: the code mypy checks (pyproject.toml [tool.mypy] files) and the house tooling
TREE = ("rcea", "tools")

_MARKER = re.compile(r"^(noqa(:\s*[A-Z0-9]+(,\s*[A-Z0-9]+)*)?|pragma:\s*\S+)")
_IGNORE = re.compile(r"#\s*type:\s*ignore(?P<codes>\[[^\]]*\])?(?P<rest>.*)$")


class TypeIgnore(NamedTuple):
    line: int
    codes: str | None
    reason: str | None


def _reason(rest: str) -> str | None:
    """The text after the marker when it is a comment of its own (``# why``); another
    tool's marker there (``# noqa: F401``) is no reason, the words after it are."""
    text = rest.strip()
    if not text.startswith("#"):
        return None
    text = _MARKER.sub("", text.lstrip("#").strip()).lstrip("#").strip()
    return text or None


def type_ignores(path: Path) -> Iterator[TypeIgnore]:
    """Every ``# type: ignore`` comment of ``path`` with its codes and its reason (same
    comment after the marker, or a comment-only line just above), ``None`` when absent."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        match = _IGNORE.search(tok.string)
        if match is None:
            continue
        row = tok.start[0]
        reason = _reason(match["rest"])
        if reason is None and row >= 2:
            above = lines[row - 2].strip()
            if above.startswith("#") and not _IGNORE.search(above):
                reason = above.lstrip("#").strip() or None
        yield TypeIgnore(row, match["codes"], reason)


def unexplained(paths: list[Path]) -> Iterator[tuple[Path, TypeIgnore]]:
    """Every ignore in ``paths`` (files or folders) without codes or without a reason."""
    for base in paths:
        files = sorted(base.rglob("*.py")) if base.is_dir() else [base]
        for path in files:
            for ignore in type_ignores(path):
                if ignore.codes is None or ignore.reason is None:
                    yield path, ignore


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path)
    args = parser.parse_args(argv)
    paths = args.paths or [ROOT / p for p in TREE]
    found = list(unexplained(paths))
    for path, ignore in found:
        what = "names no error code" if ignore.codes is None else "gives no reason"
        print(f"{path}:{ignore.line}: # type: ignore {what}")
    total = sum(
        1
        for base in paths
        for path in (sorted(base.rglob("*.py")) if base.is_dir() else [base])
        for _ in type_ignores(path)
    )
    print(f"{len(found)} unexplained of {total} type: ignore comments")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
