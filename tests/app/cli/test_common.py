"""The one wrapper of a command (docs/development.md "The CLI wrapper"): a store session
that commits only when the block ends, a domain error as one line and exit 1 (JSON under
``--json``), a command's own exit and an unreachable service left alone, one printer."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import typer
from sqlalchemy.exc import OperationalError

import rcea.app.cli
from rcea.app.cli import exit_codes
from rcea.app.cli.common import domain_errors, emit, engine, say, store_session
from rcea.study.store import StoreError, get_or_create_study, list_studies, session_scope


def studies() -> list[str]:
    with session_scope(engine()) as s:
        return [st.name for st in list_studies(s)]


def test_store_session_commits_or_reports_and_rolls_back(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(typer.Exit) as ex, store_session(True) as s:
        get_or_create_study(s, name="half")
        s.flush()
        raise StoreError("no study 'other'")
    assert ex.value.exit_code == exit_codes.ERROR
    assert json.loads(capsys.readouterr().out) == {"ok": False, "error": "no study 'other'"}
    assert studies() == []  # nothing half-written
    with store_session() as s:
        get_or_create_study(s, name="whole")
    assert studies() == ["whole"]
    with pytest.raises(typer.Exit), store_session():
        raise FileNotFoundError("rubric.toml: no such file")
    assert capsys.readouterr().err == "error: rubric.toml: no such file\n"


def test_domain_errors_leave_exits_and_services_alone() -> None:
    # a command's own exit is a RuntimeError too: audit push catches RuntimeErrors
    with pytest.raises(typer.Exit) as ex, domain_errors(True, RuntimeError, code=2):
        raise typer.Exit(exit_codes.FAILED)
    assert ex.value.exit_code == exit_codes.FAILED
    down = OperationalError(None, None, Exception("connection refused"))
    with pytest.raises(OperationalError), domain_errors(True):
        raise down  # rcea.app.cli.main names the service (exit 3)
    with pytest.raises(typer.Exit) as ex, domain_errors(False, code=exit_codes.REFUSED):
        raise ValueError("refused")
    assert ex.value.exit_code == exit_codes.REFUSED


def test_emit_prints_json_or_the_text(capsys: pytest.CaptureFixture[str]) -> None:
    def never() -> str:
        raise AssertionError("text is not built under --json")

    emit({"n": 1}, True, never)
    assert json.loads(capsys.readouterr().out) == {"n": 1}
    emit({"n": 1}, False, lambda: "one")
    assert capsys.readouterr().out == "one\n"


def test_emit_leaves_a_printing_text_alone_and_say_is_text_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    emit({"n": 1}, False, lambda: typer.echo("a table\nof lines"))
    assert capsys.readouterr().out == "a table\nof lines\n"
    say("pushing…", True)
    emit({"n": 1}, True, lambda: "one")
    assert json.loads(capsys.readouterr().out) == {"n": 1}  # --json: the one document
    say("pushing…", False)
    assert capsys.readouterr().out == "pushing…\n"


CLI_DIR = Path(rcea.app.cli.__file__).parent
#: command modules that print ``--json`` output by hand (``if as_json`` branches and
#: ``print_json`` calls): none, every command goes through ``emit``
HAND_WRITTEN_OUTPUT: dict[str, int] = {}


def hand_written_output(tree: ast.AST) -> int:
    """``if as_json`` / ``if not as_json`` statements and direct ``print_json`` calls."""
    n = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test.operand if isinstance(node.test, ast.UnaryOp) else node.test
            n += isinstance(test, ast.Name) and test.id == "as_json"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            n += node.func.id == "print_json"
    return n


def test_every_command_prints_through_emit() -> None:
    """Every command's output, its errors included, goes through ``emit`` / ``fail`` /
    ``say`` of common.py: ``--json`` stays one JSON document whatever the command."""
    counts = {
        path.name: n
        for path in sorted(CLI_DIR.glob("*.py"))
        if path.name != "common.py" and (n := hand_written_output(ast.parse(path.read_text())))
    }
    assert counts == HAND_WRITTEN_OUTPUT


def test_the_output_rule_can_fail() -> None:
    src = (
        "def f(as_json):\n"
        "    if as_json:\n        print_json({})\n"
        "    if not as_json:\n        echo('x')\n"
        "    x = 1 if as_json else 2\n"
    )
    assert hand_written_output(ast.parse(src)) == 3
