"""Types are checked, not only written (docs/development.md "Types"): every ``# type:
ignore`` of the product names its codes and says why; ``make test`` and the pre-commit
hooks run ruff, ruff format and mypy from the project's .venv before anything else."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from tools.type_ignores import TREE, TypeIgnore, type_ignores, unexplained

ROOT = Path(__file__).resolve().parents[1]


def test_every_type_ignore_says_why() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{ignore.line}"
        for path, ignore in unexplained([ROOT / p for p in TREE])
    ]
    assert not found, "name the error code and say why after the marker:\n" + "\n".join(found)


def test_the_lister_finds_bare_and_unexplained_ignores(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "a = f()  # type: ignore\n"  # 1: no code, no reason
        "b = f()  # type: ignore[arg-type]\n"  # 2: no reason
        "c = f()  # type: ignore[arg-type]  # the id is set once stored\n"  # 3
        "d = f()  # type: ignore[misc]  # noqa: F405\n"  # 4: a tool's marker is no reason
        "# the stub lacks it\n"
        "e = f()  # type: ignore[attr-defined]\n"  # 6: the reason above
        "s = '# type: ignore'\n"  # 7: in a string, not a comment
    )
    assert list(type_ignores(module)) == [
        TypeIgnore(1, None, None),
        TypeIgnore(2, "[arg-type]", None),
        TypeIgnore(3, "[arg-type]", "the id is set once stored"),
        TypeIgnore(4, "[misc]", None),
        TypeIgnore(6, "[attr-defined]", "the stub lacks it"),
    ]
    assert [ignore.line for _, ignore in unexplained([module])] == [1, 2, 4]


def test_mypy_is_configured_strict_where_the_docs_say() -> None:
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert mypy["files"] == ["rcea"] and mypy["warn_unused_ignores"] is True
    assert "strict" not in mypy  # global in mypy: it would make every package strict
    strict = [o for o in mypy["overrides"] if o.get("disallow_untyped_defs")]
    assert len(strict) == 1
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(d.startswith("mypy==") for d in dev["dev"])
    assert set(strict[0]["module"]) == {
        "rcea.audits",
        "rcea.audits.*",
        "rcea.study",
        "rcea.study.*",
    }


def test_make_test_and_the_hooks_run_the_checkers_first() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    steps = [line.strip() for line in recipe.splitlines()[1:]]
    assert [re.sub(r"^\$\(BIN\)/", "", s).split(" ")[0:3] for s in steps][:3] == [
        ["ruff", "check", "."],
        ["ruff", "format", "--check"],
        ["python", "-m", "mypy"],
    ]
    assert "pytest" in steps[3]
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = {h["id"]: h for repo in config["repos"] for h in repo["hooks"]}
    assert [repo["repo"] for repo in config["repos"]] == ["local"]  # nothing fetched
    assert set(hooks) == {"ruff", "ruff-format", "mypy"}
    assert all(h["entry"].startswith(".venv/bin/") for h in hooks.values())
