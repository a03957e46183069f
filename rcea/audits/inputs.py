"""One hardened way to open and read a user's input file (docs/security.md "Hostile and
broken input files").

Every reader of a file a user names (records, verl dumps, tables, rubrics, judge templates,
CSV label tables, question lists) goes through these functions, so that a directory, a FIFO,
``/dev/zero``, a file that is not UTF-8, JSON nested a million deep, a 5,000-digit integer,
a duplicated key or column, or a 100 MiB cell is one :class:`InputError` naming the file,
the line and the field — never a hang, a traceback or a silently changed number.

It lives in ``rcea.audits``, the lowest layer, because the rubric loader
(``rcea.audits.rubric``) needs it as much as the producers and the store do; it holds only
the standard library (Parquet's checks are in ``rcea.pipeline.records``).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import stat
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

#: The deepest nesting of JSON arrays/objects or TOML tables/arrays read (no record,
#: rubric or template needs more than four).
MAX_DEPTH = 64
#: The most digits an integer in a JSON or TOML file may have (a 64-bit integer has at
#: most 19; Python itself stops at 4,300).
MAX_INT_DIGITS = 100
#: The most characters one CSV/TSV cell may hold (a rollout's text is one cell).
MAX_CELL_CHARS = 64 * 1024 * 1024
_BOM = "\ufeff"
_UTF8_BOM = b"\xef\xbb\xbf"


class InputError(ValueError):
    """A file that cannot be read as given: ``FILE:line N: field: message`` (the parts
    that are known). ``message`` alone is what a per-line error collector records."""

    def __init__(
        self,
        path: str | Path | None,
        message: str,
        *,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.path = None if path is None else str(path)
        self.message = message
        self.line = line
        self.field = field
        parts = [p for p in (self.path, None if line is None else f"line {line}") if p]
        where = ":".join(parts)
        text = f"{field}: {message}" if field else message
        super().__init__(f"{where}: {text}" if where else text)


# --------------------------------------------------------------------------- opening


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_input_file(path: str | Path) -> Path:
    """``path`` if it is a regular file (after symlinks) this process may read.
    ``FileNotFoundError`` when nothing is there; :class:`InputError` for a directory, a
    FIFO, a device (``/dev/zero``), a socket or a file that cannot be read — before it is
    opened, so nothing blocks on a pipe nor hashes an endless device."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise FileNotFoundError(f"{p}: no such file") from None
    except OSError as exc:
        raise InputError(p, f"cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(p, f"is {_kind(st.st_mode)}, not a regular file; give a file")
    if not os.access(p, os.R_OK):
        raise InputError(p, "cannot read: permission denied")
    return p


def open_input(path: str | Path) -> BinaryIO:
    """The file opened for binary reading, checked as :func:`check_input_file` checks it
    — and again on the opened descriptor (``O_NONBLOCK``: a FIFO swapped in between the
    two cannot block the open), so what is read is what was checked."""
    p = check_input_file(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(p, f"cannot read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(p, f"is {_kind(st.st_mode)}, not a regular file; give a file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def decode(data: bytes, path: str | Path | None, *, first_line: int = 1, offset: int = 0) -> str:
    """``data`` as strict UTF-8 (a leading byte-order mark is dropped, as Excel writes one);
    the first invalid byte is an :class:`InputError` naming its line and byte offset
    (``first_line`` and ``offset`` place ``data`` inside its file)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = first_line + data.count(b"\n", 0, exc.start)
        raise InputError(
            path,
            f"not UTF-8: byte 0x{data[exc.start]:02X} at byte offset {offset + exc.start}; "
            "save the file as UTF-8",
            line=line,
        ) from None
    return text[1:] if offset == 0 and text.startswith(_BOM) else text


def read_text(path: str | Path) -> str:
    """The whole file as text (checked, strict UTF-8)."""
    with open_input(path) as fh:
        data = fh.read()
    return decode(data, path)


def read_bytes(path: str | Path) -> bytes:
    """The whole file's bytes (checked as :func:`open_input` checks it)."""
    with open_input(path) as fh:
        return fh.read()


def iter_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of every line (its ``\\n``/``\\r\\n`` removed), each decoded
    strictly: memory is bounded by the longest line, not the file."""
    offset = 0
    with open_input(path) as fh:
        for lineno, raw in enumerate(fh, start=1):
            text = decode(raw, path, first_line=lineno, offset=offset)
            offset += len(raw)
            yield lineno, text.rstrip("\r\n") if text.endswith("\n") else text


# --------------------------------------------------------------------------- JSON


class _DuplicateKeyError(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKeyError(key)
            seen.add(key)
    return out


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise OverflowError(text)
    return int(text)


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]")


def _json_too_deep(text: str) -> bool:
    """Whether ``text`` nests arrays/objects deeper than :data:`MAX_DEPTH` (outside
    strings); linear, and only scanned at all when it holds that many brackets."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return False
    depth = 0
    for ch in _NOT_BRACKET.sub("", _JSON_STRING.sub("", text)):
        depth = depth + 1 if ch in "[{" else depth - 1
        if depth > MAX_DEPTH:
            return True
    return False


def loads_json(text: str, path: str | Path | None = None, *, line: int | None = None) -> Any:
    """Strict JSON: a key given twice in one object, an integer of more than
    :data:`MAX_INT_DIGITS` digits or nesting deeper than :data:`MAX_DEPTH` is refused as
    a syntax error is, each an :class:`InputError` at ``path:line``."""
    if _json_too_deep(text):
        raise InputError(path, f"JSON nested deeper than {MAX_DEPTH} levels; flatten it", line=line)
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_int=_bounded_int)
    except json.JSONDecodeError as exc:
        raise InputError(
            path, f"invalid JSON ({exc.msg} at column {exc.colno})", line=line
        ) from None
    except _DuplicateKeyError as exc:
        raise InputError(
            path,
            f"key {exc.args[0]!r} appears twice in one JSON object; keep one",
            line=line,
        ) from None
    except OverflowError:
        raise InputError(
            path, f"an integer has more than {MAX_INT_DIGITS} digits", line=line
        ) from None
    except RecursionError:
        raise InputError(
            path, f"JSON nested deeper than {MAX_DEPTH} levels; flatten it", line=line
        ) from None


def load_json(path: str | Path) -> Any:
    """A whole file of JSON, read and parsed as :func:`loads_json` does."""
    return loads_json(read_text(path), path)


def iter_json_lines(path: str | Path) -> Iterator[tuple[int, Any | InputError]]:
    """``(line number, value or the InputError of that line)`` for every non-blank line
    of a JSONL file: a reader that reports every bad line in one run keeps going; a file
    that is not readable or not UTF-8 raises (nothing after it can be trusted)."""
    for lineno, text in iter_lines(path):
        if not text.strip():
            continue
        try:
            yield lineno, loads_json(text, path, line=lineno)
        except InputError as exc:
            yield lineno, exc


# --------------------------------------------------------------------------- TOML


_TOML_LINE = re.compile(r"\(at line (\d+), column \d+\)")


def _depth(value: Any) -> int:
    """The nesting depth of parsed JSON/TOML (iterative: no recursion limit)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, d = stack.pop()
        items: Iterable[Any]
        if isinstance(item, dict):
            items = item.values()
        elif isinstance(item, list):
            items = item
        else:
            if isinstance(item, int) and len(str(abs(item))) > MAX_INT_DIGITS:
                return -1
            continue
        deepest = max(deepest, d + 1)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((child, d + 1) for child in items)
    return deepest


def loads_toml(text: str, path: str | Path | None = None) -> dict[str, Any]:
    """TOML text parsed, its syntax errors, nesting beyond :data:`MAX_DEPTH` and integers
    beyond :data:`MAX_INT_DIGITS` digits each an :class:`InputError` naming the line."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = _TOML_LINE.search(str(exc))
        msg = _TOML_LINE.sub("", str(exc)).strip()
        raise InputError(
            path, f"invalid TOML: {msg}", line=int(m.group(1)) if m else None
        ) from None
    except RecursionError:
        raise InputError(path, f"TOML nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # int(): Python's own limit on integer digits
        raise InputError(path, f"invalid TOML: {exc}") from None
    depth = _depth(data)
    if depth < 0:
        raise InputError(path, f"an integer has more than {MAX_INT_DIGITS} digits")
    if depth > MAX_DEPTH:
        raise InputError(path, f"TOML nested deeper than {MAX_DEPTH} levels")
    return data


def load_toml(path: str | Path) -> dict[str, Any]:
    """A TOML file read (checked, strict UTF-8) and parsed as :func:`loads_toml` does."""
    return loads_toml(read_text(path), path)


# --------------------------------------------------------------------------- CSV


def read_csv(
    path: str | Path, *, delimiter: str = ","
) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """``(header, [(line, row), …])`` of a CSV/TSV file (a UTF-8 BOM is dropped). Refused,
    each naming the line: a header that names a column twice or names none, a row with
    more cells than the header, a cell over :data:`MAX_CELL_CHARS` characters, a quote
    left open. ``line`` is the line the row starts on."""
    text = read_text(path)
    previous = csv.field_size_limit()
    csv.field_size_limit(MAX_CELL_CHARS)
    try:
        return _parse_csv(text, path, delimiter)
    finally:
        csv.field_size_limit(previous)


def _parse_csv(
    text: str, path: str | Path, delimiter: str
) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    rows: list[tuple[int, dict[str, str]]] = []
    header: list[str] = []
    start = 1
    try:
        for cells in reader:
            if not header:
                if not any(c.strip() for c in cells):
                    start = reader.line_num + 1
                    continue
                header = [c.strip() for c in cells]
                _check_header(header, path, start)
            elif cells:
                if len(cells) > len(header):
                    raise InputError(
                        path,
                        f"{len(cells)} cells but the header names {len(header)} columns; "
                        "quote cells that hold the delimiter, or name every column",
                        line=start,
                    )
                rows.append((start, dict(zip(header, cells, strict=False))))
            start = reader.line_num + 1
    except csv.Error as exc:
        msg = str(exc)
        if "field larger than field limit" in msg:
            msg = f"a cell is longer than {MAX_CELL_CHARS:,} characters"
        raise InputError(path, f"invalid CSV: {msg}", line=reader.line_num) from None
    return header, rows


def _check_header(header: list[str], path: str | Path, line: int) -> None:
    seen: set[str] = set()
    for i, name in enumerate(header, start=1):
        if not name:
            raise InputError(path, f"header column {i} has no name; name it", line=line)
        if name in seen:
            raise InputError(
                path,
                f"the header names column {name!r} twice; rename or drop one",
                line=line,
            )
        seen.add(name)


# --------------------------------------------------------------------------- outputs


def check_output_file(path: str | Path, *, option: str = "--out") -> Path:
    """``path`` if a file can be written there: checked BEFORE a command commits anything,
    so that a bad output path never leaves the store changed and the command failed.
    Refused (``ValueError`` naming ``option``): an existing directory, FIFO or device, a
    parent that is a file, a parent directory this process cannot write."""
    p = Path(path)
    if p.exists() or p.is_symlink():
        try:
            st = p.stat()
        except OSError as exc:
            raise ValueError(f"{option} {p}: cannot write: {exc.strerror or exc}") from None
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(
                f"{option} {p}: is {_kind(st.st_mode)}; give a file path (it is written whole)"
            )
        if not os.access(p, os.W_OK):
            raise ValueError(f"{option} {p}: cannot write: permission denied")
        return p
    parent = p.parent
    while not parent.exists():  # the nearest existing ancestor decides (mkdir -p)
        if parent == parent.parent:
            break
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        raise ValueError(f"{option} {p}: {parent} is a file, not a directory")
    if parent.exists() and not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{option} {p}: cannot write in {parent}: permission denied")
    return p


# --------------------------------------------------------------------------- names


#: Characters that show as nothing or reorder what follows: zero-width spaces and joiners,
#: the left-to-right/right-to-left marks, embeddings, overrides and isolates, the word
#: joiner and invisible operators, the byte-order mark, the soft hyphen, the Arabic
#: letter mark and the Mongolian vowel separator. In an id or a provenance name they make
#: ``t1`` and ``t1<U+200B>`` two ids, or show a run's name reversed: refused, never
#: silently removed (removing could merge two ids a file keeps apart).
_INVISIBLE = re.compile(
    "[\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"
)


def invisible_character(value: str) -> str | None:
    """Why ``value`` cannot be an id or a name (its first invisible or bidirectional
    control character, by code point and position), or None."""
    m = _INVISIBLE.search(value)
    if m is None:
        return None
    return (
        f"contains an invisible or bidirectional character (U+{ord(m.group()):04X}) at "
        f"character {m.start()}; remove it (ids and names must read as they compare)"
    )
