"""Hostile and broken input files through every reader of the ``rcea`` entry point
(docs/security.md "Hostile and broken input files").

Each case writes one bad file (a valid file of its kind, mutated: a byte that is not UTF-8,
a BOM, a key or a column named twice, nesting a thousand deep, a 5,000-digit integer, a
200 KiB cell, an invisible character in an id, a cut or a flipped byte …) or names
something that is not a regular file (a directory, a FIFO with no writer, a symlink to
``/dev/zero``), and runs the command that reads it through :func:`rcea.app.cli.main`
in-process, under ``--json``. The rules, for every case: it ends within
``CASE_SECONDS`` (a hang is a failure, not a stuck run), nothing on stderr is a
traceback and nothing reached the last-resort handler (``internal error``), stdout is one
strict-JSON document (``ok`` false on a refusal), the exit code is a documented one, and
after a refusal the store holds exactly what it held before.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rcea.app.cli import COMMANDS, main, module_commands
from rcea.study.settings import get_settings
from rcea.study.store import open_store
from tests.support.helpers import make_record

#: The longest one case may take (the slowest real case, an ingest, takes well under 1 s).
CASE_SECONDS = 20
DOCUMENTED_EXITS = {0, 1, 2}


class Hang(BaseException):
    """Raised by the alarm: a BaseException, so that no ``except Exception`` hides it."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    def ring(signum: int, frame: Any) -> None:
        raise Hang(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_rcea(*args: str) -> tuple[int, str, str]:
    """``rcea ARGS`` through the real entry point (its last-resort handler included):
    exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["rcea", *args]
    code: Any = 0
    try:
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            time_limit(CASE_SECONDS),
        ):
            main()
    except SystemExit as done:
        code = done.code
    finally:
        sys.argv = argv
    return (0 if code is None else int(code)), out.getvalue(), err.getvalue()


def store_rows() -> dict[str, int]:
    """Rows per non-empty table of the store the settings name (a store created empty by
    a refused command holds what no store holds: nothing)."""
    url = get_settings().resolved_database_url
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return {}
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            names = sa.inspect(conn).get_table_names()
            counts = {
                n: conn.execute(sa.text(f'SELECT COUNT(*) FROM "{n}"')).scalar_one()
                for n in names
                if n != "alembic_version"
            }
            return {n: c for n, c in counts.items() if c}
    finally:
        engine.dispose()


def check_case(args: list[str]) -> tuple[int, dict[str, Any]]:
    """Run one case and hold it to every rule; returns the exit code and the JSON."""
    before = store_rows()
    code, out, err = run_rcea(*args, "--json")
    shown = f"rcea {' '.join(args)} → exit {code}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
    assert "Traceback" not in err and "Traceback" not in out, shown
    assert "internal error" not in err + out, shown
    assert code in DOCUMENTED_EXITS, shown
    try:
        doc = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in JSON\n{shown}"))
    except json.JSONDecodeError:
        pytest.fail(f"stdout is not one JSON document\n{shown}")
    assert isinstance(doc, dict), shown
    if code != 0:
        assert doc.get("ok") is False, shown
        assert store_rows() == before, f"the store changed after a refusal\n{shown}"
    return code, doc


# --------------------------------------------------------------------------- the readers

RECORDS = "".join(json.dumps(make_record(i)) + "\n" for i in range(6))
TABLE_CSV = "id,qid,text,correct,run,model,step,seed\n" + "".join(
    f"t{i},q{i % 2},answer {i},{i % 2},grpo,tiny,0,{i}\n" for i in range(6)
)
VERL = "".join(
    json.dumps({"input": f"user\nWhat is {i}+1?\nassistant\n", "output": f"\\boxed{{{i}}}",
                "score": i % 2, "step": 3}) + "\n"
    for i in range(4)
)  # fmt: skip
VERIFY = "".join(json.dumps(make_record(i, ground_truth=str(i))) + "\n" for i in range(4))
PASSK = "question_id,n,c\nq1,8,3\nq2,8,0\nq3,8,8\n"
COVFIT = (
    "transition,predicted,observed,run\na,0.1,0.2,r1\nb,0.3,0.1,r1\nc,-0.2,-0.1,r2\nd,0.5,0.4,r2\n"
)
RUBRIC = (Path(__file__).resolve().parents[3] / "rcea/audits/demo_rubric.toml").read_text()
TEMPLATE = (
    '[template]\nname = "t"\nversion = 1\nsystem = "judge"\n'
    'user = "<p>$problem</p><s>$solution</s>"\n'
)


def _reader_args(kind: str, path: Path) -> list[str]:
    return {
        "validate": ["validate", str(path)],
        "ingest": ["ingest", str(path), "--study", "fuzz"],
        "table": [
            "import", "table", str(path), "--study", "fuzz",
            "--map", "trajectory_id=id", "--map", "question_id=qid", "--map", "reward=correct",
        ],
        "verl": ["import", "verl", str(path), "--study", "fuzz", "--run", "r", "--model", "m"],
        "passk": ["stats", "passk", str(path), "--k", "1,4"],
        "covfit": ["stats", "covfit", str(path)],
        "rubric": ["audit", "rubric", "freeze", str(path)],
        "verify": ["judge", "verify", str(path)],
        "template": ["judge", "freeze", "--name", "j", "--template", str(path), "--model", "m"],
    }[kind]  # fmt: skip


#: reader → (file name, valid content)
READERS: dict[str, tuple[str, str]] = {
    "validate": ("records.jsonl", RECORDS),
    "ingest": ("records.jsonl", RECORDS),
    "table": ("table.csv", TABLE_CSV),
    "verl": ("3.jsonl", VERL),
    "passk": ("passk.csv", PASSK),
    "covfit": ("covfit.csv", COVFIT),
    "rubric": ("rubric.toml", RUBRIC),
    "template": ("template.toml", TEMPLATE),
    "verify": ("verify.jsonl", VERIFY),
}


def _at(text: str, where: float) -> int:
    return int(where * len(text))


def _json_first_object(text: str, change: Callable[[str], str]) -> str:
    """``text`` with its first ``{`` changed (JSON readers), else its first line."""
    i = text.find("{")
    return text[:i] + change(text[i:]) if i >= 0 else change(text)


#: mutation → (text, where in [0, 1)) → bytes of the bad file
MUTATIONS: dict[str, Callable[[str, float], bytes]] = {
    "latin-1 byte": lambda t, w: t[: _at(t, w)].encode() + b"\xe9" + t[_at(t, w) :].encode(),
    "utf-8 bom": lambda t, w: b"\xef\xbb\xbf" + t.encode(),
    "cut": lambda t, w: t.encode()[: _at(t, w)],
    "byte flip": lambda t, w: bytes(
        b ^ 0x5A if i == _at(t, w) else b for i, b in enumerate(t.encode())
    ),
    "nul byte": lambda t, w: t[: _at(t, w)].encode() + b"\x00" + t[_at(t, w) :].encode(),
    "deep nesting": lambda t, w: t[: _at(t, w)].encode() + b"[" * 5000 + t[_at(t, w) :].encode(),
    "duplicate key": lambda t, w: _json_first_object(
        t,
        lambda s: s.replace('"reward": 0', '"reward": 0, "reward": 1', 1).replace(
            '"score": 0', '"score": 0, "score": 1', 1
        ),
    ).encode(),
    "duplicate column": lambda t, w: (
        t.replace(",", ",seed,", 1).replace("\n", ",0\n", 1).encode()
        if "\n" in t and "," in t.splitlines()[0]
        else t.encode()
    ),
    "extra cells": lambda t, w: t.replace("\n", "\n", 1).rstrip("\n").encode() + b",x,y\n",
    "huge integer": lambda t, w: t.replace("0", "1" + "0" * 5000, 1).encode(),
    "huge cell": lambda t, w: t[: _at(t, w)].encode() + b"x" * 200_000 + t[_at(t, w) :].encode(),
    "zero-width id": lambda t, w: (
        t.replace("t0", "t0\u200b", 1).replace("q1", "q1\u200b", 1).encode()
    ),
    "bidi run": lambda t, w: t.replace("grpo", "\u202egrpo", 1).encode(),
    "long id": lambda t, w: t.replace("t00001", "t" * 400, 1).encode(),
    "huge step": lambda t, w: (
        t.replace('"step": 0', '"step": 4294967296', 1)
        .replace('"step": 3', '"step": 4294967296', 1)
        .encode()
    ),
    "huge n": lambda t, w: (
        t.replace(",8,", ",10000000000,").replace(",8\n", ",10000000000\n").encode()
    ),
    "bare dollar": lambda t, w: t.replace("</p>", "</p> costs $5", 1).encode(),
    "empty": lambda t, w: b"",
}


def _write_case(tmp: Path, kind: str, data: bytes) -> Path:
    name, _ = READERS[kind]
    if kind == "verl":
        folder = tmp / "dump"
        folder.mkdir()
        (folder / name).write_bytes(data)
        return folder
    path = tmp / name
    path.write_bytes(data)
    return path


_counter = iter(range(10**9))

#: The budget of the drawn cases, enforced by Hypothesis: FUZZ_EXAMPLES cases (more with
#: ``RCEA_FUZZ_EXAMPLES=N``), each within FUZZ_DEADLINE_S — 30 × 2 s = 60 s at most on an
#: idle 2-core machine, where the 30 take ≈ 4.5 s (docs/security.md). On a loaded machine
#: the deadline stretches by the load per core (a case that waits for a CPU is not slow),
#: never beyond the hang limit CASE_SECONDS.
FUZZ_EXAMPLES = int(os.environ.get("RCEA_FUZZ_EXAMPLES", "30"))
FUZZ_DEADLINE_S = 2.0
LOAD_PER_CORE = max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
DEADLINE = timedelta(seconds=min(FUZZ_DEADLINE_S * LOAD_PER_CORE, CASE_SECONDS))


@pytest.fixture
def warm() -> None:
    """What the first case would otherwise pay for inside its deadline: each reader's
    command module imported, and the store migrated (the fixture's data directory is
    the one every drawn case uses)."""
    for args in {_reader_args(kind, Path("x"))[0] for kind in READERS}:
        module_commands(COMMANDS[args])
    open_store().dispose()


@settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=DEADLINE,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    kind=st.sampled_from(sorted(READERS)),
    mutation=st.sampled_from(sorted(MUTATIONS)),
    where=st.floats(min_value=0.0, max_value=0.999),
)
def test_a_mutated_file_is_one_clear_refusal_or_accepted(
    tmp_path: Path, warm: None, kind: str, mutation: str, where: float
) -> None:
    case = tmp_path / f"case{next(_counter)}"
    case.mkdir()
    _, text = READERS[kind]
    path = _write_case(case, kind, MUTATIONS[mutation](text, where))
    code, doc = check_case(_reader_args(kind, path))
    if code != 0:
        message = json.dumps(doc)
        assert str(path.name) in message or str(path) in message or "--" in message, doc


@pytest.mark.parametrize(
    ("mutation", "kind", "where", "expected"),
    [
        ("latin-1 byte", "ingest", 0.5, 1),
        ("latin-1 byte", "table", 0.5, 1),
        ("latin-1 byte", "verl", 0.5, 1),
        ("latin-1 byte", "passk", 0.5, 1),
        ("utf-8 bom", "table", 0.0, 0),  # as Excel writes it: read as if absent
        ("deep nesting", "rubric", 0.0, 1),
        ("deep nesting", "template", 0.0, 1),
        ("deep nesting", "validate", 0.5, 1),
        ("huge integer", "ingest", 0.0, 1),
        ("huge cell", "passk", 0.45, 0),  # 200 KiB in one cell: within MAX_CELL_CHARS
        ("duplicate key", "ingest", 0.0, 1),
        ("duplicate column", "table", 0.0, 1),
        ("duplicate column", "covfit", 0.0, 1),
        ("extra cells", "covfit", 0.0, 1),
        ("zero-width id", "ingest", 0.0, 1),
        ("bidi run", "table", 0.0, 1),
        ("long id", "ingest", 0.0, 1),
        ("huge step", "ingest", 0.0, 1),
        ("huge step", "verl", 0.0, 1),
        ("bare dollar", "template", 0.0, 1),
        ("huge n", "passk", 0.0, 0),  # n = 10¹⁰: computed in k factors, no MemoryError
    ],
)
def test_each_class_of_the_issue(
    tmp_path: Path, mutation: str, kind: str, where: float, expected: int
) -> None:
    """The issue's own examples: each refused (exit 1, named) or, where the limits allow
    it, read as the user meant."""
    _, text = READERS[kind]
    path = _write_case(tmp_path, kind, MUTATIONS[mutation](text, where))
    code, doc = check_case(_reader_args(kind, path))
    assert code == expected, doc


#: one reader of each kind of file (validate shares ingest's reader, covfit passk's)
OPENERS = ("ingest", "table", "verl", "passk", "rubric", "template", "verify")


@pytest.mark.parametrize("kind", OPENERS)
@pytest.mark.parametrize("thing", ["directory", "fifo", "dev-zero"])
def test_what_is_not_a_regular_file_is_refused_at_once(
    tmp_path: Path, kind: str, thing: str
) -> None:
    name, _ = READERS[kind]
    where = tmp_path / "dump" if kind == "verl" else tmp_path
    where.mkdir(exist_ok=True)
    path = where / name
    if thing == "directory":
        path.mkdir()
    elif thing == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    target = where if kind == "verl" else path
    code, doc = check_case(_reader_args(kind, target))
    assert code != 0, doc


def test_two_parquet_columns_with_one_name_and_wrong_list_types(tmp_path: Path) -> None:
    rows = [make_record(i) for i in range(3)]
    table = pa.table({k: [r[k] for r in rows] for k in rows[0]})
    dup = tmp_path / "dup.parquet"
    names = [*table.column_names, "reward"]
    pq.write_table(pa.Table.from_arrays([*table.columns, table.column("reward")], names), dup)
    code, doc = check_case(["validate", str(dup)])
    assert code == 1 and "reward" in json.dumps(doc), doc
    wrong = tmp_path / "wrong.parquet"
    pq.write_table(table.append_column("token_entropies", pa.array([["a"], ["b"], ["c"]])), wrong)
    code, doc = check_case(["ingest", str(wrong), "--study", "fuzz"])
    assert code == 1 and "list of numbers" in json.dumps(doc), doc


def test_a_crash_is_one_line_naming_its_log(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The last resort: an error no command expected is one line naming the log that holds
    the traceback, JSON under --json, exit 1."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)

    def explode(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr("rcea.app.cli.data_cmd.read_records", explode)
    records = tmp_path / "r.jsonl"
    records.write_text(RECORDS)
    code, out, err = run_rcea("validate", str(records), "--json")
    assert code == 1 and "Traceback" not in out + err
    doc = json.loads(out)
    assert doc["ok"] is False and "internal error (RuntimeError: boom)" in doc["error"]
    log = Path(doc["log"])
    assert log.parent == tmp_path and "Traceback" in log.read_text()
    code, out, err = run_rcea("validate", str(records))
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("error: internal error (RuntimeError: boom); the traceback is in ")


def test_problems_out_is_checked_before_the_import_commits(tmp_path: Path) -> None:
    dump = _write_case(tmp_path, "verl", VERL.encode())
    taken = tmp_path / "taken"
    taken.mkdir()
    args = _reader_args("verl", dump) + ["--problems-out", str(taken)]
    code, doc = check_case(args)
    assert code == 1 and "--problems-out" in doc["error"], doc
    assert store_rows().get("trajectory", 0) == 0


@pytest.mark.parametrize(
    ("error", "code", "said"),
    [
        (PermissionError(1, "Operation not permitted", "/srv/rcea-data"), 1, "/srv/rcea-data"),
        (ConnectionRefusedError(111, "Connection refused"), None, None),
    ],
)
def test_a_refused_path_or_service_is_one_line_and_json_under_json(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    error: Exception,
    code: int | None,
    said: str | None,
) -> None:
    """A path the OS refuses (a data dir another user owns) is the user's to fix: one line
    naming it, no traceback log; an unreachable service likewise (exit 3 when the handler
    knows it as one). Under --json both are a JSON object on stdout."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise error

    monkeypatch.setattr("rcea.app.cli.data_cmd.read_records", refuse)
    records = tmp_path / "r.jsonl"
    records.write_text(RECORDS)
    got, out, err = run_rcea("validate", str(records), "--json")
    assert "Traceback" not in out + err
    doc = json.loads(out)
    assert doc["ok"] is False and got in (1, 3), (got, doc)
    if code is not None:
        assert got == code and said in doc["error"] and "internal error" not in doc["error"]
    got, out, err = run_rcea("validate", str(records))
    assert out == "" and len(err.strip().splitlines()) == 1 and err.startswith("error: ")
