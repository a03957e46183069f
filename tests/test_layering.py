"""The house's layering (docs/development.md): ``audits`` ← ``annotation`` / ``pipeline`` ←
``study`` ← ``app``. ``study`` never imports ``app``; inside ``app`` the CLI, the API and the
view do not import each other and the demo does not import the CLI; no module of the tree
takes part in an import cycle (function-local imports count: a cycle through them is still
a cycle)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("audits", "annotation", "pipeline", "study", "app")
FORBIDDEN = {
    "audits": (
        "app",
        "study",
        "annotation",
        "pipeline",
        "sqlmodel",
        "sqlalchemy",
        "fastapi",
        "label_studio_sdk",
        "streamlit",
        # the live metrics import rcea.audits on the light base (numpy): a result that is a
        # report section describes its fields in dataclass metadata, which pydantic reads
        "pydantic",
    ),
    "annotation": ("app", "study", "pipeline"),
    "pipeline": ("app", "study", "annotation"),
    "study": ("app", "streamlit", "typer", "fastapi"),
}
#: the report's pure core (docs/reports.md "How a report is computed"): it computes from
#: plain inputs and never reads the store itself
PURE = {
    "rcea.study.report.compute": ("sqlmodel", "sqlalchemy", "rcea.study.store"),
    "rcea.study.report.measured": ("sqlmodel", "sqlalchemy", "rcea.study.store"),
    "rcea.study.report.publication": ("sqlmodel", "sqlalchemy", "rcea.study.store"),
}
#: inside app: subpackage → the app subpackages it must not import
APP_FORBIDDEN = {
    "rcea.app.cli": ("rcea.app.api", "rcea.app.view"),
    "rcea.app.api": ("rcea.app.cli", "rcea.app.view", "rcea.app.demo"),
    "rcea.app.view": ("rcea.app.cli", "rcea.app.api", "rcea.app.demo"),
    "rcea.app.demo": ("rcea.app.cli", "rcea.app.api", "rcea.app.view"),
}


def layer(name: str) -> str:
    """The layer a module belongs to: ``rcea.study.store`` → ``study``; an outside
    module → its top-level name (``sqlalchemy.orm`` → ``sqlalchemy``)."""
    parts = name.split(".")
    return parts[1] if parts[0] == "rcea" and len(parts) > 1 else parts[0]


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in (ROOT / "rcea" / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imported(module: str) -> set[str]:
    """Every name ``module`` imports, at any depth of its code, made absolute."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                head = base[: len(base) - (node.level - 1)]
                full = ".".join(head + ([node.module] if node.module else []))
            else:
                full = node.module or ""
            # ``from pkg import sub`` imports the module pkg.sub; ``from mod import f``
            # resolves to mod below.
            names.update(f"{full}.{a.name}" if full else a.name for a in node.names)
    return names


def graph() -> dict[str, set[str]]:
    """Module → the tree's modules it imports. A module's own ancestor packages are left
    out: Python imports them before the module anyway, so an ``__init__`` that re-exports
    its submodules is not a cycle."""
    out: dict[str, set[str]] = {}
    for mod in MODULES:
        parts = mod.split(".")
        ancestors = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
        out[mod] = {r for n in imported(mod) if (r := _resolve(n))} - ancestors
    return out


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in g:
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(g[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_dependency_direction(package: str) -> None:
    forbidden = FORBIDDEN[package]
    bad = {
        f"{mod} imports {name}"
        for mod in MODULES
        if layer(mod) == package
        for name in imported(mod)
        if layer(name) in forbidden
    }
    assert not bad, sorted(bad)


@pytest.mark.parametrize("sub", sorted(APP_FORBIDDEN))
def test_shell_parts_stay_apart(sub: str) -> None:
    bad = {
        f"{mod} imports {name}"
        for mod in MODULES
        if mod == sub or mod.startswith(sub + ".")
        for name in imported(mod)
        if any(name == f or name.startswith(f + ".") for f in APP_FORBIDDEN[sub])
    }
    assert not bad, sorted(bad)


#: what the shell may take from the ORM: a session or engine to hand to ``rcea.study``
#: and the error of an unreachable database. Statements, tables and queries are
#: ``rcea.study``'s (docs/development.md "Layers").
SHELL_ORM_NAMES = {"Session", "Engine", "OperationalError"}
QUERY_METHODS = {"exec", "execute", "query", "scalars", "scalar"}


def shell_queries(tree: ast.AST) -> list[str]:
    """Where a module of the shell queries the store itself: a name other than
    ``SHELL_ORM_NAMES`` imported from sqlmodel/sqlalchemy (``select``, ``func``, ``text``
    …), a table of ``rcea.study.store.models``, a ``select(…)`` call, or a session's
    ``.exec`` / ``.execute`` / ``.query`` / ``.get(Model, id)``."""
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            top = node.module.split(".")[0]
            names = {a.name for a in node.names}
            if top in ("sqlmodel", "sqlalchemy") and names - SHELL_ORM_NAMES:
                bad.append(f"line {node.lineno}: from {node.module} import {sorted(names)}")
            if node.module == "rcea.study.store.models":
                bad.append(f"line {node.lineno}: imports the store's tables {sorted(names)}")
        elif isinstance(node, ast.Import):
            bad += [
                f"line {node.lineno}: import {a.name}"
                for a in node.names
                if a.name.split(".")[0] in ("sqlmodel", "sqlalchemy")
            ]
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id == "select":
                bad.append(f"line {node.lineno}: select(…)")
            elif isinstance(f, ast.Attribute) and (
                f.attr in QUERY_METHODS
                or (
                    f.attr == "get"
                    and isinstance(f.value, ast.Name)
                    and f.value.id in ("s", "session")
                )
            ):
                bad.append(f"line {node.lineno}: .{f.attr}(…)")
    return bad


def test_the_shell_never_queries() -> None:
    """Every read the CLI, the API, the view and the demo need is a ``rcea.study``
    function (one per question, shared by every surface that asks it): no module under
    rcea/app builds a statement or runs one."""
    bad = {
        f"{path.relative_to(ROOT)} {where}"
        for mod, path in MODULES.items()
        if layer(mod) == "app"
        for where in shell_queries(ast.parse(path.read_text()))
    }
    assert not bad, sorted(bad)


def closure(module: str) -> dict[str, str | None]:
    """Every module of the tree that importing ``module`` may load (its imports at any
    depth, function-local ones included, and the packages above each), each with the
    module that brought it in (``None`` for ``module`` itself)."""
    via: dict[str, str | None] = {module: None}
    todo = [module]
    while todo:
        mod = todo.pop()
        parts = mod.split(".")
        ancestors = {".".join(parts[:i]) for i in range(1, len(parts))} & MODULES.keys()
        for dep in ancestors | {r for n in imported(mod) if (r := _resolve(n))}:
            if dep not in via:
                via[dep] = mod
                todo.append(dep)
    return via


def forbidden_reach(module: str, forbidden: tuple[str, ...]) -> list[str]:
    """The import chains by which ``module`` reaches a ``forbidden`` name, directly or
    through any module it loads: ``rcea.study.report.rows <- … <- compute imports
    sqlalchemy``."""
    via = closure(module)
    bad = []
    for mod in sorted(via):
        names = imported(mod) | {mod}
        hit = sorted(n for n in names if any(n == f or n.startswith(f + ".") for f in forbidden))
        if hit:
            chain, at = [mod], via[mod]
            while at is not None:
                chain.append(at)
                at = via[at]
            bad.append(f"{' <- '.join(chain)} imports {hit[0]}")
    return bad


@pytest.mark.parametrize("module", sorted(PURE))
def test_report_core_reads_no_store(module: str) -> None:
    """Nothing the pure core loads, however deep, is the store or the ORM."""
    assert not forbidden_reach(module, PURE[module])


def test_store_reach_can_fail() -> None:
    """The walk follows imports through other modules: the report's store reads
    (``inputs``) reach the ORM through ``rcea.study.store``, and ``build`` reaches it
    through ``inputs``."""
    found = forbidden_reach("rcea.study.report.build", ("sqlmodel",))
    assert any(f.startswith("rcea.study.store") for f in found), found
    assert any("rcea.study.report.inputs <- rcea.study.report.build" in f for f in found), found


def test_shell_query_rule_can_fail() -> None:
    src = (
        "from sqlmodel import Session, select\n"
        "from rcea.study.store.models import Audit\n"
        "def f(s):\n"
        "    s.get(Audit, 1)\n"
        "    return s.exec(select(Audit)).all()\n"
    )
    found = shell_queries(ast.parse(src))
    assert len(found) == 5, found
    assert shell_queries(ast.parse("from sqlmodel import Session\nd = {}\nd.get('x')\n")) == []


def test_no_import_cycle() -> None:
    assert cycles(graph()) == []


def test_cycle_finder_finds_a_cycle() -> None:
    """The checker itself can fail: a constructed two- and three-module cycle is found."""
    g = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert sorted(cycles(g)) == [["a", "b"], ["c", "d", "e"]]


def test_relative_imports_are_resolved() -> None:
    """``from ..store import x`` inside rcea/study/report counts as importing rcea.study.store."""
    assert any(m.startswith("rcea.study.") for m in MODULES)
    assert "rcea.study.store" in {_resolve(n) for n in imported("rcea.study.report.publish")}
