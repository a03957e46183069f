"""The demo's state file: which steps have finished, so that a re-run skips them.

``<data_dir>/demo/<study>/state.json`` (one per demo study)::

    {"version": 1, "size": "quick", "simulate": true, "study": "toy-quick-sim",
     "seed": 0, "created_at": "...", "sizes": {every DemoSizes field},
     "steps": {"base": {"done": true, "seconds": 41.2, "finished_at": "...",
                        "result": {...}}, ...}}

Written atomically (temporary file, then rename) after every step, so an interrupted run
loses at most the step in progress. ``--fresh`` removes the directory and starts again
under a new study name (the store is append-only: a study's frozen records are never
deleted, so a fresh run cannot reuse the name).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

STATE_VERSION = 1


class DemoStateError(ValueError):
    """A state file that cannot be used (corrupt, or made with other options)."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class DemoState:
    path: Path
    size: str
    simulate: bool
    study: str
    seed: int
    created_at: str = field(default_factory=_now)
    sizes: dict[str, Any] = field(default_factory=dict)
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> DemoState | None:
        """The state at ``path``, or None when there is none."""
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("version") != STATE_VERSION:
                raise DemoStateError(f"{path}: state version {data.get('version')!r} unknown")
            return cls(
                path=path,
                size=str(data["size"]),
                simulate=bool(data["simulate"]),
                study=str(data["study"]),
                seed=int(data["seed"]),
                created_at=str(data.get("created_at", "")),
                sizes=dict(data.get("sizes", {})),
                steps=dict(data.get("steps", {})),
            )
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise DemoStateError(
                f"{path}: unreadable demo state ({exc}); rerun with --fresh to start over"
            ) from None

    def is_done(self, step: str) -> bool:
        return bool(self.steps.get(step, {}).get("done"))

    def result(self, step: str) -> dict[str, Any]:
        return dict(self.steps.get(step, {}).get("result") or {})

    def mark_done(self, step: str, *, seconds: float, result: dict[str, Any]) -> None:
        self.steps[step] = {
            "done": True,
            "seconds": round(seconds, 2),
            "finished_at": _now(),
            "result": result,
        }
        self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "version": STATE_VERSION,
            "size": self.size,
            "simulate": self.simulate,
            "study": self.study,
            "seed": self.seed,
            "created_at": self.created_at,
            "sizes": self.sizes,
            "steps": self.steps,
        }
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
        os.replace(tmp, self.path)
