"""The output directory's manifest: probe-set seed and finished units (resume).

``DIR/manifest.json``::

    {"probe_seed": 2027, "question_source": "toy:probe",
     "done": {"sample":   {"<checkpoint label>": ["<question_id>", ...]},
              "entropy":  {...}, "covariance": {"<transition>": [...]},
              "greedy":   {"<label>/<set>": [...]}, "passk": {"<label>/<set>": [...]}},
     "questions": [every question id sampled here, first-use order],
     "sample_settings": {"k", "temperature", "top_p", "max_new_tokens"},
     "covariance_settings": {...}, "bench_settings": {...}}

A unit (stage, group, question) is marked done only after its outputs were written and
flushed; the manifest itself is replaced atomically (write + rename), so an interruption
leaves either the old or the new manifest. Opening a directory whose manifest has another
probe-set seed (or question source) raises :class:`ProbeSetMismatch`, and so does a stage
run with other settings than those it recorded (``require_settings``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MANIFEST_FILE = "manifest.json"


class ProbeSetMismatch(ValueError):
    """Records from a different probe-set seed would be mixed into one directory/study."""


class Manifest:
    """Done-units bookkeeping for one output directory."""

    def __init__(self, out_dir: str | Path, *, probe_seed: int, question_source: str) -> None:
        self.dir = Path(out_dir)
        self.path = self.dir / MANIFEST_FILE
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if data.get("probe_seed") != probe_seed:
                raise ProbeSetMismatch(
                    f"{self.path}: this directory holds the probe set with seed "
                    f"{data.get('probe_seed')}; refusing to mix in seed {probe_seed} "
                    "(use another --out)"
                )
            if data.get("question_source") != question_source:
                raise ProbeSetMismatch(
                    f"{self.path}: this directory probes {data.get('question_source')!r}; "
                    f"refusing to mix in {question_source!r} (use another --out)"
                )
            self.data: dict[str, Any] = data
        else:
            self.data = {"probe_seed": probe_seed, "question_source": question_source, "done": {}}
            self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.path)

    def done(self, stage: str, group: str) -> set[str]:
        return set(self.data["done"].get(stage, {}).get(group, []))

    def mark(self, stage: str, group: str, units: Iterable[str]) -> None:
        """Record ``units`` of (stage, group) as finished and save."""
        cur = self.data["done"].setdefault(stage, {}).setdefault(group, [])
        seen = set(cur)
        cur.extend(u for u in units if u not in seen)
        self.save()

    def require_settings(
        self, stage: str, settings: dict[str, Any], legacy: dict[str, Any] | None = None
    ) -> None:
        """Record ``settings`` of ``stage`` the first time; afterwards refuse others, so one
        directory never mixes units computed with different settings. ``legacy``: the values
        that settings added later had before they existed (a directory recorded without them
        still resumes when they are unchanged)."""
        key = f"{stage}_settings"
        before = self.data.get(key)
        if before is None:
            self.set_info(key, settings)
            return
        old = {**(legacy or {}), **before}
        changed = [
            f"{k}={old.get(k)!r} (now {v!r})" for k, v in settings.items() if old.get(k) != v
        ]
        if changed:
            raise ProbeSetMismatch(
                f"{self.path}: `{stage}` ran here with {', '.join(changed)}; refusing to mix "
                "results of different settings in one directory (use another --out)"
            )

    def set_info(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.save()


def append_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """Append rows and fsync, so a unit is on disk before the manifest says it is done."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def keep_done_rows(path: Path, keep: Any) -> list[dict[str, Any]]:
    """Drop rows of unfinished units (``keep(row)`` false), e.g. after a crash between the
    append and the manifest update; rewrites the file atomically and returns the rows."""
    rows = read_jsonl(path)
    kept = [r for r in rows if keep(r)]
    if len(kept) != len(rows):
        write_jsonl(path, kept)
    return kept


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """Replace ``path`` atomically with ``rows``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    os.replace(tmp, path)
