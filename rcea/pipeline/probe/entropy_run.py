"""``probe entropy``: the teacher-forced pass over every sampled completion.

For each checkpoint × question unit not yet done, the unit's completions (exact sampled
ids from ``samples/<label>.jsonl``, EOS included) are scored under that checkpoint at the
sampling temperature (:func:`rcea.pipeline.probe.entropy_kernel.token_stats`, chunked over
positions),
``[entropy] batch_size // K`` consecutive unfinished questions per call (marked done
together, so a resumed run regroups as the uninterrupted run did).
Outputs::

    DIR/tokens/<label>.parquet   trajectory_id, question_id, truncated (bool),
                                 token_entropies (list<float32>, nats),
                                 token_logprobs (list<float32>, chosen-token log-probs)
    DIR/records/<label>.jsonl    + n_tokens, mean_token_entropy, seq_logprob (ℓ, EOS incl.),
                                 logprob_temperature (the temperature ℓ is scored at)
    DIR/records.jsonl            refreshed

While a checkpoint is in progress, finished units live in ``tokens/<label>.parts/`` (one
Parquet file per unit); they are merged into ``tokens/<label>.parquet`` when the
checkpoint's units are all done. Empty completions (no record) are skipped.

Sharded (``accelerate launch --num_processes N ... rcea probe entropy``,
:mod:`rcea.pipeline.probe.shard`): the (checkpoint, question group) units — the groups of the
single-process run — are split into N contiguous blocks; each rank writes its units' parts
and logs them in ``shards/entropy-rank<R>.jsonl``; rank 0 folds the logs into the manifest
and merges parts, records and ``records.jsonl`` once. A unit is scored by one rank on the
same batch as in one process, so the artifacts equal the single-process ones.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rcea.pipeline.probe.common import (
    StageResult,
    Timer,
    groups,
    load_policy,
    open_manifest,
    progress_bar,
    sampled_question_ids,
    sampling_temperature,
    set_threads,
)
from rcea.pipeline.probe.config import Checkpoint, ProbeConfig, resolve_checkpoints
from rcea.pipeline.probe.entropy_kernel import token_stats
from rcea.pipeline.probe.manifest import MANIFEST_FILE, read_jsonl, write_jsonl
from rcea.pipeline.probe.sampling import records_path, samples_path, write_combined_records
from rcea.pipeline.probe.shard import current_shard, fold_logs, log_units


class StageOrderError(RuntimeError):
    """A stage needs another stage's output first (the message says which)."""


def require_samples(out: Path) -> None:
    """Raise :class:`StageOrderError` unless ``sample`` has written into ``out``."""
    if not (out / MANIFEST_FILE).exists():
        raise StageOrderError(f"{out}: nothing sampled here yet; run `rcea probe sample` first")


def tokens_path(out: Path, ck: Checkpoint) -> Path:
    return out / "tokens" / f"{ck.label}.parquet"


def _parts_dir(out: Path, ck: Checkpoint) -> Path:
    return out / "tokens" / f"{ck.label}.parts"


def _part_name(question_id: str) -> str:
    return hashlib.sha256(question_id.encode()).hexdigest()[:16] + ".parquet"


def _table(rows: list[dict[str, Any]]) -> Any:
    schema = pa.schema(
        [
            ("trajectory_id", pa.string()),
            ("question_id", pa.string()),
            ("truncated", pa.bool_()),
            ("token_entropies", pa.list_(pa.float32())),
            ("token_logprobs", pa.list_(pa.float32())),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


def read_tokens(path: Path) -> list[dict[str, Any]]:
    """Rows of a token artifact (lists as Python floats)."""
    return pq.read_table(path).to_pylist()


def _write_parquet(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(_table(rows), tmp)
    tmp.replace(path)


def _merge(out: Path, ck: Checkpoint) -> list[dict[str, Any]]:
    """Merge unit parts into the checkpoint artifact; returns all its rows."""
    final, parts = tokens_path(out, ck), _parts_dir(out, ck)
    rows = read_tokens(final) if final.exists() else []
    have = {r["trajectory_id"] for r in rows}
    if parts.exists():
        for part in sorted(parts.glob("*.parquet")):
            rows += [r for r in read_tokens(part) if r["trajectory_id"] not in have]
        _write_parquet(final, rows)
        shutil.rmtree(parts)
    return rows


def _update_records(
    out: Path, ck: Checkpoint, rows: list[dict[str, Any]], temperature: float
) -> int:
    stats = {r["trajectory_id"]: r for r in rows}
    recs = read_jsonl(records_path(out, ck))
    for rec in recs:
        tok = stats.get(rec["trajectory_id"])
        if tok is None:
            continue
        ent = np.asarray(tok["token_entropies"], dtype=np.float64)
        rec["n_tokens"] = int(ent.size)
        rec["mean_token_entropy"] = float(ent.mean())
        rec["seq_logprob"] = float(np.asarray(tok["token_logprobs"], dtype=np.float64).sum())
        # ℓ is scored under the softmax at the sampling temperature (not top-p truncated)
        rec["logprob_temperature"] = temperature
    write_jsonl(records_path(out, ck), recs)
    return sum(1 for r in recs if "mean_token_entropy" in r)


def run_entropy(cfg: ProbeConfig, out_dir: str | Path, *, progress: bool = True) -> StageResult:
    """Teacher-forced entropies for every sampled unit not yet done.

    Under ``accelerate launch`` the open (checkpoint, question group) units are split over
    the ranks (:mod:`rcea.pipeline.probe.shard`); rank 0 merges and writes the shared files."""
    out = Path(out_dir)
    timer = Timer()
    require_samples(out)
    shard = current_shard()
    if shard.is_main:
        fold_logs(out, open_manifest(cfg, out), "entropy")  # an interrupted sharded run
    shard.barrier()
    manifest = open_manifest(cfg, out)
    qids = sampled_question_ids(cfg, manifest)
    temperature = sampling_temperature(cfg, manifest)
    checkpoints = resolve_checkpoints(cfg)
    set_threads(cfg)
    e = cfg.entropy
    result = StageResult(
        "entropy", str(out), cfg.probe.seed, processes=shard.world, main_process=shard.is_main
    )
    result.info.update(chunk_size=e.chunk_size, temperature=temperature)
    k = int(manifest.data.get("sample_settings", {}).get("k", cfg.probe.k))
    plan: list[tuple[Checkpoint, list[str]]] = []
    todo_by_label: dict[str, int] = {}
    for ck in checkpoints:
        sampled = manifest.done("sample", ck.label)
        missing = [q for q in qids if q not in sampled]
        if missing:
            raise StageOrderError(
                f"{ck.label}: {len(missing)} question(s) not sampled yet (e.g. {missing[0]}); "
                "run `rcea probe sample` first"
            )
        done = manifest.done("entropy", ck.label)
        todo = [q for q in qids if q not in done]
        todo_by_label[ck.label] = len(todo)
        result.units_skipped += len(qids) - len(todo)
        # the single-process grouping, so a unit's batch does not depend on the ranks
        plan += [(ck, group) for group in groups(todo, e.batch_size // k)]
    mine = shard.split(plan)
    bar = progress_bar(sum(len(g) for _, g in mine), "entropy", progress and shard.is_main)
    units_run = 0
    i = 0
    while i < len(mine):
        ck = mine[i][0]
        ck_groups = []
        while i < len(mine) and mine[i][0].label == ck.label:
            ck_groups.append(mine[i][1])
            i += 1
        model, tok = load_policy(ck.path)
        by_q: dict[str, list[dict[str, Any]]] = {}
        for s in read_jsonl(samples_path(out, ck)):
            if not s["empty"]:
                by_q.setdefault(s["question_id"], []).append(s)
        parts = _parts_dir(out, ck)
        for group in ck_groups:
            smps = [s for q in group for s in by_q.get(q, [])]
            stats = (
                token_stats(
                    model,
                    [s["prompt_ids"] for s in smps],
                    [s["completion_ids"] for s in smps],
                    temperature=temperature,
                    chunk_size=e.chunk_size,
                    batch_size=e.batch_size,
                    pad_id=tok.pad_token_id,
                )
                if smps
                else []
            )
            rows: dict[str, list[dict[str, Any]]] = {q: [] for q in group}
            for s, st in zip(smps, stats, strict=True):
                rows[s["question_id"]].append(
                    {
                        "trajectory_id": s["trajectory_id"],
                        "question_id": s["question_id"],
                        "truncated": s["truncated"],
                        "token_entropies": st.entropies.tolist(),
                        "token_logprobs": st.logprobs.tolist(),
                    }
                )
            for q in group:
                _write_parquet(parts / _part_name(q), rows[q])
            if shard.world == 1:
                manifest.mark("entropy", ck.label, group)
            else:
                log_units(out, "entropy", shard.rank, ck.label, group)
            units_run += len(group)
            bar.update(len(group))
        del model
    bar.close()
    shard.barrier()
    result.units_run = shard.total(units_run)
    if not shard.is_main:
        result.units_run = units_run  # this rank's share; rank 0 reports the total
        result.seconds = timer()
        return result
    fold_logs(out, manifest, "entropy")
    for ck in checkpoints:
        rows = _merge(out, ck)  # type: ignore[assignment]  # rows is reused: the merged dict above, this checkpoint's list here
        n = _update_records(out, ck, rows, temperature)  # type: ignore[arg-type]  # rows is reused: the merged dict above, this checkpoint's list here
        result.checkpoints.append(
            {
                **ck.to_dict(),
                "label": ck.label,
                "units_run": todo_by_label[ck.label],
                "records_with_entropy": n,
            }
        )
        result.files.append(str(tokens_path(out, ck)))
    result.files.append(str(write_combined_records(out, checkpoints)))
    result.seconds = timer()
    return result
