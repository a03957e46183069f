"""Unreadable input files, through the real ``rcea`` command run as an unprivileged user
(docs/security.md "Hostile and broken input files").

Root reads a ``chmod 000`` file regardless, so each case runs ``rcea`` in a child process
whose user is ``nobody`` (``setpriv``, else ``setuid`` before ``exec``), in a folder that
user owns (its data directory, its store, ``$TMPDIR``). For each reader — ``validate``,
``ingest``, ``import table``, ``import verl`` (one unreadable step file; a folder that
cannot be listed), ``stats passk``, ``audit rubric freeze``, ``judge freeze`` — the rules:
exit 1 (the documented "error"), one line naming the file and no traceback, under
``--json`` one strict-JSON document ``{"ok": false, …}``, and the store holds exactly
what it held before (nothing half-written). Skipped, saying why, when this process is
not root or no interpreter can run ``rcea`` as that user.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import site
import sqlite3
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import make_record

REPO = Path(__file__).resolve().parents[3]
ERROR_EXIT = 1  # rcea/app/cli/exit_codes.py: ERROR


def _user() -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        return None


def _drop(user: pwd.struct_passwd) -> tuple[list[str], Callable[[], None] | None]:
    """The command prefix (``setpriv``) or the pre-exec function that runs a child as
    ``user`` with no supplementary groups."""
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [
            setpriv,
            f"--reuid={user.pw_uid}",
            f"--regid={user.pw_gid}",
            "--clear-groups",
        ], None

    def become() -> None:
        os.setgroups([])
        os.setgid(user.pw_gid)
        os.setuid(user.pw_uid)

    return [], become


def _environment(home: Path) -> dict[str, str]:
    """The child's environment: no RCEA_* of this run but its own data directory, and the
    project and its installed packages importable by whichever interpreter runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RCEA_")}
    paths = [str(REPO), *site.getsitepackages()]
    env.update(
        HOME=str(home),
        TMPDIR=str(home),
        RCEA_DATA_DIR=str(home / "data"),
        PYTHONPATH=os.pathsep.join(paths),
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def _interpreters() -> list[str]:
    """This interpreter, then the system's of the same version (a virtual environment
    whose base interpreter lives under a home the user cannot enter still runs there)."""
    found = [sys.executable]
    v = sys.version_info
    for name in (f"python{v.major}.{v.minor}",):
        path = shutil.which(name, path="/usr/bin:/usr/local/bin")
        if path and path not in found:
            found.append(path)
    return found


class Unprivileged:
    """``rcea`` (its console script's entry point, in a new interpreter) run as
    ``nobody`` in a folder it owns."""

    def __init__(self, home: Path, user: pwd.struct_passwd) -> None:
        self.home = home
        self.user = user
        self.prefix, self.preexec = _drop(user)
        self.env = _environment(home)
        self.python = ""
        self.entry = ["-c", console_script()]

    def find_python(self) -> str | None:
        """Why no interpreter runs ``rcea`` as the user (None: one does)."""
        tried = []
        for python in _interpreters():
            done = self._run([python, "-c", "import rcea.app.cli, sqlmodel"], timeout=120)
            if done.returncode == 0:
                self.python = python
                return None
            tried.append(f"{python}: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
        return "no interpreter runs rcea as nobody (" + "; ".join(tried) + ")"

    def _run(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # noqa: S603 - a fixed command line built by this test
            [*self.prefix, *argv],
            cwd=self.home,
            env=self.env,
            preexec_fn=self.preexec,  # noqa: PLW1509 - the user change must happen before exec
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def rcea(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self._run([self.python, *self.entry, *args], timeout=180)

    def give(self, path: Path, mode: int) -> Path:
        os.chown(path, self.user.pw_uid, self.user.pw_gid)
        path.chmod(mode)
        return path


def console_script() -> str:
    """What the ``rcea`` console script runs, as this tree's pyproject.toml declares it
    (``rcea = "MODULE:FUNCTION"``): the installed script may come from another tree."""
    target = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]["rcea"]
    module, function = target.split(":")
    return f"import sys; sys.argv[0] = 'rcea'; from {module} import {function}; {function}()"


@pytest.fixture(scope="module")
def nobody() -> Iterator[Unprivileged]:
    if os.geteuid() != 0:
        pytest.skip("needs root to run rcea as another user (root reads a chmod 000 file)")
    user = _user()
    if user is None:
        pytest.skip("no user 'nobody' to run rcea as")
    home = Path(tempfile.mkdtemp(prefix="rcea-unreadable-"))
    try:
        runner = Unprivileged(home, user)
        runner.give(home, 0o700)
        why = runner.find_python()
        if why:
            pytest.skip(why)
        _fixtures(runner)
        yield runner
    finally:
        shutil.rmtree(home, ignore_errors=True)


RECORDS = "".join(json.dumps(make_record(i)) + "\n" for i in range(6))
TABLE = "id,qid,text,correct\n" + "".join(f"t{i},q{i % 2},answer {i},{i % 2}\n" for i in range(4))
VERL = "".join(
    json.dumps({"input": f"user\nWhat is {i}+1?\nassistant\n", "output": f"\\boxed{{{i}}}",
                "score": i % 2, "step": 1}) + "\n"
    for i in range(3)
)  # fmt: skip


def _fixtures(runner: Unprivileged) -> None:
    """The inputs, each unreadable one ``chmod 000`` and owned by root; and a store that
    already holds one study (a refusal must leave it as it is)."""
    home = runner.home
    (home / "good.jsonl").write_text(RECORDS)
    runner.give(home / "good.jsonl", 0o600)
    done = runner.rcea("ingest", str(home / "good.jsonl"), "--study", "kept", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    for name, text in {
        "records.jsonl": RECORDS,
        "table.csv": TABLE,
        "passk.csv": "question_id,n,c\nq1,8,3\n",
        "rubric.toml": (REPO / "rcea/audits/demo_rubric.toml").read_text(),
        "template.toml": '[template]\nname = "t"\nversion = 1\nsystem = "s"\nuser = "$problem"\n',
    }.items():
        (home / name).write_text(text)
        (home / name).chmod(0o000)
    dump = home / "dump"
    dump.mkdir()
    (dump / "1.jsonl").write_text(VERL)
    (dump / "2.jsonl").write_text(VERL.replace('"step": 1', '"step": 2'))
    (dump / "1.jsonl").chmod(0o644)
    (dump / "2.jsonl").chmod(0o000)
    dump.chmod(0o755)
    (home / "closed").mkdir()
    (home / "closed" / "1.jsonl").write_text(VERL)
    (home / "closed").chmod(0o000)


def store_rows(home: Path) -> dict[str, int]:
    db = sqlite3.connect(f"file:{home / 'data' / 'rcea.db'}?mode=ro", uri=True)
    try:
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {n: db.execute(f'SELECT COUNT(*) FROM "{n}"').fetchone()[0] for n in names}
    finally:
        db.close()


#: case → (the command's arguments under the runner's home, the path the error must name)
CASES: dict[str, tuple[list[str], str]] = {
    "validate": (["validate", "records.jsonl"], "records.jsonl"),
    "ingest": (["ingest", "records.jsonl", "--study", "s"], "records.jsonl"),
    "import table": (
        ["import", "table", "table.csv", "--study", "s",
         "--map", "trajectory_id=id", "--map", "question_id=qid", "--map", "reward=correct"],
        "table.csv",
    ),
    "import verl, one step file": (
        ["import", "verl", "dump", "--study", "s", "--run", "r", "--model", "m"],
        "dump/2.jsonl",
    ),
    "import verl, a folder": (
        ["import", "verl", "closed", "--study", "s", "--run", "r", "--model", "m"],
        "closed",
    ),
    "stats passk": (["stats", "passk", "passk.csv", "--k", "1"], "passk.csv"),
    "audit rubric freeze": (["audit", "rubric", "freeze", "rubric.toml"], "rubric.toml"),
    "judge freeze": (
        ["judge", "freeze", "--name", "j", "--template", "template.toml", "--model", "m"],
        "template.toml",
    ),
}  # fmt: skip


def _absolute(home: Path, args: list[str]) -> list[str]:
    return [str(home / a) if (home / a).exists() else a for a in args]


#: the readers of the issue's own cases, also run without ``--json`` (each run of ``rcea``
#: as another user is a new interpreter: about 1.5 s on an idle machine)
TEXT_CASES = ("validate", "ingest", "import table", "import verl, one step file")


@pytest.mark.parametrize("case", TEXT_CASES)
def test_an_unreadable_file_is_one_line_naming_it(nobody: Unprivileged, case: str) -> None:
    args, named = CASES[case]
    path = str(nobody.home / named)
    before = store_rows(nobody.home)
    done = nobody.rcea(*_absolute(nobody.home, args))
    shown = f"rcea {' '.join(args)} → {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert done.returncode == ERROR_EXIT, shown
    assert "Traceback" not in done.stdout + done.stderr, shown
    assert "internal error" not in done.stdout + done.stderr, shown
    assert "Usage:" not in done.stderr, shown  # the reader decides, not the option parser
    lines = [ln for ln in done.stderr.splitlines() if path in ln]
    assert lines, shown
    assert any("cannot read" in ln or "cannot list" in ln for ln in lines), shown
    assert "permission denied" in lines[0], shown
    assert store_rows(nobody.home) == before, f"the store changed\n{shown}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_under_json_it_is_strict_json(nobody: Unprivileged, case: str) -> None:
    args, named = CASES[case]
    before = store_rows(nobody.home)
    done = nobody.rcea(*_absolute(nobody.home, args), "--json")
    shown = f"rcea {' '.join(args)} --json → {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert done.returncode == ERROR_EXIT, shown

    def refuse(constant: str) -> Any:
        raise AssertionError(f"{constant} in JSON\n{shown}")

    doc = json.loads(done.stdout, parse_constant=refuse)
    assert isinstance(doc, dict) and doc["ok"] is False, shown
    assert str(nobody.home / named) in done.stdout, shown
    assert "permission denied" in done.stdout, shown
    assert store_rows(nobody.home) == before, f"the store changed\n{shown}"


def test_the_readable_step_file_alone_is_imported_once_the_other_is_readable(
    nobody: Unprivileged,
) -> None:
    """The refusal above was the file's mode, not the dump: made readable, both steps
    are imported (and the earlier refusals left nothing to skip)."""
    dump = nobody.home / "dump"
    nobody.give(dump / "2.jsonl", 0o600)
    try:
        done = nobody.rcea(
            "import", "verl", str(dump), "--study", "v", "--run", "r", "--model", "m", "--json"
        )
        assert done.returncode == 0, done.stdout + done.stderr
        doc = json.loads(done.stdout)
        assert doc["ok"] is True, doc
    finally:
        (dump / "2.jsonl").chmod(0o000)
