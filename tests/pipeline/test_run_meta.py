"""``rcea.pipeline.run_meta``: the training seed a run dir's run.json records, the
``--train-seeds`` list and the finished-seed check that makes ``train run`` resumable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rcea.pipeline.run_meta import (
    finished_seed,
    parse_train_seeds,
    recorded_train_seed,
    seed_run_dir,
    train_seed_of,
)


def _run(path: Path, train_seed: object = None, **extra: object) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "run.json").write_text(json.dumps({"train_seed": train_seed, **extra}))
    return path


def test_parse_train_seeds_keeps_order_and_refuses_bad_lists() -> None:
    assert parse_train_seeds("0,1,2") == [0, 1, 2]
    assert parse_train_seeds(" 7 , 3") == [7, 3]
    assert parse_train_seeds("5") == [5]
    for text, message in [
        ("", "expected comma-separated integers"),
        ("0,,1", "expected comma-separated integers"),
        ("0,1,", "expected comma-separated integers"),
        ("0,a", "'a' is not an integer"),
        ("1.5", "'1.5' is not an integer"),
        ("-1", "-1 is out of range"),
        ("2147483648", "out of range"),
        ("1,2,1", "seed 1 is given twice"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_train_seeds(text)


def test_train_seed_of_reads_integers_only() -> None:
    assert train_seed_of({"train_seed": 3}) == 3
    assert train_seed_of({"train_seed": 0}) == 0
    for meta in ({}, {"train_seed": None}, {"train_seed": True}, {"train_seed": "3"}):
        assert train_seed_of(meta) is None


def test_recorded_train_seed_walks_up_from_a_checkpoint_or_event_folder(tmp_path: Path) -> None:
    run = _run(tmp_path / "runs" / "grpo" / "train-seed-4", 4)
    events = run / "runs" / "Dec06_12-00-00"
    events.mkdir(parents=True)
    (events / "events.out.tfevents.1").write_bytes(b"")
    ckpt = run / "checkpoint-2"
    ckpt.mkdir()
    (ckpt / "trainer_state.json").write_text("{}")
    assert recorded_train_seed(run) == 4
    assert recorded_train_seed(events) == 4  # OUT/runs/<stamp>/: two levels up
    assert recorded_train_seed(events / "events.out.tfevents.1") == 4
    assert recorded_train_seed(ckpt / "trainer_state.json") == 4
    # the nearest run.json decides, even when it records no seed
    _run(ckpt, None)
    assert recorded_train_seed(ckpt / "trainer_state.json") is None
    # no run.json within reach, or one that is not ours
    assert recorded_train_seed(tmp_path) is None
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "run.json").write_text("[1, 2]")
    assert recorded_train_seed(bad) is None


def test_finished_seed_is_the_run_json_of_that_seed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert seed_run_dir(out, 3) == out / "train-seed-3"
    assert not finished_seed(seed_run_dir(out, 3), 3)  # nothing there
    seed_run_dir(out, 3).mkdir(parents=True)
    (seed_run_dir(out, 3) / "checkpoint-1").mkdir()
    assert not finished_seed(seed_run_dir(out, 3), 3)  # interrupted: no run.json yet
    _run(seed_run_dir(out, 3), 3)
    assert finished_seed(seed_run_dir(out, 3), 3)
    _run(seed_run_dir(out, 5), 2)
    with pytest.raises(ValueError, match="records training seed 2, not 5"):
        finished_seed(seed_run_dir(out, 5), 5)
