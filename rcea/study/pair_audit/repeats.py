"""Hidden repeats of a pair audit (item 4; docs/sequential-gate.md
"Self-consistency"): the rubric's ``[annotators] repeat_share`` of the pairs is shown a
second time to annotators A and B.

* **How many**: ``k = ⌊share · n + ½⌋`` of the ``n`` pairs (rounded half up); the share is
  at most ½, so ``k ≤ ⌈n/2⌉``.
* **Which**: ``k`` of the first ``n − ⌊n/2⌋`` pairs in task order, drawn with
  ``random.Random(f"{audit.seed}:{audit.id}:repeats")`` — the same pairs for A and B,
  the same on every push (deterministic from the audit's seed).
* **Where**: the repeat of the pair at position ``i`` comes right after the pair at
  position ``i + ⌊n/2⌋``: in the later half of the project, at least ``⌊n/2⌋`` tasks
  after the first showing.
* **What**: a task like any other — the same blinded texts and problem statement, a fresh
  opaque key of the same form as a pair key (``p`` + 16 hex digits, from SHA-256 of the
  audit's seed and the pair key, never equal to a pair key) and so a fresh Label Studio
  task id; its left/right order is drawn again (``same``/``different`` do not depend on
  it). It passes the same leak scan as every task.

The labels given on a repeat are stored with ``repeat = true`` (``audit_label``) and are
left out of every count (:func:`rcea.study.labelling.current_labels`): the gate, the reference,
agreement, adjudication and the sequential looks see each pair once.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from typing import Any, TypeVar

__all__ = ["n_repeats", "repeat_key", "repeat_positions", "self_consistency", "with_repeats"]

T = TypeVar("T")


def n_repeats(n: int, share: float) -> int:
    """How many of ``n`` pairs are repeated: ``⌊share · n + ½⌋``."""
    if n <= 0 or share <= 0:
        return 0
    return min(n - n // 2, math.floor(share * n + 0.5))


def repeat_positions(n: int, share: float, seed: str) -> list[int]:
    """Sorted task-order positions (among the first ``n − ⌊n/2⌋``) of the repeated pairs."""
    k = n_repeats(n, share)
    if k == 0:
        return []
    return sorted(random.Random(f"{seed}:repeats").sample(range(n - n // 2), k))


def repeat_key(seed: str, pair_key: str, taken: set[str]) -> str:
    """A fresh opaque key of the pair key's form for the repeat of ``pair_key``."""
    for i in range(1000):
        digest = hashlib.sha256(f"{seed}:repeat:{pair_key}:{i}".encode()).digest()
        key = f"p{int.from_bytes(digest[:8], 'big') >> 2:016x}"
        if key not in taken:
            return key
    raise RuntimeError("no free repeat key")  # pragma: no cover - 2^-62 per try


def with_repeats(tasks: Sequence[T], repeats: dict[int, T]) -> list[T]:
    """``tasks`` with the repeat of position ``i`` placed right after position
    ``i + ⌊n/2⌋``."""
    h = len(tasks) // 2
    after = {i + h: t for i, t in repeats.items()}
    out: list[T] = []
    for i, t in enumerate(tasks):
        out.append(t)
        if i in after:
            out.append(after[i])
    return out


def self_consistency(first: dict[int, str], second: dict[int, str]) -> dict[str, Any]:
    """Share of repeated pairs a person labelled the same both times: ``first`` and
    ``second`` map pair id → label of the first showing and of the repeat."""
    both = sorted(set(first) & set(second))
    same = sum(first[p] == second[p] for p in both)
    return {
        "n": len(both),
        "same": same,
        "share": same / len(both) if both else None,
    }
