"""Benchmark of the verifier's ``\\boxed{`` scan on 1 MB texts (not a test).

``rcea.pipeline.judge.verifier.extract_boxed`` scores probe and training rewards; a
degenerate rollout (a million characters of unclosed ``\\boxed{``) must cost what any
million characters cost. Three 1 MB texts: ordinary prose ending in ``\\boxed{42}``,
unclosed ``\\boxed{`` repeated, and ``\\boxed{`` nested and all closed. Baselines in the same
run: the previous scan (from every opener to its closing brace; quadratic, so measured
at 2 KB and 4 KB) on the degenerate text, and verl's ``last_boxed_only_string``
(``verl.utils.reward_score.math_reward``, when verl is importable) on the ordinary text.

Run:  .venv/bin/python benchmarks/bench_verifier.py   (``--smoke``: tiny sizes)
The last line of output is one JSON object with all figures.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from common import add_json_out, emit  # benchmarks/common.py

from rcea.pipeline.judge.verifier import extract_boxed

_OPENERS = ("\\boxed{", "\\fbox{")


def previous_scan(text: str) -> str | None:
    """The scan ``extract_boxed`` replaced (the named baseline): from every opener to its
    closing brace, so O(n²) on unclosed openers."""
    found = None
    pos = 0
    while True:
        hits = [(i, op) for op in _OPENERS if (i := text.find(op, pos)) >= 0]
        if not hits:
            return found
        i, op = min(hits)
        j = k = i + len(op)
        depth = 1
        while k < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[k], 0)
            k += 1
        if depth == 0:
            found = text[j : k - 1].strip()
        pos = j


def _texts(size: int) -> dict[str, str]:
    prose = "Let x = \\frac{a}{b} so that {x} + 1 = y; then we simplify. "
    ordinary = (prose * (size // len(prose) + 1))[: size - 12] + "\\boxed{42}"
    unclosed = "\\boxed{" * (size // 7)
    n = size // 8
    nested = "\\boxed{" * n + "}" * n
    return {"ordinary": ordinary, "unclosed": unclosed, "nested": nested}


def _best(fn, text: str, repeats: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(text)
        times.append(time.perf_counter() - t0)
    return min(times)


def _verl_scan():  # type: ignore[no-untyped-def]
    site = Path(__file__).resolve().parents[1] / ".verl-site"
    if site.is_dir():
        sys.path.insert(0, str(site))
    try:
        from verl.utils.reward_score.math_reward import last_boxed_only_string  # optional peer
    except Exception:  # noqa: BLE001 - verl (and its imports) absent: no such baseline
        return None
    return last_boxed_only_string


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1_000_000, help="text length (characters)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: does it still run?")
    add_json_out(ap)
    args = ap.parse_args()
    small = (2_000, 4_000)
    if args.smoke:
        args.size, args.repeats, small = 20_000, 1, (500, 1_000)
    texts = _texts(args.size)
    linear = {name: _best(extract_boxed, t, args.repeats) for name, t in texts.items()}
    assert extract_boxed(texts["ordinary"]) == "42"
    prev = {s: _best(previous_scan, _texts(s)["unclosed"], 1) for s in small}
    new_small = {s: _best(extract_boxed, _texts(s)["unclosed"], args.repeats) for s in small}
    verl = _verl_scan()
    verl_s = _best(verl, texts["ordinary"], args.repeats) if verl else None
    size_kb = args.size // 1000
    print(f"CPUs: {os.cpu_count()}; texts of {args.size:,} characters")
    for name, t in linear.items():
        print(f"extract_boxed, {name}: {t:.3f} s")
    for s in small:
        print(
            f"unclosed, {s // 1000} KB: previous scan {prev[s]:.3f} s, extract_boxed "
            f"{new_small[s]:.4f} s → {prev[s] / new_small[s]:.0f}×"
        )
    if verl_s is not None:
        print(f"verl last_boxed_only_string, ordinary: {verl_s:.3f} s")
    big = small[-1]
    emit(
        {
            "bench": "verifier",
            "smoke": args.smoke,
            "cpus": os.cpu_count(),
            "size_chars": args.size,
            "size_kb": size_kb,
            "ordinary_s": round(linear["ordinary"], 4),
            "unclosed_s": round(linear["unclosed"], 4),
            "nested_s": round(linear["nested"], 4),
            "previous_kb": big // 1000,
            "previous_unclosed_s": round(prev[big], 4),
            "linear_small_unclosed_s": round(new_small[big], 5),
            "ratio_vs_previous": round(prev[big] / new_small[big], 1),
            "previous_growth": round(prev[small[1]] / prev[small[0]], 2),
            "verl_ordinary_s": None if verl_s is None else round(verl_s, 4),
            "ratio_vs_verl": None if verl_s is None else round(verl_s / linear["ordinary"], 2),
        },
        args.json_out,
    )


if __name__ == "__main__":
    main()
