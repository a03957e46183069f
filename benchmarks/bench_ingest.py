"""Ingest speed: 100,000 records with 512-float token-entropy arrays into SQLite.

Figures: records/s and peak RSS of the ingesting process (a fresh child process, so the
generator's memory is not counted), and the speed ratio against a naive baseline that
adds one ORM object per record with ``session.add`` (same data, same artifact writing),
measured in the same run on a 10,000-record prefix and compared as rates.

Run: ``make bench`` or ``python benchmarks/bench_ingest.py [--n 100000]``. ``--smoke`` runs
tiny sizes in seconds (``make test`` runs it so that the script cannot rot).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import tempfile
import time
from pathlib import Path
from queue import Empty

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from common import add_json_out, emit  # benchmarks/common.py


def generate(path: Path, n: int, n_tokens: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    values = rng.gamma(2.0, 0.4, size=n * n_tokens).astype(np.float32)
    offsets = np.arange(0, (n + 1) * n_tokens, n_tokens, dtype=np.int32)
    table = pa.table(
        {
            "trajectory_id": [f"t{i:07d}" for i in range(n)],
            "question_id": [f"q{i % 500:04d}" for i in range(n)],
            "text": [f"step {i % 7}\n\\boxed{{{i % 97}}}" for i in range(n)],
            "reward": (rng.random(n) < 0.5).astype(np.int64),
            "run": ["grpo"] * n,
            "model": ["tiny"] * n,
            "step": np.repeat(np.arange(0, 100, 10), n // 10 + 1)[:n],
            "seed": np.arange(n, dtype=np.int64),
            "seq_logprob": -rng.gamma(5.0, 10.0, size=n),
            "token_entropies": pa.ListArray.from_arrays(pa.array(offsets), pa.array(values)),
        }
    )
    pq.write_table(table, path)


def _run(kind: str, path: str, data_dir: str, queue: mp.Queue) -> None:
    from rcea.study.store import make_engine, upgrade

    data = Path(data_dir)
    engine = make_engine(f"sqlite:///{data / 'bench.db'}")
    upgrade(engine)
    t0 = time.perf_counter()
    if kind == "bulk":
        from rcea.study.records.ingest import ingest_file

        res = ingest_file(
            engine, path, study="bench", artifacts_dir=data / "artifacts", data_dir=data
        )
        n = res.n_trajectories
    else:
        n = _naive(engine, Path(path), data)
    dt = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put({"n": n, "seconds": dt, "peak_rss_mb": peak_mb})


def _naive(engine, path: Path, data: Path) -> int:  # type: ignore[no-untyped-def]
    """Baseline: validate the same way, then one ``session.add`` per record."""
    from rcea.pipeline.records import SCALAR_FIELDS, read_records
    from rcea.study.store import Ingest, Question, Trajectory, get_or_create_study, session_scope
    from rcea.study.store.artifacts import new_artifact_path, write_token_artifact

    batch = read_records(path)
    with session_scope(engine) as s:
        st = get_or_create_study(s, name="naive")
        art = write_token_artifact(
            new_artifact_path(data / "artifacts", "naive"),
            batch.columns["trajectory_id"],
            batch.token_values,
            batch.token_offsets,
            batch.token_present,
        )
        ing = Ingest(
            study_id=st.id,
            source=str(path),
            sha256="0",
            n_records=len(batch),
            token_artifact=str(art),
        )
        s.add(ing)
        s.flush()
        for q in sorted(set(batch.columns["question_id"])):
            s.add(Question(study_id=st.id, question_id=q))
        for i, row in enumerate(batch.rows()):
            fields = {k: row[k] for k in SCALAR_FIELDS if k in Trajectory.model_fields}
            s.add(
                Trajectory(
                    study_id=st.id, ingest_id=ing.id, token_artifact=str(art), token_row=i, **fields
                )
            )
    return len(batch)


def measure(kind: str, path: Path, data_dir: Path) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_run, args=(kind, str(path), str(data_dir), queue))
    proc.start()
    while True:  # a child that dies without a result must not hang the benchmark
        try:
            out = queue.get(timeout=1.0)
            break
        except Empty:
            if not proc.is_alive():
                raise SystemExit(f"{kind} ingest died (exit code {proc.exitcode})") from None
    proc.join()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--n-baseline", type=int, default=10_000)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: does it still run?")
    add_json_out(ap)
    args = ap.parse_args()
    if args.smoke:
        args.n, args.n_baseline, args.tokens = 200, 50, 16
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        big, small = root / "big.parquet", root / "small.parquet"
        generate(big, args.n, args.tokens)
        generate(small, args.n_baseline, args.tokens)
        (root / "a").mkdir()
        (root / "b").mkdir()
        bulk = measure("bulk", big, root / "a")
        naive = measure("naive", small, root / "b")
    bulk_rate = bulk["n"] / bulk["seconds"]
    naive_rate = naive["n"] / naive["seconds"]
    print(f"{'method':<34}{'records':>10}{'seconds':>10}{'records/s':>12}{'peak RSS MB':>13}")
    print(
        f"{'rcea ingest (bulk, Parquet)':<34}{bulk['n']:>10}{bulk['seconds']:>10.2f}"
        f"{bulk_rate:>12.0f}{bulk['peak_rss_mb']:>13.0f}"
    )
    print(
        f"{'baseline: row-by-row session.add':<34}{naive['n']:>10}{naive['seconds']:>10.2f}"
        f"{naive_rate:>12.0f}{naive['peak_rss_mb']:>13.0f}"
    )
    print(
        f"speed ratio bulk / baseline: {bulk_rate / naive_rate:.1f}x "
        f"(target >= 20,000 records/s, peak RSS < 1,500 MB)"
    )
    emit(
        {
            "bench": "ingest",
            "smoke": args.smoke,
            "n": bulk["n"],
            "tokens_per_record": args.tokens,
            "records_per_s": round(bulk_rate),
            "peak_rss_mb": round(bulk["peak_rss_mb"]),
            "baseline_records_per_s": round(naive_rate),
            "ratio_vs_baseline": round(bulk_rate / naive_rate, 2),
        },
        args.json_out,
    )


if __name__ == "__main__":
    main()
