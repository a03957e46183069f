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

from pipeline.safety import private_dir


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


class ResponseCache:
    """Append-only JSON-lines segments under ``root``: one segment per process, one
    ``write`` per entry (so an entry is in the kernel, safe from ``kill -9``, the moment
    ``put`` returns), an in-memory index loaded from every segment on first use. A torn
    last line (a crash mid-write) is ignored. Later entries for a key win."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._index: dict[str, dict[str, Any]] | None = None
        self._lock = threading.Lock()
        self._segment: Any = None

    def _load(self) -> dict[str, dict[str, Any]]:
        if self._index is None:
            index: dict[str, dict[str, Any]] = {}
            for path in sorted(self.root.glob("*.jsonl")):
                with path.open(encoding="utf-8") as fh:
                    for line in fh:
                        try:
                            entry = json.loads(line)
                        except ValueError:
                            continue  # torn write
                        if isinstance(entry, dict) and "key" in entry:
                            entry.pop("messages", None)  # on disk for audit; not needed here
                            index[entry["key"]] = entry
            self._index = index
        return self._index

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            return self._load().get(key)

    def put(self, key: str, entry: dict[str, Any]) -> None:
        line = canonical_json({**entry, "key": key}) + "\n"
        with self._lock:
            index = self._load()
            if self._segment is None:
                private_dir(self.root)
                name = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
                # owner-only (0600): the cache holds every prompt and reply
                fd = os.open(self.root / f"{name}.jsonl", os.O_WRONLY | os.O_CREAT, 0o600)
                self._segment = open(  # noqa: SIM115 - held open for the cache's lifetime
                    fd, "a", encoding="utf-8", buffering=1
                )
            self._segment.write(line)  # line-buffered: one write(2) per entry
            index[key] = {k: v for k, v in entry.items() if k != "messages"} | {"key": key}

    def keys(self) -> set[str]:
        """Every key on disk now (re-read: other processes may have written)."""
        with self._lock:
            self._index = None
            return set(self._load())

    def close(self) -> None:
        with self._lock:
            if self._segment is not None:
                self._segment.close()
                self._segment = None
