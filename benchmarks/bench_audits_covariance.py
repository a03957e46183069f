"""Benchmark of the exact covariance kernels (rcea.audits.covariance, docs/estimators.md item 6).

Full Qwen2.5 vocabulary (152,064) float32 logits; for each number of positions it times
``entropy_change_pair``, ``predicted_entropy_change`` and ``observed_entropy_change``
and measures the peak *extra* memory (beyond the inputs) with tracemalloc, which tracks
numpy's allocations. Inputs for the largest position count are generated once (in row
chunks, so generation itself stays small) and sliced (views) for the smaller counts.

    .venv/bin/python benchmarks/bench_audits_covariance.py [--positions 512,1024,4096]
        [--vocab 152064] [--max-chunk-mb 64] [--seed 0] [--smoke]

``--smoke`` runs tiny sizes in about a second (tests/benchmarks/test_bench_smoke.py runs it
in ``make test`` so that the script cannot rot); its figures mean nothing.

Prints a table and one JSON line (``{"bench": "audits_covariance", ...}``).
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import tracemalloc

import numpy as np
from common import add_json_out, emit  # benchmarks/common.py

from rcea.audits.covariance import (
    N_WORK_BUFFERS,
    entropy_change_pair,
    observed_entropy_change,
    plan_chunk_rows,
    predicted_entropy_change,
)


def make_logits(n: int, vocab: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Old logits ~ 3·N(0,1); new = old + 0.02·N(0,1) (a small checkpoint step)."""
    rng = np.random.default_rng(seed)
    old = np.empty((n, vocab), dtype=np.float32)
    new = np.empty((n, vocab), dtype=np.float32)
    step = 64
    for i in range(0, n, step):
        j = min(i + step, n)
        old[i:j] = rng.standard_normal((j - i, vocab), dtype=np.float32)
        old[i:j] *= 3.0
        new[i:j] = rng.standard_normal((j - i, vocab), dtype=np.float32)
        new[i:j] *= 0.02
        new[i:j] += old[i:j]
    return old, new


def measure(kernel, old: np.ndarray, new: np.ndarray, max_chunk_bytes: int):
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    t0 = time.perf_counter()
    out = kernel(old, new, max_chunk_bytes=max_chunk_bytes)
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return out, seconds, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--positions", default="512,1024,4096")
    parser.add_argument("--vocab", type=int, default=152_064)
    parser.add_argument("--max-chunk-mb", type=float, default=64.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: does it still run?")
    add_json_out(parser)
    args = parser.parse_args()
    if args.smoke:
        args.positions, args.vocab, args.max_chunk_mb = "16,48", 2_000, 0.125
    positions = sorted({int(p) for p in args.positions.split(",")})
    max_chunk_bytes = int(args.max_chunk_mb * 1024 * 1024)
    rows = plan_chunk_rows(args.vocab, max_chunk_bytes)

    t0 = time.perf_counter()
    old_all, new_all = make_logits(positions[-1], args.vocab, args.seed)
    gen_s = time.perf_counter() - t0
    input_mb = 2 * old_all.nbytes / 2**20

    kernels = {
        "pair": entropy_change_pair,
        "predicted": predicted_entropy_change,
        "observed": observed_entropy_change,
    }
    rows_out = []
    for n in positions:
        old, new = old_all[:n], new_all[:n]
        sanity = None
        for name, kernel in kernels.items():
            out, seconds, peak = measure(kernel, old, new, max_chunk_bytes)
            if name == "pair":
                rel = np.abs(out.predicted - out.observed) / np.abs(out.observed)
                sanity = float(np.median(rel))
            rows_out.append(
                {
                    "kernel": name,
                    "positions": n,
                    "seconds": round(seconds, 3),
                    "positions_per_s": round(n / seconds, 1),
                    "peak_extra_mb": round(peak / 2**20, 1),
                    "input_mb": round(2 * old.nbytes / 2**20, 1),
                }
            )
        rows_out[-3]["median_rel_err_pred_vs_obs"] = round(sanity, 4)

    print(
        f"vocab={args.vocab} chunk_rows={rows} max_chunk_mb={args.max_chunk_mb} "
        f"bound={N_WORK_BUFFERS}x{args.max_chunk_mb:g} MB, inputs generated in {gen_s:.1f}s "
        f"({input_mb:.0f} MB for {positions[-1]} positions), cpus={os.cpu_count()}"
    )
    header = (
        f"{'kernel':<10} {'positions':>9} {'seconds':>8} {'pos/s':>8} {'peak MB':>8} {'in MB':>8}"
    )
    print(header)
    print("-" * len(header))
    for r in rows_out:
        print(
            f"{r['kernel']:<10} {r['positions']:>9} {r['seconds']:>8.2f} "
            f"{r['positions_per_s']:>8.1f} {r['peak_extra_mb']:>8.1f} {r['input_mb']:>8.1f}"
        )
    emit(
        {
            "bench": "audits_covariance",
            "smoke": args.smoke,
            "vocab": args.vocab,
            "dtype": "float32",
            "max_chunk_mb": args.max_chunk_mb,
            "chunk_rows": rows,
            "peak_bound_mb": N_WORK_BUFFERS * args.max_chunk_mb,
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "results": rows_out,
        },
        args.json_out,
    )


if __name__ == "__main__":
    main()
