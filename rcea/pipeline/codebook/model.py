"""Codebook objects, content hashes, blinded items and seeded batch plans.

A codebook belongs to one question. Its modes have stable ids (``m1``, ``m2``, ...): a new
version only ever adds modes, so an id keeps its meaning across versions.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rcea.pipeline.llm import canonical_json

NEW = "NEW"
NONE = "NONE"
INVALID = "INVALID"
"""a pass produced no usable answer for the item (failed call, malformed or unknown id)"""
UNCERTAIN = "uncertain"
SPECIAL_LABELS = (NEW, NONE)


class CodebookError(ValueError):
    """A request that would break a codebook rule (frozen, unknown mode, duplicate name)."""


class Mode(BaseModel):
    """One solution mode: a decisive method and core sequence of operations."""

    model_config = ConfigDict(extra="forbid")

    id: str
    name: str = Field(min_length=1)
    criterion: str = ""
    examples: list[str] = Field(default_factory=list)
    """trajectory ids the mode was induced from (researchers' reference; never prompted)"""
    note: str | None = None
    """provenance of the definition, e.g. ``split from m2`` or ``extension #3``"""

    def prompt_dict(self) -> dict[str, str]:
        return {"id": self.id, "name": self.name, "criterion": self.criterion}


@dataclass(frozen=True)
class Candidate:
    """A candidate mode from one induction batch."""

    name: str
    criterion: str
    examples: tuple[str, ...] = ()


@dataclass(frozen=True)
class BlindItem:
    """What a prompt may show of a trajectory: an opaque per-batch handle and the text."""

    handle: str
    text: str


def modes_to_json(modes: Sequence[Mode]) -> list[dict[str, Any]]:
    return [m.model_dump(exclude_none=True) for m in modes]


def modes_from_json(data: Sequence[dict[str, Any]]) -> list[Mode]:
    return [Mode.model_validate(d) for d in data]


def codebook_hash(question_id: str, modes: Sequence[Mode]) -> str:
    """SHA-256 of the canonical JSON of the question id and its modes (order kept: ids
    are assigned in order)."""
    payload = {"question_id": question_id, "modes": modes_to_json(modes)}
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


def normalise_name(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", name.lower()).strip()


def next_mode_id(modes: Sequence[Mode]) -> str:
    used = [int(m.id[1:]) for m in modes if re.fullmatch(r"m\d+", m.id)]
    return f"m{max(used, default=0) + 1}"


def check_modes(modes: Sequence[Mode]) -> None:
    """Ids unique, names non-empty and unique (ignoring case and punctuation)."""
    ids: set[str] = set()
    names: dict[str, str] = {}
    for m in modes:
        if m.id in ids:
            raise CodebookError(f"mode id {m.id} appears twice")
        if m.id in SPECIAL_LABELS or m.id in (INVALID, UNCERTAIN):
            raise CodebookError(f"{m.id!r} is reserved and cannot be a mode id")
        ids.add(m.id)
        key = normalise_name(m.name)
        if not key:
            raise CodebookError(f"mode {m.id} needs a name")
        if key in names:
            raise CodebookError(f"modes {names[key]} and {m.id} have the same name {m.name!r}")
        names[key] = m.id


def handles(n: int) -> list[str]:
    return [f"T{i}" for i in range(1, n + 1)]


def seeded_rng(*parts: Any) -> random.Random:
    digest = hashlib.sha256(canonical_json([str(p) for p in parts]).encode()).hexdigest()
    return random.Random(int(digest[:16], 16))


def plan_batches(
    ids: Sequence[str], *, batch_size: int, seed: int, salt: Sequence[Any]
) -> list[list[str]]:
    """Shuffle ``ids`` with a generator seeded by ``seed`` and ``salt`` and cut the result
    into batches of at most ``batch_size``, sized evenly. Deterministic: a rerun with the
    same arguments plans the same batches (which is what makes runs resumable)."""
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    order = sorted(ids)
    seeded_rng(seed, *salt).shuffle(order)
    if not order:
        return []
    n_batches = -(-len(order) // batch_size)
    size, extra = divmod(len(order), n_batches)
    out, start = [], 0
    for b in range(n_batches):
        end = start + size + (1 if b < extra else 0)
        out.append(order[start:end])
        start = end
    return out


def batch_key(*parts: Any) -> str:
    return hashlib.sha256(canonical_json([str(p) for p in parts]).encode()).hexdigest()
