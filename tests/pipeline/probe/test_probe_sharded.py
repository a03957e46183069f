"""Sharded `rcea probe entropy|covariance` under `accelerate launch` (two CPU processes,
gloo) against the single-process run on the same samples: every output file is equal
byte for byte (each unit is scored by one rank on the batch the single process uses, the
merge keeps the single-process order, and both runs use one torch thread per process, so
the float32 kernels see the same inputs in the same order), the store receives the study
binding and the measurements exactly once, and a sharded run interrupted after one rank
finished resumes in one process from that rank's log."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from rcea.pipeline.probe import load_config, run_covariance, run_entropy, run_sample  # noqa: E402
from rcea.pipeline.probe import shard as shard_mod  # noqa: E402
from tests.support.launch import cpu_env, run_rcea  # noqa: E402
from tests.support.probe import (
    save_policy,  # noqa: E402
    write_config,  # noqa: E402
)

STUDY = "sharded"


@pytest.fixture(scope="module")
def sampled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(config, a directory sampled once): 3 checkpoints x 3 questions x k = 4."""
    root = tmp_path_factory.mktemp("sharded")
    p0 = save_policy(root / "s0", seed=3)
    p1 = save_policy(root / "s1", seed=11, perturb=2e-5, base=p0)
    p2 = save_policy(root / "s2", seed=12, perturb=2e-5, base=p1)
    # [entropy] batch_size 8 = 2 questions per group: per checkpoint [q1, q2], [q3], so the
    # 6 entropy units split 3 | 3 across two ranks, one boundary inside a checkpoint
    cfg_path = write_config(root / "c.toml", [p0, p1, p2], entropy={"batch_size": 8})
    out = root / "sampled"
    run_sample(load_config(cfg_path), out, progress=False)
    return cfg_path, out


def _env(db: Path) -> dict[str, str]:
    return cpu_env(db, db.parent / "data")


def _rcea(args: list[str], db: Path, processes: int) -> subprocess.CompletedProcess[str]:
    return run_rcea(args, _env(db), processes, timeout=300)


def _run_both(cfg: Path, out: Path, processes: int) -> list[dict[str, Any]]:
    db = out.parent / f"{out.name}.db"
    docs = []
    for stage in ("entropy", "covariance"):
        args = ["probe", stage, "--config", str(cfg), "--out", str(out), "--json"]
        if stage == "covariance":
            args += ["--study", STUDY]
        docs.append(json.loads(_rcea(args, db, processes).stdout))  # one JSON document
    return docs


def _outputs(out: Path) -> dict[str, Any]:
    """Every output file (Parquet as rows, the rest as bytes) and the manifest's units."""
    import pyarrow.parquet as pq

    files: dict[str, Any] = {}
    for p in sorted(out.rglob("*")):
        if p.is_dir() or p.name == "manifest.json":
            continue
        rel = str(p.relative_to(out))
        files[rel] = pq.read_table(p).to_pylist() if p.suffix == ".parquet" else p.read_bytes()
    manifest = json.loads((out / "manifest.json").read_text())
    files["manifest.done"] = manifest["done"]
    return files


def _store(db: Path) -> tuple[list[tuple], int]:
    from rcea.study.probe_set import PROBE_SET_EVENT
    from rcea.study.store import get_or_create_study, list_events, make_engine, session_scope
    from rcea.study.store.measurements import list_measurements

    eng = make_engine(f"sqlite:///{db}")
    try:
        with session_scope(eng) as s:
            st = get_or_create_study(s, name=STUDY)
            rows = [
                (m.kind, m.run, m.model, m.step, m.key, json.dumps(m.payload, sort_keys=True))
                for m in list_measurements(s, study_id=st.id)
            ]
            events = len(list_events(s, kind=PROBE_SET_EVENT, study_id=st.id))
    finally:
        eng.dispose()
    return rows, events


@pytest.mark.slow
def test_two_ranks_equal_one_process(sampled: tuple[Path, Path], tmp_path: Path) -> None:
    cfg, base = sampled
    one, two = tmp_path / "one", tmp_path / "two"
    shutil.copytree(base, one)
    shutil.copytree(base, two)
    docs1 = _run_both(cfg, one, 1)
    docs2 = _run_both(cfg, two, 2)
    # rank 0 reports the totals of both ranks
    assert [d["units_run"] for d in docs2] == [d["units_run"] for d in docs1] == [9, 6]
    assert [d["processes"] for d in docs2] == [2, 2]
    # 2 transitions + 1 tail + its per-trajectory sums (item 16)
    assert docs2[1]["recorded"] == docs1[1]["recorded"] == 4

    got, want = _outputs(two), _outputs(one)
    assert sorted(got) == sorted(want)  # no rank files or logs left behind
    assert not (two / "shards").exists() or not any((two / "shards").iterdir())
    for name in want:
        assert got[name] == want[name], name
    assert len(want["covariance/positions.jsonl"].splitlines()) > 24

    # the store: the study bound once, the same measurements, each once
    rows1, events1 = _store(one.parent / "one.db")
    rows2, events2 = _store(two.parent / "two.db")
    assert events1 == events2 == 1
    assert rows2 == rows1 and len(rows1) == 4
    assert len(set(rows1)) == 4

    # a second sharded run finds everything done
    again = _run_both(cfg, two, 2)
    assert [d["units_run"] for d in again] == [0, 0]
    assert [d["units_skipped"] for d in again] == [9, 6]
    assert _outputs(two) == want


class _Rank1(shard_mod.Shard):
    """Rank 1 of a 2-process launch whose rank 0 died: no collectives to wait for."""

    def __init__(self) -> None:
        super().__init__(rank=1, world=2)

    def barrier(self) -> None:
        pass

    def total(self, value: int) -> int:
        return value


def test_interrupted_launch_resumes_from_a_ranks_log(
    sampled: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 1 finished its block and logged it; rank 0 never merged. A later run in one
    process folds rank 1's log, skips those units, and ends with the same files as an
    uninterrupted single-process run."""
    import rcea.pipeline.probe.covariance as cov_mod
    import rcea.pipeline.probe.entropy_run as tok_mod

    cfg_path, base = sampled
    cfg = load_config(cfg_path)
    clean, resumed = tmp_path / "clean", tmp_path / "resumed"
    shutil.copytree(base, clean)
    shutil.copytree(base, resumed)
    run_entropy(cfg, clean, progress=False)
    run_covariance(cfg, clean, progress=False)

    for mod in (tok_mod, cov_mod):
        monkeypatch.setattr(mod, "current_shard", _Rank1)
    res = run_entropy(cfg, resumed, progress=False)
    # units 4..6 of 6 (step 10's [q3], step 20's [q1, q2] and [q3]): 4 questions
    assert (res.units_run, res.main_process) == (4, False)
    res = run_covariance(cfg, resumed, progress=False)
    assert (res.units_run, res.main_process) == (3, False)  # the second transition
    assert (resumed / "shards" / "entropy-rank1.jsonl").exists()
    assert (resumed / "covariance" / "positions.rank1.jsonl").exists()
    assert not (resumed / "TRANSITIONS.csv").exists()  # rank 1 writes no shared file
    monkeypatch.undo()

    res = run_entropy(cfg, resumed, progress=False)
    assert (res.units_skipped, res.units_run) == (4, 5)
    res = run_covariance(cfg, resumed, progress=False)
    assert (res.units_skipped, res.units_run) == (3, 3)
    assert not list((resumed / "shards").glob("*"))
    assert not list((resumed / "covariance").glob("positions.rank*"))
    # the same content; rows and units appear in the order they were finished (rank 1's
    # first), as after any resumed run, so those files are compared as sets of lines
    got, want = _normalised(_outputs(resumed)), _normalised(_outputs(clean))
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name] == want[name], name


def _normalised(files: dict[str, Any]) -> dict[str, Any]:
    files = dict(files)
    files["manifest.done"] = {
        stage: {g: sorted(u) for g, u in groups.items()}
        for stage, groups in files["manifest.done"].items()
    }
    files["covariance/positions.jsonl"] = sorted(files["covariance/positions.jsonl"].splitlines())
    head, *lines = files["TRANSITIONS.csv"].splitlines()  # the header stays first
    files["TRANSITIONS.csv"] = (head, sorted(lines))
    return files


@pytest.mark.parametrize("stage", ["sample", "bench"])
def test_unsharded_stages_refuse_a_launch(
    sampled: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stage: str
) -> None:
    """`sample` and `bench` do not shard: under a launch every rank would rewrite the same
    units, so they refuse (on every rank) before doing anything."""
    from typer.testing import CliRunner

    from rcea.app.cli import app

    cfg, _ = sampled
    monkeypatch.setenv("WORLD_SIZE", "2")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["probe", stage, "--config", str(cfg), "--out", str(out)])
    assert res.exit_code == 1
    assert f"probe {stage} does not shard" in res.output and not out.exists()


@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_split_gives_contiguous_blocks_in_rank_order(world: int) -> None:
    units = list(range(7))
    blocks = [shard_mod.Shard(rank=r, world=world).split(units) for r in range(world)]
    assert [u for b in blocks for u in b] == units  # concatenated in rank order
    sizes = [len(b) for b in blocks]
    assert max(sizes) - min(sizes) <= 1


def test_fold_logs_in_rank_order_and_a_cut_line(tmp_path: Path) -> None:
    """Rank 0 folds every rank's log (rank 10 after rank 2: numeric order), keeps units
    already done once, drops a last line cut short by a kill, and deletes the logs."""
    from rcea.pipeline.probe.manifest import Manifest

    m = Manifest(tmp_path, probe_seed=1, question_source="toy:probe")
    m.mark("entropy", "ck", ["q0"])
    shard_mod.log_units(tmp_path, "entropy", 10, "ck", ["q3"])
    shard_mod.log_units(tmp_path, "entropy", 2, "ck", ["q1", "q0"])
    shard_mod.log_units(tmp_path, "entropy", 2, "ck", ["q2"])
    with shard_mod.log_path(tmp_path, "entropy", 10).open("a") as fh:
        fh.write('{"group": "ck", "units": ["q4"')  # killed mid-write
    shard_mod.log_units(tmp_path, "covariance", 1, "t", ["q9"])  # another stage: kept
    assert shard_mod.fold_logs(tmp_path, m, "entropy") == 3
    assert m.data["done"]["entropy"]["ck"] == ["q0", "q1", "q2", "q3"]
    reread = Manifest(tmp_path, probe_seed=1, question_source="toy:probe")
    assert reread.done("entropy", "ck") == {"q0", "q1", "q2", "q3"}
    assert [p.name for p in (tmp_path / "shards").iterdir()] == ["covariance-rank1.jsonl"]
