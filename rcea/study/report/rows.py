"""The trajectory rows a report is computed from, one checkpoint at a time.

:func:`rcea.study.report.compute.compute_report_from` reads rows through a :class:`CheckpointRows`
source: :class:`MemoryRows` over a bundle's ``inputs.json`` rows (``rcea report verify``,
``rcea report publish``) and :class:`StoreRows` over the store (``rcea report build``).
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
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from sqlalchemy import and_
from sqlmodel import Session, select

from rcea.study.report.replicates import check_labels, seeded_run
from rcea.study.store.models import JudgeVerdict, PartitionAssignment, Trajectory

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

#: Rows per page when the record-set hash streams from the store.
HASH_PAGE = 20_000


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


class StoreRows:
    """A study's rows read from the store one checkpoint at a time.

    ``partition_id``: the partition the mode numbers rest on (its assignment joined as
    ``in_partition``/``partition_mode``); ``judge_id``: the production judge (its verdict
    joined), ``None`` when validity comes from the column."""

    def __init__(
        self,
        session: Session,
        *,
        study_id: int,
        partition_id: int | None,
        judge_id: int | None,
    ) -> None:
        self.session = session
        self.study_id = study_id
        self.partition_id = partition_id
        self.judge_id = judge_id
        self.judged = judge_id is not None
        stmt = (
            select(Trajectory.run, Trajectory.train_seed, Trajectory.model, Trajectory.step)
            .where(Trajectory.study_id == self.study_id)
            .distinct()
        )
        self._stored = list(session.exec(stmt).all())
        self._identities = check_labels((r, t) for r, t, _, _ in self._stored)

    def checkpoint_keys(self) -> list[Key]:
        return sorted({(seeded_run(r, t), m, s) for r, t, m, s in self._stored})

    def run_identities(self) -> dict[str, tuple[str, int]]:
        return dict(self._identities)

    def checkpoint(self, key: Key) -> tuple[list[dict[str, Any]], dict[str, str] | None]:
        label, model, step = key
        run, train_seed = self._identities.get(label, (label, None))
        names = (*COLUMNS, *SAMPLING_COLUMNS, SEED_COLUMN)
        stmt = select(*(getattr(Trajectory, c) for c in names))
        if self.partition_id is not None:
            stmt = stmt.add_columns(
                PartitionAssignment.id.label("pa_id"),  # type: ignore[union-attr]  # SQLModel types a column attribute as its Python value, not as the SQL column
                PartitionAssignment.mode.label("pa_mode"),  # type: ignore[union-attr]  # SQLModel types a column attribute as its Python value, not as the SQL column
            ).outerjoin(
                PartitionAssignment,
                and_(
                    PartitionAssignment.partition_id == self.partition_id,  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
                    PartitionAssignment.trajectory_id == Trajectory.trajectory_id,  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
                ),
            )
        if self.judge_id is not None:
            stmt = stmt.add_columns(JudgeVerdict.verdict.label("jv")).outerjoin(  # type: ignore[attr-defined]  # SQLModel types a column attribute as its Python value, not as the SQL column
                JudgeVerdict,
                and_(
                    JudgeVerdict.judge_id == self.judge_id,  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
                    JudgeVerdict.study_id == self.study_id,  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
                    JudgeVerdict.trajectory_id == Trajectory.trajectory_id,  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
                ),
            )
        seed_col: Any = Trajectory.train_seed
        stmt = stmt.where(
            Trajectory.study_id == self.study_id,
            Trajectory.run == run,
            seed_col.is_(None) if train_seed is None else seed_col == train_seed,
            Trajectory.model == model,
            Trajectory.step == step,
        ).order_by(Trajectory.id)
        rows: list[dict[str, Any]] = []
        verdicts: dict[str, str] | None = {} if self.judged else None
        n = len(names)
        for rec in self.session.exec(stmt):
            row = dict(zip(names, rec[:n], strict=True))
            row["run"] = label
            extra = rec[n:]  # (pa_id, pa_mode) with a partition, then jv with a judge
            if self.partition_id is not None:
                row["in_partition"] = extra[0] is not None
                row["partition_mode"] = extra[1]
                extra = extra[2:]
            if verdicts is not None and extra[0] is not None:
                verdicts[row["trajectory_id"]] = extra[0]
            rows.append(row)
        return rows, verdicts

    def has_verdicts(self) -> bool:
        stmt = (
            select(Trajectory.id)
            .where(
                Trajectory.study_id == self.study_id,
                Trajectory.reward == 1,
                Trajectory.validity.is_not(None),  # type: ignore[union-attr]  # SQLModel types a column attribute as its Python value, not as the SQL column
            )
            .limit(1)
        )
        return self.session.exec(stmt).first() is not None

    def iter_hash_rows(self) -> Iterator[dict[str, Any]]:
        """Every row in trajectory-id order (code-point order on both back ends: the
        ``C`` collation on PostgreSQL), read in pages of :data:`HASH_PAGE`."""
        names = (*COLUMNS, *SAMPLING_COLUMNS, SEED_COLUMN)
        cols: list[Any] = [getattr(Trajectory, c) for c in names]
        tid: Any = Trajectory.trajectory_id
        if self.session.get_bind().dialect.name == "postgresql":
            tid = tid.collate("C")
        stmt = (
            select(*cols)
            .where(Trajectory.study_id == self.study_id)
            .order_by(tid)
            .execution_options(yield_per=HASH_PAGE)
        )
        for rec in self.session.exec(stmt):
            yield dict(zip(names, rec, strict=True))

    def record_set_hash(self) -> str:
        return record_set_hash(self.iter_hash_rows(), ordered=True)


def study_trajectories(session: Session, study_id: int) -> list[dict[str, Any]]:
    """Every trajectory row of the study in ingest order (the bundle's ``rows``)."""
    names = (*COLUMNS, *SAMPLING_COLUMNS, SEED_COLUMN)
    cols = [getattr(Trajectory, c) for c in names]
    # Ingest order (row id): the within-question order fixes the bootstrap and
    # rarefaction draws, so the numbers equal `rcea stats` on the ingested file(s).
    stmt = select(*cols).where(Trajectory.study_id == study_id).order_by(Trajectory.id)
    return [dict(zip(names, row, strict=True)) for row in session.exec(stmt).all()]
