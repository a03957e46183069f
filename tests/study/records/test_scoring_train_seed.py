"""``score_trajectories`` with training seeds (docs/estimators.md item 17): two seeds'
trajectories of one (run, model, step) are two checkpoints' samples, so one checkpoint
scores one seed's (``train_seed``), and a selection holding two seeds is refused without
one; the event records the seed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

from rcea.study.records.ingest import ingest_file
from rcea.study.records.scoring import score_trajectories
from rcea.study.store import Event, Trajectory
from tests.support.helpers import write_jsonl


@dataclass
class _Stats:
    entropies: np.ndarray
    mean_entropy: float
    n_tokens: int
    seq_logprob: float


class _Scorer:
    """Entropy = the text's length (so each stored number says which item it scored)."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def score(self, items: list[Any]) -> list[_Stats]:
        self.seen += [it.trajectory_id for it in items]
        out = []
        for it in items:
            ent = np.full(len(it.text), float(len(it.text)), dtype=np.float32)
            out.append(_Stats(ent, float(len(it.text)), len(it.text), -1.0))
        return out

    def describe(self) -> dict[str, Any]:
        return {"checkpoint": "fake"}


def _records(seeds: list[int | None]) -> list[dict[str, Any]]:
    out = []
    for t in seeds:
        for i in range(2):
            rec = {
                "trajectory_id": f"t{t}-{i}",
                "question_id": "q1",
                "question": "What is 2+3?",
                "text": "x" * (3 + i + 10 * (t or 0)),
                "reward": i % 2,
                "run": "r",
                "model": "m",
                "step": 4,
                "seed": 0,
            }
            if t is not None:
                rec["train_seed"] = t
            out.append(rec)
    return out


def _setup(engine: Any, tmp_path: Path, seeds: list[int | None]) -> Path:
    data = tmp_path / "data"
    path = write_jsonl(tmp_path / "r.jsonl", _records(seeds))
    ingest_file(engine, path, study="s", artifacts_dir=data / "artifacts", data_dir=data)
    return data


def _score(engine: Any, data: Path, scorer: _Scorer, **kw: Any) -> Any:
    return score_trajectories(
        engine, scorer, study="s", run="r", model="m", step=4,
        artifacts_dir=data / "artifacts", data_dir=data, **kw,
    )  # fmt: skip


def test_one_seed_is_scored_and_two_seeds_need_the_option(engine: Any, tmp_path: Path) -> None:
    data = _setup(engine, tmp_path, [0, 1])
    with pytest.raises(ValueError, match="hold training seeds 0, 1: pass --train-seed"):
        _score(engine, data, _Scorer())
    scorer = _Scorer()
    res = _score(engine, data, scorer, train_seed=1)
    assert sorted(scorer.seen) == ["t1-0", "t1-1"]
    assert (res.n_selected, res.n_scored, res.train_seed) == (2, 2, 1)
    assert "of r [train seed 1] m step 4" in res.summary()
    with engine.connect() as conn:
        stored = dict(conn.execute(sa.select(Trajectory.trajectory_id,
                                             Trajectory.mean_token_entropy)).all())  # fmt: skip
        (ev,) = conn.execute(sa.select(Event.payload).where(Event.kind == "probe.score")).all()
    assert stored == {"t0-0": None, "t0-1": None, "t1-0": 13.0, "t1-1": 14.0}
    payload = ev[0] if isinstance(ev[0], dict) else json.loads(ev[0])
    assert payload["train_seed"] == 1
    with pytest.raises(
        ValueError, match="no trajectories of run r, model m, step 4, training seed 7"
    ):
        _score(engine, data, _Scorer(), train_seed=7)


def test_a_single_seed_or_none_is_scored_without_the_option(engine: Any, tmp_path: Path) -> None:
    data = _setup(engine, tmp_path, [None])
    res = _score(engine, data, _Scorer())
    assert (res.n_scored, res.train_seed) == (2, None)
    assert "of r m step 4" in res.summary()
    with engine.connect() as conn:
        (ev,) = conn.execute(sa.select(Event.payload).where(Event.kind == "probe.score")).all()
    payload = ev[0] if isinstance(ev[0], dict) else json.loads(ev[0])
    assert "train_seed" not in payload  # as before training seeds existed
