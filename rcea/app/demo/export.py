"""The records behind a demo report, as an interchange file (``records-final.jsonl``).

One line per trajectory of the study, in the record schema (docs/record-schema.md),
with ``validity`` as stored by the judge and ``mode`` from the partition the report's mode
numbers rest on: the trajectory's mode there, ``uncertain`` when that partition has it
without a mode, and absent (null) when it is not in the partition (R = 0 or not
judge-accepted). ``rcea stats entropy|retention`` on this file computes the same numbers
as the report from the same rows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rcea.study.pair_audit.freeze import partition_modes
from rcea.study.store import require_study, session_scope
from rcea.study.store.repository import study_trajectories

FIELDS = (
    "trajectory_id",
    "question_id",
    "text",
    "reward",
    "run",
    "model",
    "step",
    "seed",
    "mean_token_entropy",
    "n_tokens",
    "seq_logprob",
    "answer",
    "validity",
    "split",
)
UNCERTAIN = "uncertain"


def export_records(engine: Any, *, study: str, partition_id: int | None, path: Path) -> int:
    """Write the study's records to ``path`` in the store's (ingest) order — the order the
    report reads them in, which seeded draws such as rarefaction depend on; returns the
    count."""
    with session_scope(engine) as s:
        st = require_study(s, name=study)
        modes = partition_modes(s, partition_id=partition_id) if partition_id else {}
        rows = study_trajectories(s, study_id=st.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".jsonl.tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            for t in rows:
                rec = {f: getattr(t, f) for f in FIELDS if getattr(t, f) is not None}
                if partition_id is None:
                    mode = t.mode
                elif t.trajectory_id in modes:
                    mode = modes[t.trajectory_id][1] or UNCERTAIN
                else:
                    mode = None
                if mode is not None:
                    rec["mode"] = mode
                fh.write(json.dumps(rec) + "\n")
        tmp.replace(path)
        return len(rows)
