"""Small helpers shared by the estimator modules: JSON-safe conversion of results,
canonical grouping of rows by question, and stable per-question seeds."""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Hashable, Iterable
from typing import Any

import numpy as np

QuestionId = str | int


def jsonable(value: Any) -> Any:
    """Convert ``value`` into plain JSON types.

    Dataclasses become dicts (fields in declaration order, or their own ``to_dict``),
    numpy scalars/arrays become Python numbers/lists, tuples and sets become lists,
    mapping keys become strings, and non-finite floats become ``None`` (JSON has no
    NaN; an undefined estimate is reported as ``None``, never as 0 or NaN); ``-0.0``
    becomes ``0.0``.
    """
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        f = float(value)
        # + 0.0 turns -0.0 into 0.0: a reported zero has no sign
        return f + 0.0 if math.isfinite(f) else None
    if isinstance(value, np.ndarray):
        return [jsonable(v) for v in value.tolist()]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        to_dict = getattr(value, "to_dict", None)
        if callable(to_dict):
            return to_dict()
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    raise TypeError(f"cannot convert {type(value).__name__} to JSON")


#: Above this share of degenerate bootstrap replicates a result carries a warning.
DEGENERATE_WARN_SHARE = 0.01


def bootstrap_health(
    n_degenerate: int, n_boot: int, *, n_units: int | None, what: str
) -> dict[str, Any]:
    """Top-level bootstrap diagnostics of a result with a CI: ``n_boot_degenerate`` (the
    replicates left out of the percentile interval), its share, and ``warnings`` — one
    when that share exceeds 1 % (the interval then rests on a selected subset of
    replicates) and one when a single resampling unit makes the interval zero-width."""
    share = n_degenerate / n_boot if n_boot else 0.0
    warnings = []
    if share > DEGENERATE_WARN_SHARE:
        warnings.append(
            f"{n_degenerate} of {n_boot} bootstrap replicates ({100 * share:.1f}%) were "
            f"degenerate and left out of the {what} interval"
        )
    if n_units == 1:
        warnings.append(
            f"only one eligible question: the {what} interval has zero width and says "
            "nothing about uncertainty"
        )
    return {
        "n_boot_degenerate": n_degenerate,
        "boot_degenerate_share": share,
        "warnings": warnings,
    }


def dataclass_dict(obj: Any, *, skip: Iterable[str] = ()) -> dict[str, Any]:
    """JSON-safe dict of a dataclass's fields (minus ``skip``)."""
    skipped = set(skip)
    return {
        f.name: jsonable(getattr(obj, f.name))
        for f in dataclasses.fields(obj)
        if f.name not in skipped
    }


def _qid_sort_key(q: QuestionId) -> tuple[int, Any]:
    return (1, q) if isinstance(q, str) else (0, q)


def check_question_id(q: Any, name: str = "question_ids") -> QuestionId:
    """Return ``q`` as a Python ``str`` or ``int`` question id, else raise ``ValueError``."""
    if isinstance(q, np.generic):
        q = q.item()
    if isinstance(q, bool) or not isinstance(q, str | int):
        raise ValueError(f"{name}: a question id must be a str or an int, got {q!r}")
    return q


def sorted_question_ids(ids: Iterable[Hashable], name: str = "question_ids") -> list[QuestionId]:
    """Canonical question order (ints first, then strings, each ascending). Every
    estimator works in this order, so results never depend on the order of the rows."""
    checked = {check_question_id(q, name) for q in ids}
    return sorted(checked, key=_qid_sort_key)


def group_questions(
    question_ids: Any, name: str = "question_ids"
) -> tuple[list[QuestionId], np.ndarray[Any, Any]]:
    """Return ``(unique_ids, inverse)``: the questions in canonical order and, per row,
    the position of its question in that list."""
    raw = question_ids.tolist() if isinstance(question_ids, np.ndarray) else list(question_ids)
    if not raw:
        raise ValueError(f"{name} is empty")
    rows = [check_question_id(q, name) for q in raw]
    unique = sorted(set(rows), key=_qid_sort_key)
    index = {q: i for i, q in enumerate(unique)}
    inverse = np.fromiter((index[q] for q in rows), dtype=np.intp, count=len(rows))
    return unique, inverse


def question_seed_words(question_id: QuestionId) -> list[int]:
    """Two 32-bit words derived from the question id (SHA-256 of its type and value):
    per-question random streams then do not depend on which other questions exist."""
    tag = f"{type(question_id).__name__}:{question_id}".encode()
    digest = hashlib.sha256(tag).digest()
    return [int.from_bytes(digest[:4], "little"), int.from_bytes(digest[4:8], "little")]


def check_seed(seed: Any, name: str = "seed") -> int:
    """Raise unless ``seed`` is a non-negative integer."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {seed!r}")
    return int(seed)


def check_confidence(confidence: Any) -> float:
    """Raise unless ``confidence`` is a number strictly between 0 and 1."""
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, int | float | np.floating)
        or not 0.0 < float(confidence) < 1.0
    ):
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence!r}")
    return float(confidence)


def percentile_interval(
    replicates: np.ndarray[Any, Any], confidence: float
) -> tuple[float | None, float | None]:
    """Percentile bootstrap interval: the (1−c)/2 and (1+c)/2 quantiles of the finite
    replicates (linear interpolation); ``(None, None)`` when none is finite."""
    finite = replicates[np.isfinite(replicates)]
    if finite.size == 0:
        return None, None
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(finite, [alpha, 1.0 - alpha])
    return float(lo), float(hi)
