"""``rcea probe score``: the teacher-forced token entropies, chosen-token log-probs and
``seq_logprob`` of a study's EXISTING trajectories of one (run, model, step) under a
local checkpoint (:mod:`rcea.pipeline.probe.score`), written back to those trajectories, so
that entropy and modes come from the same samples (docs/how-to-verl.md, step 2).

Resumable: trajectories are scored in batches, each committed with its token artifact;
a rerun scores only those still without a mean token entropy. Each finished run appends
a ``probe.score`` event: the measurement's version (1, 2, … per checkpoint), the
checkpoint path, the prompt format and the counts.

Sharded under ``accelerate launch`` (:mod:`rcea.pipeline.probe.shard`, docs/how-to-verl.md):
every rank reads the same selection, waits for the others (so none writes before all
have read), then scores its contiguous block of the batches — the batches a single
process would score, so each trajectory's numbers are the single-process ones — and
commits each batch itself. After the ranks' counts are summed, rank 0 alone appends the
one ``probe.score`` event: one measurement version for the whole launch. A batch any rank
committed is never scored again; an interrupted launch resumes, with any number of
processes, from the trajectories still unscored.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import select, update
from sqlalchemy.engine import Engine
from tqdm import tqdm

from rcea.pipeline.probe.score import ScoreItem
from rcea.pipeline.probe.shard import Shard
from rcea.study import events
from rcea.study.store import (
    Question,
    Trajectory,
    append_event,
    payloads,
    require_study,
    session_scope,
)
from rcea.study.store.artifacts import new_artifact_path, write_token_artifact


@dataclass
class ScoreResult:
    study: str
    run: str
    model: str
    step: int
    n_selected: int
    n_scored: int
    n_already: int
    version: int
    processes: int = 1
    main_process: bool = True
    train_seed: int | None = None

    @property
    def checkpoint(self) -> str:
        seed = "" if self.train_seed is None else f" [train seed {self.train_seed}]"
        return f"{self.run}{seed} {self.model} step {self.step}"

    def summary(self) -> str:
        if not self.n_scored:
            return (
                f"nothing to score: all {self.n_selected} trajectories of {self.checkpoint} "
                "already have token entropies"
            )
        return (
            f"scored {self.n_scored} trajectories of {self.checkpoint} "
            f"({self.n_already} already scored), study {self.study}, version {self.version}"
            + (f", on {self.processes} processes" if self.processes > 1 else "")
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def score_trajectories(
    engine: Engine,
    scorer: Any,
    *,
    study: str,
    run: str,
    model: str,
    step: int,
    artifacts_dir: Path,
    data_dir: Path,
    batch: int = 64,
    actor: str = "rcea probe score",
    progress: bool = False,
    shard: Shard | None = None,
    train_seed: int | None = None,
) -> ScoreResult:
    """Score the unscored trajectories of (run, model, step) and training seed
    ``train_seed`` (None: the selection must hold one training seed or none; two seeds'
    trajectories are two checkpoints' and one checkpoint cannot score both) with ``scorer``
    (:class:`rcea.pipeline.probe.score.Scorer` or anything with ``score(items)`` and
    ``describe()``); ``ValueError`` when none is selected or a question has no text.
    ``shard`` (:func:`rcea.pipeline.probe.shard.current_shard` under a launch) scores this
    rank's block of the batches only; the event is appended by rank 0."""
    shard = shard or Shard()

    with session_scope(engine) as s:
        st = require_study(s, name=study)
        sid = st.id
        rows = s.execute(
            select(  # type: ignore[call-overload]  # SQLModel types a column attribute as its Python value, not as the SQL column
                Trajectory.id,
                Trajectory.trajectory_id,
                Trajectory.question_id,
                Trajectory.text,
                Trajectory.mean_token_entropy,
                Trajectory.train_seed,
            )
            .where(
                Trajectory.study_id == sid,
                Trajectory.run == run,
                Trajectory.model == model,
                Trajectory.step == step,
                *(() if train_seed is None else (Trajectory.train_seed == train_seed,)),
            )
            .order_by(Trajectory.id)
        ).all()
        texts: dict[str, str | None] = dict(
            s.execute(
                select(Question.question_id, Question.text).where(Question.study_id == sid)  # type: ignore[call-overload]  # SQLModel types a column attribute as its Python value, not as the SQL column
            ).all()
        )
        version = 1 + len(payloads(s, events.PROBE_SCORE, sid, run=run, model=model, step=step))
    if not rows:
        seed = "" if train_seed is None else f", training seed {train_seed}"
        raise ValueError(
            f"study {study} has no trajectories of run {run}, model {model}, step {step}{seed}"
        )
    seeds = sorted({r.train_seed for r in rows}, key=lambda v: -1 if v is None else v)
    if len(seeds) > 1:
        raise ValueError(
            f"the trajectories of run {run}, model {model}, step {step} hold training seeds "
            f"{', '.join('none' if v is None else str(v) for v in seeds)}: pass --train-seed "
            "(the checkpoint's; each seed is scored with its own checkpoint)"
        )
    train_seed = seeds[0]
    todo = [r for r in rows if r.mean_token_entropy is None]
    missing = sorted({r.question_id for r in todo if not texts.get(r.question_id)})
    if missing:
        raise ValueError(
            f"{len(missing)} question(s) have no stored text to rebuild the prompt from "
            f"(first: {missing[0]}); import them with their question text"
        )
    # every rank has read the selection before any rank writes (else a fast rank's
    # commits would shrink a slow rank's `todo` and the blocks would overlap or miss)
    shard.barrier()
    mine = shard.split([todo[b0 : b0 + batch] for b0 in range(0, len(todo), batch)])
    n_mine = sum(len(part) for part in mine)
    bar = tqdm(total=n_mine, unit="traj", desc="score", disable=not progress, leave=False)
    try:
        for part in mine:
            stats = scorer.score(
                [ScoreItem(r.trajectory_id, texts[r.question_id], r.text) for r in part]  # type: ignore[arg-type]  # not checked by hand yet: the question texts are expected for every scored question
            )
            ents = [x.entropies.astype(np.float32) for x in stats]
            offsets = np.zeros(len(ents) + 1, dtype=np.int64)
            offsets[1:] = np.cumsum([e.size for e in ents])
            artifact = new_artifact_path(artifacts_dir, study)
            write_token_artifact(
                artifact,
                [r.trajectory_id for r in part],
                np.concatenate(ents) if ents else np.zeros(0, np.float32),
                offsets,
                np.ones(len(ents), dtype=bool),
            )
            rel = str(artifact.relative_to(data_dir))
            try:
                with session_scope(engine) as s:
                    for i, (r, x) in enumerate(zip(part, stats, strict=True)):
                        s.execute(
                            update(Trajectory)
                            .where(Trajectory.id == r.id)
                            .values(
                                mean_token_entropy=x.mean_entropy,
                                n_tokens=x.n_tokens,
                                seq_logprob=x.seq_logprob,
                                logprob_temperature=1.0,
                                token_artifact=rel,
                                token_row=i,
                            )
                        )
            except Exception:
                artifact.unlink(missing_ok=True)
                raise
            bar.update(len(part))
    finally:
        bar.close()
    n_scored = shard.total(n_mine)  # a collective: after it every rank has committed
    result = ScoreResult(
        study=study,
        run=run,
        model=model,
        step=step,
        n_selected=len(rows),
        n_scored=n_scored,
        n_already=len(rows) - len(todo),
        version=version if n_scored else version - 1,
        processes=shard.world,
        main_process=shard.is_main,
        train_seed=train_seed,
    )
    if n_scored and shard.is_main:
        with session_scope(engine) as s:
            append_event(
                s,
                actor=actor,
                kind=events.PROBE_SCORE,
                study_id=sid,
                payload={
                    "run": run,
                    "model": model,
                    "step": step,
                    **({} if train_seed is None else {"train_seed": train_seed}),
                    "version": version,
                    "n_scored": n_scored,
                    "n_selected": len(rows),
                    "processes": shard.world,
                    **scorer.describe(),
                },
            )
    return result
