"""Sharding ``probe entropy`` and ``probe covariance`` over the ranks of ``accelerate launch``.

``accelerate launch --num_processes N $(which rcea) probe entropy|covariance ...`` runs the
same command on N ranks (torch.distributed through accelerate's :class:`PartialState`:
NCCL on GPUs, each rank on its own device; gloo on CPU). The stage's open units —
(checkpoint, question group) for ``entropy``, (transition, question) for ``covariance``,
in the order the single-process run would take them — are cut into N contiguous blocks,
one per rank, so a rank loads few checkpoints and the blocks, concatenated in rank order,
are the single-process order.

Each rank writes only its own files and records its finished units in its own log,
``DIR/shards/<stage>-rank<R>.jsonl`` (appended and fsynced after the unit's outputs), never
in ``manifest.json``. After a barrier rank 0 folds the logs into the manifest
(:func:`fold_logs`), merges the outputs and writes the stage's shared files and results,
so the output directory and the store (``--study``) receive them exactly once. Rank 0
also folds leftover logs before the run starts, so an interrupted launch resumes — with
any number of processes, or none — from every unit any rank finished.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from rcea.pipeline.launch import close_process_group_at_exit, world_size
from rcea.pipeline.probe.manifest import Manifest, append_jsonl

T = TypeVar("T")
SHARDS_DIR = "shards"


@dataclass
class Shard:
    """This process's place in the launch: rank, number of ranks, accelerate's state."""

    rank: int = 0
    world: int = 1
    state: Any = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            self.state.wait_for_everyone()

    def split(self, units: list[T]) -> list[T]:
        """This rank's contiguous block of ``units`` (sizes differ by at most one)."""
        n = len(units)
        return units[self.rank * n // self.world : (self.rank + 1) * n // self.world]

    def total(self, value: int) -> int:
        """Sum of ``value`` over the ranks (a collective: every rank must call it)."""
        if self.world == 1:
            return value
        from accelerate.utils import gather_object  # the `train` extra: only several ranks

        return int(sum(gather_object([value])))


def current_shard() -> Shard:
    """The launch's shard; initialises torch.distributed through accelerate when
    ``WORLD_SIZE > 1`` (gloo when no CUDA device is visible)."""
    world = world_size()
    if world <= 1:
        return Shard()
    # the `train` extra: only a run over several ranks (accelerate launch) needs them
    import torch
    from accelerate import PartialState

    state = PartialState(cpu=not torch.cuda.is_available())
    close_process_group_at_exit()  # before the interpreter's teardown (rcea.pipeline.launch)
    if state.num_processes != world:
        raise RuntimeError(
            f"WORLD_SIZE={world} but accelerate initialised {state.num_processes} process(es)"
        )
    if torch.cuda.is_available():
        torch.cuda.set_device(state.device)  # load_policy's "cuda" = this rank's GPU
    return Shard(state.process_index, state.num_processes, state)


def log_path(out: Path, stage: str, rank: int) -> Path:
    return out / SHARDS_DIR / f"{stage}-rank{rank}.jsonl"


def log_units(out: Path, stage: str, rank: int, group: str, units: list[str]) -> None:
    """Record ``units`` of (stage, group) as finished by ``rank`` (after their outputs)."""
    append_jsonl(log_path(out, stage, rank), [{"group": group, "units": list(units)}])


def rank_files(out: Path, pattern: str) -> list[Path]:
    """Per-rank files ``out/pattern`` (``{rank}`` = the rank number), in rank order."""
    rx = re.compile(re.escape(pattern).replace(r"\{rank\}", r"(\d+)") + "$")
    found = []
    for p in out.glob(pattern.replace("{rank}", "*")):
        m = rx.search(str(p.relative_to(out)))
        if m:
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


def _read_log(path: Path) -> list[dict[str, Any]]:
    """A rank's log; a last line cut short by a kill is dropped (its units rerun)."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows


def fold_logs(out: Path, manifest: Manifest, stage: str) -> int:
    """Mark every unit in the ranks' logs of ``stage`` done in ``manifest`` (rank order,
    log order: the order a single process marks them), then delete the logs. Rank 0
    only. Returns the units folded."""
    files = rank_files(out, f"{SHARDS_DIR}/{stage}-rank{{rank}}.jsonl")
    n = 0
    done = manifest.data["done"].setdefault(stage, {})
    for path in files:
        for row in _read_log(path):
            cur = done.setdefault(row["group"], [])
            seen = set(cur)
            new = [u for u in row["units"] if u not in seen]
            cur.extend(new)
            n += len(new)
    if files:
        manifest.save()
        for path in files:
            path.unlink()
    return n
