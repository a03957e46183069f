"""rcea.study.pair_audit.freeze's contract pinned exactly, written from the mutants `make mutation`
left alive (docs/mutation.md): which rubric is the parent and which one a lookup returns,
the refusals' exact messages, the freeze events' payloads, the uncertain modes, and the
partition no-op being per study and against the latest partition only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rcea.audits.rubric import load_rubric
from rcea.study.pair_audit.freeze import (
    FreezeError,
    accepted_trajectories,
    freeze_partition_from_modes,
    freeze_rubric,
    get_rubric,
    latest_partition,
    partition_modes,
    rubric_spec,
    store_partition,
)
from rcea.study.records.ingest import ingest_file
from rcea.study.store import list_events, require_study, session_scope
from rcea.study.store.models import Rubric
from tests.support.helpers import RUBRIC, make_record, write_jsonl


def _rubric(tmp_path: Path, name: str, version: str, seed: int = 5) -> Path:
    text = (
        RUBRIC.replace('name = "test-rubric"', f'name = "{name}"')
        .replace('version = "1"', f'version = "{version}"')
        .replace("seed = 5", f"seed = {seed}")
    )
    path = tmp_path / f"{name}-{version}-{seed}.toml"
    path.write_text(text + "# café\n", encoding="utf-8")
    return path


def _exact(message: str) -> str:
    return f"^{re.escape(message)}$"


def test_rubric_versions_parents_lookups_and_events(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        v1, _ = freeze_rubric(s, path=_rubric(tmp_path, "a", "1"), actor="r")
        other, created = freeze_rubric(s, path=_rubric(tmp_path, "b", "1"), actor="r")
        assert created and other.parent_id is None  # same version, other name: its own row
        v2, _ = freeze_rubric(s, path=_rubric(tmp_path, "a", "2", seed=6), actor="r")
        v3, _ = freeze_rubric(s, path=_rubric(tmp_path, "a", "3", seed=7), actor="r")
        assert (v2.parent_id, v3.parent_id) == (v1.id, v2.id)  # the latest earlier version
        assert v3.source_text == _rubric(tmp_path, "a", "3", seed=7).read_text(encoding="utf-8")
        ids = {k: r.id for k, r in {"v1": v1, "v2": v2, "v3": v3}.items()}
        path3 = str(_rubric(tmp_path, "a", "3", seed=7))
        events = list_events(s, kind="rubric.freeze")
        assert events[-1].payload == {
            "rubric_id": v3.id,
            "name": "a",
            "version": "3",
            "content_hash": v3.content_hash,
            "parent_id": v2.id,
            "source": path3,
        }
        assert get_rubric(s, name="a").id == ids["v3"]
        assert get_rubric(s, name="a", version="1").id == ids["v1"]
        assert get_rubric(s, name="a", version="2").id == ids["v2"]
        with pytest.raises(FreezeError, match=_exact(
            "no frozen rubric named 'a' version 9 (frozen rubrics: a v1, a v2, a v3, b v1); "
            "run `rcea audit rubric freeze RUBRIC.toml` first"
        )):  # fmt: skip
            get_rubric(s, name="a", version="9")
        with pytest.raises(FreezeError, match=_exact(
            "no frozen rubric named 'zz' (frozen rubrics: a v1, a v2, a v3, b v1); "
            "run `rcea audit rubric freeze RUBRIC.toml` first"
        )):  # fmt: skip
            get_rubric(s, name="zz")
        changed = _rubric(tmp_path, "a", "1", seed=99)
        new_hash = load_rubric(changed).content_hash()
        with pytest.raises(FreezeError, match=_exact(
            f"rubric 'a' version 1 is frozen with hash {v1.content_hash[:12]}…; {changed} "
            f"differs (hash {new_hash[:12]}…). A change must be a new version: bump "
            "[rubric] version."
        )):  # fmt: skip
            freeze_rubric(s, path=changed, actor="r")
        # a stored rubric whose content no longer matches its hash is refused when read
        forged = Rubric(**{**v1.model_dump(), "content_hash": "0" * 64})
        with pytest.raises(FreezeError, match=_exact(
            "rubric a v1: stored content does not match its frozen hash"
        )):  # fmt: skip
            rubric_spec(forged)


def test_no_rubric_at_all_says_none(engine) -> None:  # type: ignore[no-untyped-def]
    with (
        pytest.raises(FreezeError, match=re.escape("(frozen rubrics: none); run `rcea")),
        session_scope(engine) as s,
    ):
        get_rubric(s, name="x")


def _study(engine, tmp_path: Path, name: str, modes: list[str | None]) -> None:  # type: ignore[no-untyped-def]
    # records in reverse order, so that the store's order is not the file's
    recs = [
        make_record(i, question_id=f"q{i % 2}", reward=1, mode=m, text=f"solution {i}")
        for i, m in enumerate(modes)
    ][::-1]
    recs.append(make_record(99, question_id="q0", reward=0, text="wrong"))
    ingest_file(
        engine,
        write_jsonl(tmp_path / f"{name}.jsonl", recs),
        study=name,
        artifacts_dir=tmp_path / "art",
        data_dir=tmp_path,
    )


def test_partitions_are_per_study_and_against_the_latest(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    modes: list[str | None] = ["m1", None, "uncertain", "m2", "", "m2"]  # 3 uncertain
    _study(engine, tmp_path, "s1", modes)
    _study(engine, tmp_path, "s2", modes)  # the same trajectories: the same content hash
    with session_scope(engine) as s:
        with pytest.raises(FreezeError, match=_exact(
            "no frozen partition for this study: run "
            "`rcea audit partition freeze --study S` (or the codebook export)"
        )):  # fmt: skip
            latest_partition(s, study_id=require_study(s, name="s1").id)
        sid1, sid2 = (require_study(s, name=n).id for n in ("s1", "s2"))
        accepted = accepted_trajectories(s, study_id=sid1)
        assert [(t.question_id, t.trajectory_id) for t in accepted] == sorted(
            (f"q{i % 2}", f"t{i:05d}") for i in range(6)
        )
        p1, created1 = freeze_partition_from_modes(s, study="s1", actor="r")
        p2, created2 = freeze_partition_from_modes(s, study="s2", actor="r")
        assert created1 and created2 and p1.id != p2.id
        assert (p1.study_id, p2.study_id, p1.content_hash) == (sid1, sid2, p2.content_hash)
        assert (p1.source, p1.n_accepted, p1.n_uncertain) == ("mode-column", 6, 3)
        assert partition_modes(s, partition_id=p1.id) == {
            f"t{i:05d}": (f"q{i % 2}", m if m in ("m1", "m2") else None)
            for i, m in enumerate(modes)
        }
        events = [e for e in list_events(s, kind="partition.freeze") if e.study_id == sid1]
        assert [e.payload for e in events] == [{
            "partition_id": p1.id, "content_hash": p1.content_hash, "source": "mode-column",
            "n_accepted": 6, "n_uncertain": 3,
        }]  # fmt: skip
        # identical content again: a no-op returning the latest partition
        again, created = freeze_partition_from_modes(s, study="s1", actor="r")
        assert (again.id, created) == (p1.id, False)
        # A, then B, then A again: A is not the latest, so it is frozen anew
        triples = [(q, t, m) for t, (q, m) in partition_modes(s, partition_id=p1.id).items()]
        b_triples = [(q, t, "m9") for q, t, _ in triples]
        pb, created_b = store_partition(
            s, study_id=sid1, triples=b_triples, source="codebook:x", actor="r"
        )
        pa, created_a = store_partition(
            s, study_id=sid1, triples=triples, source="mode-column", actor="r"
        )
        assert (created_b, created_a) and pa.id not in (p1.id, pb.id)
        assert latest_partition(s, study_id=sid1).id == pa.id
        assert latest_partition(s, study_id=sid2).id == p2.id


def test_a_study_without_accepted_trajectories_is_refused(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ingest_file(
        engine,
        write_jsonl(tmp_path / "z.jsonl", [make_record(1, reward=0)]),
        study="z",
        artifacts_dir=tmp_path / "art",
        data_dir=tmp_path,
    )
    with (
        pytest.raises(FreezeError, match=_exact(
            "study 'z' has no accepted trajectories (R=1, judge-accepted)"
        )),
        session_scope(engine) as s,
    ):  # fmt: skip
        freeze_partition_from_modes(s, study="z", actor="r")
