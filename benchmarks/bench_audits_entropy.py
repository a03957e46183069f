"""Benchmark of the audits bootstraps (not a test).

1. Hierarchical paired bootstrap of the token-entropy ratio (docs/estimators.md item 3),
   200 questions × 64 samples, all 200 questions paired (worst case), B = 10,000:
   vectorised implementation vs the plain Python-loop reference. The loop runs a smaller
   B and its time is scaled linearly to B = 10,000 (said so in the output).
2. Rarefied retention (item 5): 125 questions, 20 draws per checkpoint, B = 10,000.

Run:  .venv/bin/python benchmarks/bench_audits_entropy.py [--loop-boot 200] [--repeats 3]
``--smoke`` runs tiny sizes in seconds (``make test`` runs it so the script cannot rot).
The last line of output is one JSON object with all figures.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
from common import add_json_out, emit  # benchmarks/common.py

from rcea.audits.entropy import _paired_bootstrap, _paired_bootstrap_loop
from rcea.audits.modes import rarefied_retention


def _paired_data(n_questions: int = 200, k: int = 64, seed: int = 0):
    rng = np.random.default_rng(seed)
    succ, fail = [], []
    for _ in range(n_questions):
        k_plus = int(rng.integers(8, k - 8 + 1))  # both outcomes ≥ 8 → every question in E
        base = rng.uniform(0.3, 1.0)
        succ.append(np.sort(rng.gamma(4, base / 4, k_plus)))
        fail.append(np.sort(rng.gamma(4, 1.2 * base / 4, k - k_plus)))
    return succ, fail


def _retention_data(n_questions: int = 125, seed: int = 1):
    rng = np.random.default_rng(seed)
    base, ckpt = {}, {}
    for q in range(n_questions):
        n_modes = int(rng.integers(2, 7))
        p0 = rng.dirichlet(np.ones(n_modes))
        p1 = rng.dirichlet(np.ones(n_modes) * 0.6)
        base[f"q{q}"] = [f"m{z}" for z in rng.choice(n_modes, int(rng.integers(8, 64)), p=p0)]
        ckpt[f"q{q}"] = [f"m{z}" for z in rng.choice(n_modes, int(rng.integers(8, 64)), p=p1)]
    return base, ckpt


def _best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-boot", type=int, default=10_000)
    ap.add_argument("--loop-boot", type=int, default=200, help="B for the slow loop baseline")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: does it still run?")
    add_json_out(ap)
    args = ap.parse_args()
    n_questions = 200
    if args.smoke:
        args.n_boot, args.loop_boot, args.repeats, n_questions = 50, 10, 1, 20
    b = args.n_boot

    succ, fail = _paired_data(n_questions)
    t_vec = _best(lambda: _paired_bootstrap(succ, fail, b, 1), args.repeats)
    t_vec_1 = _best(lambda: _paired_bootstrap(succ, fail, b, 1, n_threads=1), args.repeats)
    t_loop_small = _best(lambda: _paired_bootstrap_loop(succ, fail, args.loop_boot, 1), 1)
    t_loop = t_loop_small * b / args.loop_boot
    reps = _paired_bootstrap(succ, fail, b, 1)
    ci = np.quantile(reps, [0.025, 0.975])

    base, ckpt = _retention_data()
    t_ret = _best(
        lambda: rarefied_retention(base, ckpt, n_draws=20, n_boot=b, seed=3), args.repeats
    )
    ret = rarefied_retention(base, ckpt, n_draws=20, n_boot=b, seed=3)

    rows = [
        ("paired bootstrap, vectorised (default threads)", f"{t_vec:.3f} s"),
        ("paired bootstrap, vectorised (1 thread)", f"{t_vec_1:.3f} s"),
        (
            f"paired bootstrap, Python loop (B={args.loop_boot}, scaled ×{b / args.loop_boot:g})",
            f"{t_loop:.1f} s  (measured {t_loop_small:.2f} s)",
        ),
        ("speed ratio loop / vectorised", f"{t_loop / t_vec:.0f}×"),
        (f"rarefied retention (125 q, 20 draws, B={b})", f"{t_ret:.3f} s"),
    ]
    print(f"CPUs: {os.cpu_count()}  python {platform.python_version()}  numpy {np.__version__}")
    print(f"paired data: {n_questions} questions × 64 samples, all paired; B =", b)
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    print(
        f"(paired 95% CI {ci[0]:.4f}–{ci[1]:.4f}; retention {ret.retention:.4f} "
        f"[{ret.ci_low:.4f}, {ret.ci_high:.4f}], eligible {ret.n_eligible})"
    )
    emit(
        {
            "bench": "audits_entropy",
            "smoke": args.smoke,
            "cpus": os.cpu_count(),
            "n_boot": b,
            "paired_vectorised_s": round(t_vec, 4),
            "paired_vectorised_1thread_s": round(t_vec_1, 4),
            "paired_loop_s_scaled": round(t_loop, 2),
            "paired_loop_n_boot_measured": args.loop_boot,
            "paired_speed_ratio": round(t_loop / t_vec, 1),
            "retention_s": round(t_ret, 4),
            "retention_questions": 125,
            "retention_draws": 20,
        },
        args.json_out,
    )


if __name__ == "__main__":
    main()
