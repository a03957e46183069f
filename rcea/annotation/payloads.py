"""Parsing Label Studio annotation JSON (webhook bodies and API exports)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rcea.annotation.display import storable
from rcea.annotation.tasks import NOTE_FIELD, PAIR_CHOICE

LABELS = ("same", "different")


#: Label Studio ids are PostgreSQL INTEGERs there and here: 1 … 2**31 - 1.
MAX_ID = 2**31 - 1
#: Longest note stored (characters); a longer one keeps its first MAX_NOTE characters and
#: ends with a marker giving the full length (docs/labelstudio.md, "Notes").
MAX_NOTE = 10_000
#: The marker appended to a truncated note; ``{n}``: the note's full length in characters.
NOTE_TRUNCATED = " ⟨truncated: {n} characters in all⟩"
#: Deepest nesting accepted in a webhook body or an annotation (Label Studio's own are
#: under 10 levels deep).
MAX_DEPTH = 32


class PayloadError(ValueError):
    """A Label Studio payload without the fields we need, or of the wrong shape."""


@dataclass(frozen=True)
class ParsedAnnotation:
    annotation_id: int
    task_id: int
    project_id: int | None
    user_id: int | None
    label: str | None  # None: no (valid) choice in the result
    note: str | None
    cancelled: bool
    updated_by: int | None = None  # who changed it last (Label Studio's ``updated_by``)
    lead_time: float | None = None  # seconds spent (Label Studio's ``lead_time``)
    created_at: datetime | None = None  # Label Studio's ``created_at`` (UTC)


def _int(value: Any, what: str) -> int:
    """An id: a positive integer below 2**31, or an object ``{"id": …}`` holding one."""
    if isinstance(value, dict):
        value = value.get("id")
    if isinstance(value, bool) or not isinstance(value, int):
        raise PayloadError(f"{what} must be an integer id, got {_short(value)}")
    if not 1 <= value <= MAX_ID:
        raise PayloadError(f"{what} must be an id between 1 and {MAX_ID}, got {_short(value)}")
    return value


def _short(value: Any) -> str:
    """A short repr for error messages: never a whole text."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_depth(obj: Any, *, limit: int = MAX_DEPTH, what: str = "payload") -> None:
    """Raise ``PayloadError`` if ``obj`` nests lists/objects deeper than ``limit``
    (iterative: deep input cannot exhaust the stack here)."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            raise PayloadError(f"{what} is nested deeper than {limit} levels")
        stack.extend((child, depth + 1) for child in children)


def decode_body(raw: bytes) -> Any:
    """JSON from a request body; ``PayloadError`` for anything that is not (invalid UTF-8
    or JSON, numbers beyond Python's digit limit, nesting deep enough to exhaust the
    parser)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        # The decoder's messages give positions and codecs, never the body's text.
        raise PayloadError(f"body is not JSON: {str(exc)[:200]}") from None


def _strings(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PayloadError(f"{what} must be a list of strings, got {_short(value)}")
    return value


def _note(texts: list[str]) -> str | None:
    """The note as stored: made storable, at most :data:`MAX_NOTE` characters of it, then
    :data:`NOTE_TRUNCATED` with the full length (characters as sent) when it was longer;
    a long text is cut before it is escaped, never copied whole."""
    joined = "\n".join(texts)
    if len(joined) <= MAX_NOTE:
        out = storable(joined)
        if len(out) <= MAX_NOTE:
            return out or None
    head = storable(joined[:MAX_NOTE])[:MAX_NOTE]
    return head + NOTE_TRUNCATED.format(n=len(joined))


def _lead_time(value: Any) -> float | None:
    """Label Studio's ``lead_time``: a finite number ≥ 0, else ``None`` (timing is
    informative only; a missing or odd value never blocks a label)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    v = float(value)
    return v if math.isfinite(v) and v >= 0 else None


def _timestamp(value: Any) -> datetime | None:
    """An ISO 8601 timestamp in UTC (naive ones are taken as UTC), else ``None``."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def parse_annotation(
    ann: dict[str, Any],
    *,
    task_id: int | None = None,
    project_id: int | None = None,
    choice_field: str = PAIR_CHOICE,
    choices: Mapping[str, str] | None = None,
    note_field: str = NOTE_FIELD,
) -> ParsedAnnotation:
    """Extract id, task, annotator, the choice of ``choice_field`` (mapped through
    ``choices``: Label Studio value → stored label; default the pair audit's
    same/different), the text of ``note_field`` and the cancel flag.

    Strict: every shape Label Studio does not send (``result`` not a list of objects,
    ``value`` not an object, ``choices``/``text`` not lists of strings, ids that are not
    integers in 1 … 2**31 - 1, a non-boolean cancel flag, nesting deeper than
    :data:`MAX_DEPTH`) raises ``PayloadError``. A valid choice list that is not exactly
    one allowed value gives ``label=None``. The note is made safe for both stores
    (:func:`~rcea.annotation.display.storable`: NUL and other control characters as
    ``⟨U+XXXX⟩``)."""
    if not isinstance(ann, dict):
        raise PayloadError(f"annotation must be a JSON object, got {_short(ann)}")
    check_depth(ann, what="annotation")
    allowed = choices if choices is not None else {v: v for v in LABELS}
    label: str | None = None
    note: str | None = None
    result = ann.get("result")
    if result is None:
        result = []
    if not isinstance(result, list):
        raise PayloadError(f"annotation.result must be a list, got {_short(result)}")
    for n, item in enumerate(result):
        where = f"annotation.result[{n}]"
        if not isinstance(item, dict):
            raise PayloadError(f"{where} must be an object, got {_short(item)}")
        name = item.get("from_name")
        if name is not None and not isinstance(name, str):
            raise PayloadError(f"{where}.from_name must be a string, got {_short(name)}")
        value = item.get("value")
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise PayloadError(f"{where}.value must be an object, got {_short(value)}")
        if name == choice_field:
            picked = _strings(value.get("choices"), f"{where}.value.choices")
            if len(picked) == 1 and picked[0] in allowed:
                label = allowed[picked[0]]
        elif name == note_field:
            note = _note(_strings(value.get("text"), f"{where}.value.text"))
    cancelled = ann.get("was_cancelled")
    if cancelled is not None and not isinstance(cancelled, bool):
        raise PayloadError(f"annotation.was_cancelled must be a boolean, got {_short(cancelled)}")
    task = ann.get("task") if ann.get("task") is not None else task_id
    project = ann.get("project") if ann.get("project") is not None else project_id
    return ParsedAnnotation(
        annotation_id=_int(ann.get("id"), "annotation.id"),
        task_id=_int(task, "annotation.task"),
        project_id=None if project is None else _int(project, "annotation.project"),
        user_id=None
        if ann.get("completed_by") is None
        else _int(ann.get("completed_by"), "annotation.completed_by"),
        label=label,
        note=note,
        cancelled=bool(ann.get("was_cancelled")),
        updated_by=None
        if ann.get("updated_by") is None
        else _int(ann.get("updated_by"), "annotation.updated_by"),
        lead_time=_lead_time(ann.get("lead_time")),
        created_at=_timestamp(ann.get("created_at")),
    )
