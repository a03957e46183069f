"""A training run dir's ``run.json`` (written by ``rcea train run``) as the other stages
read it: the training seed (replicate) it records, so probing and ``rcea import trainlog``
key the run's checkpoints and curves by it without the seed being typed again
(docs/estimators.md item 17)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RUN_FILE = "run.json"
TRAIN_SEED_DIR = "train-seed-{}"
"""The output dir of one training seed under ``rcea train run --train-seeds``' ``--out``."""


def train_seed_of(meta: dict[str, Any]) -> int | None:
    """The training seed a parsed ``run.json`` records, or None (a run trained without
    ``--train-seeds``, or before the field existed)."""
    value = meta.get("train_seed")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_run_meta(run_dir: Path) -> dict[str, Any] | None:
    """``run_dir/run.json`` parsed, or None when it is missing or not a JSON object."""
    path = run_dir / RUN_FILE
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # not a run.json `rcea train run` wrote: nothing to read from it
    return meta if isinstance(meta, dict) else None


def recorded_train_seed(path: Path, levels: int = 2) -> int | None:
    """The training seed of the run holding ``path``: the first ``run.json`` with one in
    ``path`` (a folder) or its parents, up to ``levels`` above the folder — a run dir, its
    ``checkpoint-N/`` (TRL's ``trainer_state.json``), its ``runs/<stamp>/`` event folder."""
    folder = path if path.is_dir() else path.parent
    for d in [folder, *list(folder.parents)[:levels]]:
        meta = read_run_meta(d)
        if meta is not None:
            return train_seed_of(meta)
    return None


def parse_train_seeds(text: str) -> list[int]:
    """``--train-seeds 0,1,2``: distinct integers in [0, 2**31 - 1], in the given order;
    ``ValueError`` naming the bad item otherwise."""
    items = [x.strip() for x in text.split(",")]
    if not text.strip() or any(not x for x in items):
        raise ValueError(
            f"--train-seeds: expected comma-separated integers, e.g. 0,1,2; got {text!r}"
        )
    seeds = []
    for x in items:
        try:
            seed = int(x)
        except ValueError:
            raise ValueError(f"--train-seeds: {x!r} is not an integer (in {text!r})") from None
        if not 0 <= seed <= 2**31 - 1:
            raise ValueError(f"--train-seeds: {seed} is out of range (0 to 2147483647)")
        if seed in seeds:
            raise ValueError(f"--train-seeds: seed {seed} is given twice (in {text!r})")
        seeds.append(seed)
    return seeds


def seed_run_dir(out: Path, train_seed: int) -> Path:
    """``OUT/train-seed-N``: where ``rcea train run --train-seeds`` trains seed N."""
    return out / TRAIN_SEED_DIR.format(train_seed)


def finished_seed(run_dir: Path, train_seed: int) -> bool:
    """Whether ``run_dir`` holds a finished run of training seed ``train_seed``: its
    ``run.json`` (written last) records that seed. ``ValueError`` when it records another
    (the directory is some other run's; training over it would mix two replicates)."""
    meta = read_run_meta(run_dir)
    if meta is None:
        return False
    recorded = train_seed_of(meta)
    if recorded != train_seed:
        raise ValueError(
            f"{run_dir / RUN_FILE}: records training seed {recorded}, not {train_seed}: "
            "another run's directory (move it, or choose another --out)"
        )
    return True
