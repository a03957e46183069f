"""`rcea probe score` sharded under `accelerate launch` (two CPU processes, gloo, the
mechanism of tests/pipeline/probe/test_probe_sharded.py) on a tiny Qwen2-shaped checkpoint
(``tests/support/tiny_qwen.py``): every trajectory's numbers equal the single-process
run's (each rank scores whole batches, the ones one process scores), one ``probe.score``
event (one measurement version) for the launch, and a rerun scores nothing. An
interrupted launch (one rank finished its block, the other died) resumes in one process
with the unscored trajectories only."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from rcea.pipeline.probe.shard import Shard  # noqa: E402
from tests.support.helpers import write_jsonl  # noqa: E402
from tests.support.launch import cpu_env, run_rcea  # noqa: E402

QUESTIONS = {"q1": "What is 3 + 4?", "q2": "Solve 2x - 6 = 0 for x."}
TEXTS = ["3 + 4 = 7. The answer is 7.", "x = 3", "I think 8", "First add: 7", "so 2x = 6"]
SCORE = ["probe", "score", "--run", "r", "--model", "m", "--step", "0", "--batch", "3"]


def records() -> list[dict[str, Any]]:
    return [
        {
            "trajectory_id": f"r:m:s0:{q}:{s}",
            "question_id": q,
            "question": question,
            "text": text,
            "reward": int(s % 2 == 0),
            "run": "r",
            "model": "m",
            "step": 0,
            "seed": s,
        }
        for q, question in QUESTIONS.items()
        for s, text in enumerate(TEXTS)
    ]  # 10 trajectories in batches of 3: [3, 3, 3, 1], two per rank


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.support.tiny_qwen import build_tiny_qwen

    return build_tiny_qwen(tmp_path_factory.mktemp("tiny") / "ckpt").path


def _env(db: Path) -> dict[str, str]:
    return cpu_env(db, db.parent / f"{db.stem}-data")


def _rcea(args: list[str], db: Path, processes: int = 1) -> subprocess.CompletedProcess[str]:
    return run_rcea(args, _env(db), processes, timeout=600)


def _study(db: Path, name: str = "s") -> None:
    path = write_jsonl(db.parent / f"{db.stem}.jsonl", records())
    _rcea(["ingest", str(path), "--study", name], db)


def _scores(db: Path, study: str = "s") -> dict[str, tuple[Any, ...]]:
    """trajectory_id → (n_tokens, mean token entropy, seq_logprob, token entropies)."""
    res = _rcea(["export", study, "--out", str(db.parent / f"{db.stem}-{study}.jsonl")], db)
    assert res.returncode == 0
    rows = map(json.loads, (db.parent / f"{db.stem}-{study}.jsonl").read_text().splitlines())
    return {
        r["trajectory_id"]: (
            r["n_tokens"],
            r["mean_token_entropy"],
            r["seq_logprob"],
            r["token_entropies"],
        )
        for r in rows
    }


def _events(db: Path) -> list[dict[str, Any]]:
    eng = sa.create_engine(f"sqlite:///{db}")
    try:
        with eng.connect() as conn:
            from rcea.study.store import Event

            rows = conn.execute(
                sa.select(Event.payload).where(Event.kind == "probe.score").order_by(Event.id)
            ).all()
    finally:
        eng.dispose()
    return [p if isinstance(p, dict) else json.loads(p) for (p,) in rows]


@pytest.mark.slow
def test_two_ranks_equal_one_process(ckpt: Path, tmp_path: Path) -> None:
    one, two = tmp_path / "one.db", tmp_path / "two.db"
    _study(one)
    _study(two)
    args = [*SCORE, "--study", "s", "--checkpoint", str(ckpt), "--json"]
    doc1 = json.loads(_rcea(args, one).stdout)
    doc2 = json.loads(_rcea(args, two, processes=2).stdout)  # rank 0's document only
    assert (doc1["n_scored"], doc1["processes"], doc1["version"]) == (10, 1, 1)
    assert (doc2["n_scored"], doc2["processes"], doc2["version"]) == (10, 2, 1)
    want, got = _scores(one), _scores(two)
    assert len(want) == 10 and all(v[0] for v in want.values())
    assert got == want  # exactly: the same batches through the same kernel
    (ev,) = _events(two)  # one version for the whole launch
    assert (ev["version"], ev["n_scored"], ev["processes"]) == (1, 10, 2)
    again = _rcea([*args[:-1]], two, processes=2)
    assert again.stdout.count("nothing to score: all 10 trajectories") == 1
    assert len(_events(two)) == 1


class _Rank1(Shard):
    """Rank 1 of a 2-process launch whose rank 0 died: no collectives to wait for."""

    def __init__(self) -> None:
        super().__init__(rank=1, world=2)

    def barrier(self) -> None:
        pass

    def total(self, value: int) -> int:
        return value


def test_interrupted_launch_resumes_with_the_unscored_block(
    ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 1 committed its two batches (4 trajectories) and appended no event; one
    process then scores rank 0's block only (6), as version 1, and every number equals
    a clean single-process run's."""
    from rcea.pipeline.probe.score import Scorer
    from rcea.study.records.scoring import score_trajectories
    from rcea.study.settings import get_settings
    from rcea.study.store import make_engine

    db = tmp_path / "store.db"
    _study(db, "clean")
    _study(db, "resumed")
    monkeypatch.setenv("RCEA_DATABASE_URL", f"sqlite:///{db}")
    monkeypatch.setenv("RCEA_DATA_DIR", str(tmp_path / "store-data"))
    get_settings.cache_clear()
    cfg = get_settings()
    scorer = Scorer(str(ckpt))
    eng = make_engine(f"sqlite:///{db}")

    def score(study: str, shard: Shard | None = None) -> Any:
        return score_trajectories(
            eng,
            scorer,
            study=study,
            run="r",
            model="m",
            step=0,
            artifacts_dir=cfg.artifacts_dir,
            data_dir=cfg.data_dir,
            batch=3,
            shard=shard,
        )

    try:
        part = score("resumed", _Rank1())
        assert (part.n_scored, part.main_process) == (4, False)
        assert _events(db) == []  # rank 1 never records the version
        rest = score("resumed")
        assert (rest.n_scored, rest.n_already, rest.version) == (6, 4, 1)
        score("clean")
    finally:
        eng.dispose()
    assert [e["n_scored"] for e in _events(db)] == [6, 10]
    assert _scores(db, "resumed") == _scores(db, "clean")
