"""The hardened input reader (rcea.audits.inputs): what it refuses, and that each refusal
names the file, the line and what to do."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from rcea.audits.inputs import (
    MAX_DEPTH,
    MAX_INT_DIGITS,
    InputError,
    check_input_file,
    check_output_file,
    invisible_character,
    iter_json_lines,
    loads_json,
    loads_toml,
    read_csv,
    read_text,
)


@pytest.mark.parametrize("thing", ["directory", "fifo", "dev-zero", "socket-like dir link"])
def test_only_regular_files_are_opened(tmp_path: Path, thing: str) -> None:
    path = tmp_path / "input"
    if thing == "directory":
        path.mkdir()
    elif thing == "fifo":
        os.mkfifo(path)
    elif thing == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        path.symlink_to(tmp_path)
    started = time.monotonic()
    with pytest.raises(InputError, match=r"not a regular file; give a file"):
        read_text(path)
    assert time.monotonic() - started < 1  # a FIFO with no writer does not block
    with pytest.raises(FileNotFoundError, match="no such file"):
        check_input_file(tmp_path / "missing")


def test_not_utf8_names_line_and_byte_offset(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": "caf\xe9"}\n')
    found = []
    with pytest.raises(InputError) as err:
        for item in iter_json_lines(path):
            found.append(item)
    assert found == [(1, {"a": 1})]  # the lines before it are read
    assert str(err.value) == (
        f"{path}:line 2: not UTF-8: byte 0xE9 at byte offset 19; save the file as UTF-8"
    )


def test_json_duplicate_keys_depth_and_integers_are_refused() -> None:
    with pytest.raises(InputError, match=r"f:line 3: key 'reward' appears twice"):
        loads_json('{"reward": 0, "reward": 1}', "f", line=3)
    assert loads_json("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    with pytest.raises(InputError, match=f"nested deeper than {MAX_DEPTH}"):
        loads_json("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
    with pytest.raises(InputError, match=f"nested deeper than {MAX_DEPTH}"):
        loads_json("[" * 100_000)  # not even closed: refused before the parser recurses
    # brackets inside strings are text, not nesting
    assert loads_json('{"text": "' + "{[" * 1000 + '"}') == {"text": "{[" * 1000}
    assert loads_json("9" * MAX_INT_DIGITS) == int("9" * MAX_INT_DIGITS)
    with pytest.raises(InputError, match=f"more than {MAX_INT_DIGITS} digits"):
        loads_json("9" * 5000)


def test_toml_syntax_depth_and_integers_name_the_line() -> None:
    with pytest.raises(InputError, match=r"^r.toml:line 2: invalid TOML: "):
        loads_toml("a = 1\nb = = 2\n", "r.toml")
    with pytest.raises(InputError, match=f"nested deeper than {MAX_DEPTH}"):
        loads_toml("a = " + "[" * 5000 + "]" * 5000, "r.toml")
    with pytest.raises(InputError, match="digits"):
        loads_toml("a = " + "1" * 5000, "r.toml")
    with pytest.raises(InputError, match=f"more than {MAX_INT_DIGITS} digits"):
        loads_toml("a = " + "1" * (MAX_INT_DIGITS + 1), "r.toml")


def test_csv_bom_duplicate_header_extra_cells_and_huge_cells(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xef\xbb\xbftrajectory_id,reward\nt1,1\n")
    assert read_csv(path) == (
        ["trajectory_id", "reward"],
        [(2, {"trajectory_id": "t1", "reward": "1"})],
    )
    path.write_text("a,b,a\n1,2,3\n")
    with pytest.raises(InputError, match=r"t.csv:line 1: the header names column 'a' twice"):
        read_csv(path)
    path.write_text("a,b\n1,2\n3,4,5\n")
    with pytest.raises(InputError, match=r"t.csv:line 3: 3 cells but the header names 2"):
        read_csv(path)
    path.write_text('a,b\n1,"two\nlines"\n3,4\n')
    assert read_csv(path)[1] == [(2, {"a": "1", "b": "two\nlines"}), (4, {"a": "3", "b": "4"})]
    path.write_text("a,b\n" + "x" * 200_000 + ",1\n")  # over csv's own 128 KiB
    assert read_csv(path)[1][0][1]["a"] == "x" * 200_000


def test_invisible_and_bidirectional_characters() -> None:
    assert invisible_character("t1") is None
    assert invisible_character("naïve — ok") is None
    assert "U+200B" in (invisible_character("t1\u200b") or "")
    assert "U+202E" in (invisible_character("\u202egrpo") or "")


def test_output_paths_are_checked_before_use(tmp_path: Path) -> None:
    assert check_output_file(tmp_path / "new" / "deeper" / "out.jsonl")
    with pytest.raises(ValueError, match=r"--problems-out .*: is a directory"):
        check_output_file(tmp_path, option="--problems-out")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file, not a directory"):
        check_output_file(tmp_path / "file" / "out.jsonl")
