"""On-disk response cache keyed by the content hash of a request.

A resumed run repeats no finished call: every reply is written here by the thread that
received it, before anything else happens to it.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from rcea.pipeline.safety import private_dir


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_fingerprint(
    *,
    model: str,
    messages: list[dict[str, Any]],
    temperature: float | None,
    seed: int | None,
    response_format: dict[str, Any] | None,
    max_tokens: int | None = None,
) -> str:
    """SHA-256 of everything that determines a chat-completion reply (never the key or URL).

    The fake server in the tests computes the same fingerprint from the request body.
    """
    payload = {
        "model": model,
        "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
        "temperature": temperature,
        "seed": seed,
        "response_format": response_format,
        "max_tokens": max_tokens,
    }
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


#: Bits of a packed index value that hold the byte offset (the rest: the segment number).
_OFFSET_BITS = 40


def _digest(key: str) -> int:
    """64-bit digest of a cache key: the index's key (an int, not the 64-char string)."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "big")


class _Index:
    """Key digest → packed location, compact: two sorted numpy arrays (16 bytes an entry)
    for what was loaded or merged, plus a dict of the latest puts (≈ 100 bytes an entry)
    merged into the arrays every :data:`MERGE_AT` puts. A later entry for a digest wins."""

    MERGE_AT = 65_536

    def __init__(self) -> None:
        self.digests = np.empty(0, dtype=np.uint64)
        self.where = np.empty(0, dtype=np.int64)
        self.recent: dict[int, int] = {}

    def __len__(self) -> int:
        self.merge()
        return len(self.digests)

    def get(self, digest: int) -> int | None:
        hit = self.recent.get(digest)
        if hit is not None:
            return hit
        d = np.uint64(digest)
        i = int(np.searchsorted(self.digests, d))
        if i < len(self.digests) and self.digests[i] == d:
            return int(self.where[i])
        return None

    def set(self, digest: int, where: int) -> None:
        self.recent[digest] = where
        if len(self.recent) >= self.MERGE_AT:
            self.merge()

    def merge(self) -> None:
        """Fold the recent puts into the sorted arrays (the later entry of a digest wins)."""
        if not self.recent:
            return
        n = len(self.recent)
        digests = np.concatenate(
            [self.digests, np.fromiter(self.recent.keys(), dtype=np.uint64, count=n)]
        )
        where = np.concatenate([self.where, np.fromiter(self.recent.values(), np.int64, n)])
        self.recent = {}
        order = np.argsort(digests, kind="stable")  # equal digests keep their order
        digests, where = digests[order], where[order]
        del order
        last = np.ones(len(digests), dtype=bool)
        last[:-1] = digests[1:] != digests[:-1]
        self.digests, self.where = digests[last], where[last]


class ResponseCache:
    """Append-only JSON-lines segments under ``root``: one segment per process, one
    ``write`` per entry (so an entry is in the kernel, safe from ``kill -9``, the moment
    ``put`` returns), an in-memory index loaded from every segment on first use. A torn
    last line (a crash mid-write) is ignored. Later entries for a key win.

    The index holds where each entry lies, not the entry: a 64-bit digest of the key →
    segment number and byte offset packed in one int, kept in sorted arrays
    (:class:`_Index`: ≈ 16 bytes per reply, where a dict of key strings and tuples cost
    ≈ 220). ``get`` reads the entry back from disk and checks its stored key, so two keys
    with the same digest cost a repeated call (a miss), never a wrong reply."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._index: _Index | None = None
        self._paths: list[Path] = []
        self._lock = threading.Lock()
        self._segment: int | None = None
        """this process's segment (a raw file descriptor, opened append-only)"""
        self._segment_path: Path | None = None
        self._offset = 0

    def _scan(self, keys: set[str] | None = None) -> _Index:
        """The index of every segment on disk (and every key into ``keys``)."""
        index = _Index()
        paths = sorted(self.root.glob("*.jsonl"))
        for no, path in enumerate(paths):
            with path.open("rb") as fh:
                offset = 0
                for line in fh:
                    at, offset = offset, offset + len(line)
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        continue  # torn write
                    if isinstance(entry, dict) and isinstance(entry.get("key"), str):
                        index.set(_digest(entry["key"]), (no << _OFFSET_BITS) | at)
                        if keys is not None:
                            keys.add(entry["key"])
        index.merge()
        self._paths = paths
        return index

    def _load(self) -> _Index:
        if self._index is None:
            self._index = self._scan()
        return self._index

    def _read(self, where: int, key: str) -> dict[str, Any] | None:
        no, offset = where >> _OFFSET_BITS, where & ((1 << _OFFSET_BITS) - 1)
        with self._paths[no].open("rb") as fh:
            fh.seek(offset)
            entry: dict[str, Any] = json.loads(fh.readline())
        if entry.get("key") != key:  # another key with the same digest: a miss
            return None
        entry.pop("messages", None)  # on disk for audit; not needed here
        return entry

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            where = self._load().get(_digest(key))
            return None if where is None else self._read(where, key)

    def put(self, key: str, entry: dict[str, Any]) -> None:
        line = (canonical_json({**entry, "key": key}) + "\n").encode("utf-8")
        with self._lock:
            index = self._load()
            if self._segment is None:
                private_dir(self.root)
                name = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
                path = self.root / f"{name}.jsonl"
                # owner-only (0600): the cache holds every prompt and reply
                self._segment = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                self._segment_path = path
                self._paths.append(path)
                self._offset = 0
            assert self._segment_path is not None
            view = memoryview(line)
            while view:  # one write(2) per entry (a regular file takes it whole)
                view = view[os.write(self._segment, view) :]
            no = self._paths.index(self._segment_path)
            index.set(_digest(key), (no << _OFFSET_BITS) | self._offset)
            self._offset += len(line)

    def keys(self) -> set[str]:
        """Every key on disk now (re-read: other processes may have written)."""
        with self._lock:
            keys: set[str] = set()
            self._index = self._scan(keys)
            return keys

    def close(self) -> None:
        with self._lock:
            if self._segment is not None:
                os.close(self._segment)
                self._segment = None
