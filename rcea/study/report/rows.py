"""The trajectory rows a report is computed from, one checkpoint at a time.

:func:`rcea.study.report.compute.compute_report_from` reads rows through a :class:`CheckpointRows`
source: :class:`MemoryRows` over a bundle's ``inputs.json`` rows (``rcea report verify``,
``rcea report publish``) and :class:`~rcea.study.report.inputs.StoreRows` over the store
(``rcea report build``; it lives with the other store reads, so that this module and the
report's core import no store).
The store source runs one query per checkpoint (the partition assignment and the
production judge's verdict outer-joined), so ``report build`` holds one checkpoint's rows
at a time, not the study's; the record-set hash is streamed in pages ordered by
trajectory id. Both sources give the same rows in the same (ingest) order, so the two
paths give the same report (tests/study/report/test_report_rows.py).
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable
from typing import Any, Protocol

from rcea.study.report.replicates import check_labels, seeded_run

Key = tuple[str, str, int]

#: The columns every number is computed from (and the record-set hash covers).
COLUMNS = (
    "trajectory_id",
    "question_id",
    "reward",
    "run",
    "model",
    "step",
    "seed",
    "mean_token_entropy",
    "seq_logprob",
    "validity",
    "mode",
)
#: Sampling provenance (docs/estimators.md item 2): hashed only when a row has one (so record-set
#: hashes of studies without them are unchanged).
SAMPLING_COLUMNS = ("truncated", "sampling_temperature", "sampling_top_p", "logprob_temperature")
#: The training seed (docs/estimators.md item 17): part of a run's identity, hashed only when a
#: row has one (studies without training seeds keep their record-set hash).
SEED_COLUMN = "train_seed"


class CheckpointRows(Protocol):
    """Where :func:`rcea.study.report.compute.compute_report_from` reads trajectory rows."""

    #: Whether validity comes from the production judge's verdicts (else the column).
    judged: bool

    def checkpoint_keys(self) -> list[Key]:
        """Every (run, model, step) with a trajectory, sorted; a run with a training seed
        under its seeded label (:func:`rcea.study.report.replicates.seeded_run`)."""
        ...

    def run_identities(self) -> dict[str, tuple[str, int]]:
        """Every seeded run label → (run, training seed)."""
        ...

    def checkpoint(self, key: Key) -> tuple[list[dict[str, Any]], dict[str, str] | None]:
        """The checkpoint's rows in ingest order (with ``in_partition`` and
        ``partition_mode`` when the mode numbers rest on a partition) and, when
        ``judged``, trajectory id → the production judge's verdict for them."""
        ...

    def has_verdicts(self) -> bool:
        """Whether any success carries a validity value (the column)."""
        ...

    def record_set_hash(self) -> str:
        """:func:`record_set_hash` of every row."""
        ...


def _hash_line(r: dict[str, Any]) -> bytes:
    values = [r[c] for c in COLUMNS]
    extra = [r.get(c) for c in SAMPLING_COLUMNS]
    if any(v is not None for v in extra):
        values += extra
    if r.get(SEED_COLUMN) is not None:
        values += [SEED_COLUMN, r[SEED_COLUMN]]
    return json.dumps(values, separators=(",", ":")).encode() + b"\n"


def record_set_hash(rows: Iterable[dict[str, Any]], *, ordered: bool = False) -> str:
    """SHA-256 of the canonical JSON of the trajectory rows (ordered by trajectory id,
    columns ``trajectory_id, question_id, reward, run, model, step, seed,
    mean_token_entropy, seq_logprob, validity, mode``, then ``truncated,
    sampling_temperature, sampling_top_p, logprob_temperature`` for a row that has any of
    them, then ``"train_seed", N`` for a row with a training seed): what every number is
    computed from. Texts are not part of it (no number
    depends on them). ``ordered``: the rows already come in trajectory-id order."""
    h = hashlib.sha256()
    it = rows if ordered else sorted(rows, key=lambda r: r["trajectory_id"])
    for r in it:
        h.update(_hash_line(r))
    return h.hexdigest()


class MemoryRows:
    """Rows already in memory (a bundle's ``inputs["rows"]`` and ``judge_verdicts``)."""

    def __init__(
        self, rows: list[dict[str, Any]], verdicts: dict[str, str] | None, *, judged: bool
    ) -> None:
        self.rows = rows
        self.verdicts = verdicts
        self.judged = judged and verdicts is not None
        self._by_key: dict[Key, list[dict[str, Any]]] = defaultdict(list)
        self._identities = check_labels((r["run"], r.get(SEED_COLUMN)) for r in rows)
        for r in rows:
            seed = r.get(SEED_COLUMN)
            if seed is not None:  # keyed by its seeded label (a copy: the hash reads run)
                r = {**r, "run": seeded_run(r["run"], seed)}
            self._by_key[(r["run"], r["model"], r["step"])].append(r)

    def checkpoint_keys(self) -> list[Key]:
        return sorted(self._by_key)

    def run_identities(self) -> dict[str, tuple[str, int]]:
        return dict(self._identities)

    def checkpoint(self, key: Key) -> tuple[list[dict[str, Any]], dict[str, str] | None]:
        return self._by_key.get(key, []), self.verdicts if self.judged else None

    def has_verdicts(self) -> bool:
        return any(r["reward"] == 1 and r["validity"] is not None for r in self.rows)

    def record_set_hash(self) -> str:
        return record_set_hash(self.rows)
