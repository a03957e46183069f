"""Content safety for what annotators see and for what the stores keep.

Texts come from models and from people, so they may carry characters that change how a
page looks without being visible themselves. Before anything is placed into a Label
Studio task, :func:`visible` shows them instead of applying them:

- bidirectional controls (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C), which
  would reorder what follows them (``\\u202eevil`` reads as "live");
- zero-width and other invisible format characters (U+200B–U+200D, U+2060, U+FEFF,
  U+00AD, every other Unicode ``Cf`` character, the Hangul fillers, U+034F and the
  variation selectors);
- control characters (C0, DEL, C1) other than ``\\n`` and ``\\t`` (a ``\\r\\n`` line end
  becomes ``\\n``), and lone surrogates;

each as ``⟨U+XXXX⟩`` (at least four upper-case hex digits). Then every run of more than
:data:`WRAP_WIDTH` characters without a breakable space is cut into lines of at most
:data:`WRAP_WIDTH` characters, each cut line ending in :data:`SOFT_BREAK` (``↩`` and a
line break), so one 1 MB line cannot push the second solution off-screen. The result is
idempotent: ``visible(visible(t)) == visible(t)``.

Label configs are XML: :func:`xml_attr` escapes a value for a double-quoted attribute
(``& < > " '`` and the line breaks and tabs, which XML would otherwise fold into
spaces). :func:`storable` makes free text (annotators' notes) safe for both stores:
PostgreSQL refuses NUL in text and JSON, and lone surrogates in UTF-8.
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache

#: Longest run of characters without a breakable space that a task shows on one line.
WRAP_WIDTH = 120
#: Ends every line that :func:`visible` cut (not a line break of the original text).
SOFT_BREAK = "↩\n"

BIDI_CONTROLS = frozenset([0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)])
#: Invisible characters outside the ``Cf`` category.
_INVISIBLE_OTHER = (
    0x034F,  # combining grapheme joiner
    0x115F,
    0x1160,
    0x3164,
    0xFFA0,  # Hangul fillers
    *range(0xFE00, 0xFE10),  # variation selectors
    *range(0xE0100, 0xE01F0),  # variation selectors supplement
)
#: Spaces a browser may break a line at (no-break spaces U+00A0, U+2007, U+202F excluded).
_BREAKABLE = " \t\n\u1680\u2000-\u2006\u2008-\u200a\u205f\u3000"
_MARKER = re.compile(r"⟨U\+[0-9A-F]{4,6}⟩")
_LONG_RUN = re.compile(f"[^{_BREAKABLE}]{{{WRAP_WIDTH + 1},}}")
_TOKEN = re.compile(r"⟨U\+[0-9A-F]{4,6}⟩|.", re.DOTALL)


def marker(ch: str) -> str:
    """``⟨U+202E⟩`` for ``"\\u202e"``."""
    return f"⟨U+{ord(ch):04X}⟩"


def _class(code_points: list[int]) -> str:
    """A regex character class for ``code_points`` (sorted), as ranges."""
    parts: list[str] = []
    start = prev = code_points[0]
    for cp in [*code_points[1:], -2]:
        if cp == prev + 1:
            prev = cp
            continue
        parts.append(f"\\U{start:08x}" if start == prev else f"\\U{start:08x}-\\U{prev:08x}")
        start = prev = cp
    return "[" + "".join(parts) + "]"


def _is_hidden(cp: int) -> bool:
    if cp in (0x09, 0x0A):
        return False
    return unicodedata.category(chr(cp)) in ("Cc", "Cf", "Cs")


@cache
def _hidden_pattern() -> re.Pattern[str]:
    """Every character :func:`visible` shows as a marker (built once, ~30 ms)."""
    # Cf/Cc/Cs characters live in planes 0, 1 and 14 only (checked against the running
    # Python's Unicode database in the tests).
    planes = [*range(0, 0x20000), *range(0xE0000, 0xE1000)]
    hidden = {cp for cp in planes if _is_hidden(cp)}
    hidden |= BIDI_CONTROLS | set(_INVISIBLE_OTHER)
    return re.compile(_class(sorted(hidden)))


@cache
def _storable_pattern() -> re.Pattern[str]:
    # C0 controls except \t \n \r, DEL, C1 controls, surrogates.
    cps = [*range(0, 9), 0x0B, 0x0C, *range(0x0E, 0x20), *range(0x7F, 0xA0)]
    return re.compile(_class(cps) + "|[\ud800-\udfff]")


def _mark(match: re.Match[str]) -> str:
    return marker(match.group())


def _cut(match: re.Match[str]) -> str:
    """Cut one long run into lines of at most WRAP_WIDTH characters (the arrow of
    SOFT_BREAK included), never inside a marker."""
    run = match.group()
    lines: list[str] = []
    line: list[str] = []
    size, rest = 0, len(run)  # rest: characters not placed yet
    for tok in _TOKEN.findall(run):
        if size + rest <= WRAP_WIDTH:
            break
        if size + len(tok) > WRAP_WIDTH - 1:  # room for the arrow
            lines.append("".join(line))
            line, size = [], 0
            if rest <= WRAP_WIDTH:
                break
        line.append(tok)
        size += len(tok)
        rest -= len(tok)
    line.append(run[len(run) - rest :])
    return SOFT_BREAK.join([*lines, "".join(line)])


def marked(text: str) -> str:
    """``text`` with its hidden characters shown as ``⟨U+XXXX⟩`` but long lines left
    whole: the input of :func:`rcea.annotation.render.render` (a cut would break a formula;
    the rendered column wraps and scrolls instead)."""
    return _hidden_pattern().sub(_mark, text.replace("\r\n", "\n"))


def visible(text: str) -> str:
    """``text`` as an annotator should see it (see the module docstring)."""
    return _LONG_RUN.sub(_cut, marked(text))


def strip_display_marks(text: str) -> str:
    """``text`` without soft breaks and markers: what a reader may piece together from
    :func:`visible`'s output (the blinding scan checks this too)."""
    return _MARKER.sub("", text.replace(SOFT_BREAK, ""))


def storable(text: str) -> str:
    """``text`` with NUL, the other control characters except ``\\t \\n \\r``, and lone
    surrogates shown as ``⟨U+XXXX⟩``: accepted by SQLite and PostgreSQL alike."""
    return _storable_pattern().sub(_mark, text)


_XML_ATTR = {
    "&": "&amp;",
    "<": "&lt;",
    ">": "&gt;",
    '"': "&quot;",
    "'": "&apos;",
    "\n": "&#10;",
    "\r": "&#13;",
    "\t": "&#9;",
}
_XML_ATTR_RE = re.compile("[&<>\"'\n\r\t]")
# Characters XML 1.0 forbids even as references: C0 controls except \t \n \r,
# surrogates, U+FFFE and U+FFFF.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_attr(value: str) -> str:
    """``value`` escaped for a double-quoted XML attribute; parsing the attribute gives
    ``value`` back exactly, except that characters XML 1.0 cannot hold at all become
    ``⟨U+XXXX⟩``."""
    value = _XML_ILLEGAL.sub(_mark, value)
    return _XML_ATTR_RE.sub(lambda m: _XML_ATTR[m.group()], value)


def config_text(value: str) -> str:
    """A text shown inside a label config (a rubric definition, instructions): made
    visible like task texts, then escaped for an XML attribute."""
    return xml_attr(visible(value))


__all__ = [
    "BIDI_CONTROLS",
    "SOFT_BREAK",
    "WRAP_WIDTH",
    "config_text",
    "marked",
    "marker",
    "storable",
    "strip_display_marks",
    "visible",
    "xml_attr",
]
