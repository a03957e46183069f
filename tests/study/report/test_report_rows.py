"""``rcea report build`` reads the store one checkpoint at a time
(rcea.study.report.inputs.StoreRows): its report equals the bundle path's (every row in
memory, ``compute_report``) on studies with a mode column, a frozen partition with late
trajectories, production judge verdicts and two models; the streamed record-set hash equals
the in-memory one under any collation; and the build never reads the whole study at once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import rcea.study.report.inputs as inputs_mod
from rcea.study.pair_audit.freeze import freeze_partition_from_modes
from rcea.study.records.ingest import ingest_file
from rcea.study.report.build import build_report
from rcea.study.report.compute import compute_report, mode_labels_from_rows
from rcea.study.report.inputs import (
    StoreRows,
    gather_inputs,
    mode_labels,
    pair_audit_state,
    study_trajectories,
)
from rcea.study.report.rows import record_set_hash
from rcea.study.report.schema import report_json
from rcea.study.settings import Settings
from rcea.study.store import require_study, session_scope
from rcea.study.validity_audit.run import run_judge
from tests.support.helpers import write_jsonl
from tests.support.judge_study import freeze, ingest_toy
from tests.support.report_study import N_BOOT, make_report_study, report_records


def _without_time(report: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in report.items() if k != "generated_at"}


def both_paths(engine, study: str = "rep", **kw: Any) -> tuple[dict, dict]:  # type: ignore[no-untyped-def]
    """(streamed ``build_report``, ``compute_report`` on ``gather_inputs``), as JSON."""
    with session_scope(engine) as s:
        streamed = _without_time(report_json(build_report(s, study=study, n_boot=N_BOOT, **kw)))
        bundle = report_json(compute_report(gather_inputs(s, study=study, n_boot=N_BOOT, **kw)))
    # through JSON, as a bundle is: tuples and lists compare equal
    return json.loads(json.dumps(streamed)), json.loads(json.dumps(bundle))


@pytest.mark.parametrize("reverse_ids", [False, True])
def test_streamed_equals_bundle_path_on_the_mode_column(
    engine, tmp_path: Path, reverse_ids: bool
) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path, reverse_ids=reverse_ids)
    streamed, bundle = both_paths(engine)
    assert streamed == bundle
    assert any(c["retention"] for c in streamed["checkpoints"])
    assert streamed["audits"]["validity"]["filter"] == "judge"  # the validity column
    assert all(c["modes"] for c in streamed["checkpoints"])


def test_streamed_equals_bundle_path_on_a_partition_with_late_rows(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    with session_scope(engine) as s:
        freeze_partition_from_modes(s, study="rep", actor="r")
    late = report_records(seed=3)[:200]
    for r in late:
        r["trajectory_id"] = "late-" + r["trajectory_id"]
        r["validity"] = 1 if r["reward"] else None
    path = write_jsonl(tmp_path / "late.jsonl", late)
    ingest_file(engine, path, study="rep", artifacts_dir=tmp_path / "art", data_dir=tmp_path)
    streamed, bundle = both_paths(engine)
    assert streamed == bundle
    assert streamed["audits"]["pair"]["partition_source"] == "latest-frozen"
    outside = sum(c["modes"]["n_not_in_partition"] for c in streamed["checkpoints"])
    assert outside == sum(r["reward"] for r in late) > 0
    with session_scope(engine) as s:
        sid = require_study(s, name="rep").id
        pair = pair_audit_state(s, study_id=sid)
        rows = gather_inputs(s, study="rep")["rows"]
        assert mode_labels(s, study_id=sid, pair=pair) == mode_labels_from_rows(rows, pair, True)


def test_streamed_equals_bundle_path_with_production_verdicts(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ingest_toy(engine, tmp_path, steps=(0, 40))
    freeze(engine, "undecided", "tests.support.judge_study:undecided_on_slips")
    run_judge(
        engine,
        study="toy",
        judge="undecided",
        settings=Settings(data_dir=tmp_path / "d"),
        actor="r",
    )
    streamed, bundle = both_paths(engine, study="toy", k_min=3)
    assert streamed == bundle
    assert streamed["audits"]["validity"]["status"] != "no-judge"
    coverages = [c["validity"]["judge_coverage"] for c in streamed["checkpoints"]]
    assert len(coverages) == 2 and all(0 < c < 1 for c in coverages)


def test_streamed_equals_bundle_path_for_two_models(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    recs = report_records()
    big = report_records(seed=5)
    for r in big:
        r["trajectory_id"] = "big-" + r["trajectory_id"]
        r["model"] = "big"
    path = write_jsonl(
        tmp_path / "two.jsonl", [x for pair in zip(recs, big, strict=True) for x in pair]
    )
    ingest_file(engine, path, study="rep", artifacts_dir=tmp_path / "art", data_dir=tmp_path)
    streamed, bundle = both_paths(engine)
    assert streamed == bundle
    models = {(c["run"], c["model"]) for c in streamed["checkpoints"]}
    assert ("grpo", "big") in models and ("grpo", "tiny") in models


def test_streamed_equals_bundle_path_without_mode_data(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    recs = report_records()
    for r in recs:
        r["mode"] = None
    path = write_jsonl(tmp_path / "plain.jsonl", recs)
    ingest_file(engine, path, study="rep", artifacts_dir=tmp_path / "art", data_dir=tmp_path)
    streamed, bundle = both_paths(engine)
    assert streamed == bundle
    assert all(c["modes"] is None for c in streamed["checkpoints"])


def test_streamed_record_set_hash_under_another_collation(
    engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """Ids whose order differs between code points and a linguistic collation; pages
    smaller than the study."""
    recs = report_records()[:60]
    weird = ["b", "B", "a-2", "a_1", "A1", "é", "e", "Z", "_z", "0"]
    for i, r in enumerate(recs):
        r["trajectory_id"] = f"{weird[i % len(weird)]}{i}"
    path = write_jsonl(tmp_path / "ids.jsonl", recs)
    ingest_file(engine, path, study="rep", artifacts_dir=tmp_path / "art", data_dir=tmp_path)
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            try:
                conn.execute(
                    sa.text(
                        "ALTER TABLE trajectory ALTER COLUMN trajectory_id "
                        'TYPE varchar(300) COLLATE "und-x-icu"'
                    )
                )
            except sa.exc.DBAPIError as exc:  # a server built without ICU
                pytest.skip(f"no ICU collation: {exc}")
            ordered = conn.execute(
                sa.text("SELECT trajectory_id FROM trajectory ORDER BY trajectory_id")
            ).scalars()
            assert list(ordered) != sorted(r["trajectory_id"] for r in recs)  # really differs
    monkeypatch.setattr(inputs_mod, "HASH_PAGE", 7)
    with session_scope(engine) as s:
        sid = require_study(s, name="rep").id
        source = StoreRows(s, study_id=sid, partition_id=None, judge_id=None)
        assert source.record_set_hash() == record_set_hash(study_trajectories(s, sid))
        assert [r["trajectory_id"] for r in source.iter_hash_rows()] == sorted(
            r["trajectory_id"] for r in recs
        )


def test_build_reads_one_checkpoint_at_a_time(
    engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)

    def refuse(*a: Any, **kw: Any) -> None:
        raise AssertionError("report build read every row at once")

    sizes: list[int] = []
    real = StoreRows.checkpoint

    def counted(self, key):  # type: ignore[no-untyped-def]
        rows, verdicts = real(self, key)
        sizes.append(len({(r["run"], r["model"], r["step"]) for r in rows}))
        return rows, verdicts

    monkeypatch.setattr(inputs_mod, "study_trajectories", refuse)
    monkeypatch.setattr(inputs_mod, "partition_modes", refuse)
    monkeypatch.setattr(StoreRows, "checkpoint", counted)
    with session_scope(engine) as s:
        rep = report_json(build_report(s, study="rep", n_boot=N_BOOT))
    assert len(sizes) == len(rep["checkpoints"]) == 12 and set(sizes) == {1}
