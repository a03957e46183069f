"""The ``rcea`` CLI, in-process (CliRunner) and as the installed console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from rcea.app.cli import app
from tests.support.helpers import make_record, write_jsonl

runner = CliRunner()


def _malformed(tmp_path: Path) -> Path:
    rec5 = make_record(4)
    del rec5["reward"]
    lines = [
        json.dumps(make_record(0)),
        json.dumps(make_record(1)),
        '{"trajectory_id": ',
        json.dumps(make_record(3)),
        json.dumps(rec5),
    ]
    return write_jsonl(tmp_path / "malformed.jsonl", lines)


def test_help_lists_groups() -> None:
    out = runner.invoke(app, ["--help"])
    assert out.exit_code == 0
    for cmd in ("validate", "ingest", "studies", "summary", "serve", "demo", "db", "config"):
        assert cmd in out.output


def test_validate_names_both_lines_and_exits_nonzero(tmp_path: Path) -> None:
    path = _malformed(tmp_path)
    out = runner.invoke(app, ["validate", str(path)])
    assert out.exit_code == 1
    assert f"{path}:line 3: invalid JSON" in out.output
    assert f"{path}:line 5: reward: missing required field" in out.output
    js = runner.invoke(app, ["validate", str(path), "--json"])
    assert js.exit_code == 1
    data = json.loads(js.stdout)
    assert data["ok"] is False
    assert {(e["location"], e["field"]) for e in data["errors"]} == {
        ("line 3", None),
        ("line 5", "reward"),
    }


def test_ingest_malformed_leaves_store_unchanged(tmp_path: Path) -> None:
    good = write_jsonl(tmp_path / "good.jsonl", [make_record(i) for i in range(6)])
    assert runner.invoke(app, ["ingest", str(good), "--study", "s"]).exit_code == 0
    before = json.loads(runner.invoke(app, ["summary", "s", "--json"]).stdout)
    out = runner.invoke(app, ["ingest", str(_malformed(tmp_path)), "--study", "s"])
    assert out.exit_code == 1 and "nothing ingested" in out.output
    after = json.loads(runner.invoke(app, ["summary", "s", "--json"]).stdout)
    assert before == after


def test_ingest_json_and_summary(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "study1.jsonl", [make_record(i) for i in range(6)])
    out = runner.invoke(app, ["ingest", str(path), "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["ok"] and data["study"] == "study1" and data["n_trajectories"] == 6
    again = runner.invoke(app, ["ingest", str(path)])
    assert again.exit_code == 0 and "already ingested" in again.output
    summ = runner.invoke(app, ["summary", "study1"])
    assert "6 trajectories, 3 questions" in summ.output
    missing = runner.invoke(app, ["summary", "nope"])
    assert missing.exit_code == 1 and "no study named 'nope'" in missing.output


def test_demo_runs_twice(tmp_path: Path) -> None:
    first = runner.invoke(app, ["demo", "--sample", "--no-serve"])
    assert first.exit_code == 0, first.output
    assert "ingested 1920 trajectories, 12 questions, study sample" in first.output
    second = runner.invoke(app, ["demo", "--sample", "--no-serve"])
    assert second.exit_code == 0 and "already ingested" in second.output


def test_console_script_end_to_end(tmp_path: Path) -> None:
    """The installed ``rcea`` entry point, as a user runs it."""
    exe = Path(sys.executable).parent / "rcea"
    env = {**os.environ, "RCEA_DATA_DIR": str(tmp_path / "d")}
    path = _malformed(tmp_path)
    proc = subprocess.run(
        [str(exe), "validate", str(path)], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 1
    assert "line 3" in proc.stderr and "line 5: reward" in proc.stderr
    proc = subprocess.run(
        [str(exe), "ingest", str(path)], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 1
    proc = subprocess.run(
        [str(exe), "studies", "--json"], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0 and json.loads(proc.stdout) == []


def test_the_lazy_command_table_matches_what_each_module_registers() -> None:
    """``rcea.app.cli.COMMANDS`` names every top-level command once, with the module that
    registers it: a command added to a module but not to the table would be unreachable."""
    from rcea.app.cli import COMMANDS, module_commands

    for module in set(COMMANDS.values()):
        registered = set(module_commands(module).commands)
        assert registered == {n for n, m in COMMANDS.items() if m == module}, module


def test_a_command_loads_only_its_own_module() -> None:
    """``rcea stats …`` does not import the other command modules (nor the store)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from rcea.app.cli import app\n"
        "assert CliRunner().invoke(app, ['stats', '--help']).exit_code == 0\n"
        "print(sorted(m for m in sys.modules\n"
        "             if m.startswith('rcea.app.cli.') and m.endswith('_cmd')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['rcea.app.cli.stats_cmd']", out.stdout + out.stderr


def test_light_commands_start_without_scipy() -> None:
    """``rcea demo status``, ``rcea audit sync`` and the like do not import scipy (≈ 1 s):
    ``rcea/audits/`` imports it inside the functions that compute with it."""
    import subprocess
    import sys

    modules = ("demo_cmd", "audit_cmd", "judge_cmd", "labelstudio_cmd", "data_cmd", "probe_cmd")
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module('rcea.app.cli.' + m)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy')[:5])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
