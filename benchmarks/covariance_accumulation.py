"""Which accumulation the device covariance fold needs: the largest relative difference of
predicted and observed Δh from the float64 host kernel (``rcea.audits.covariance.
entropy_change_pair``, two-pass centring) for

* ``float64_one_pass`` — the device fold (``rcea.pipeline.probe.device_stats.
  torch_fold_covariance``, the Triton kernel's formulas): float64 per element and across
  tiles, one pass with the rescaling on a new max, δ taken relative to its value at
  column 0 (the pivot);
* ``float64_one_pass_no_pivot`` — the same without the pivot;
* ``float32_one_pass`` — the same one-pass formulas in float32;
* ``float32_two_pass`` — float32, centred in two passes (first the max, S, E[u], E[δ];
  then Σ e·(u − E u)(δ − E δ)), the other way the issue names;

on the same logits: old ~ 3·N(0, 1) and new = old + 0.1·N(0, 1) (+ ``--offset``: a constant
shift, which leaves Δh unchanged and makes the one-pass sums B and C large), ΔH ~ 1e-2.
The requirement is 1e-9 relative. A precision study, not a speed bench (so not a
``bench_*.py``: ``make bench`` does not run it); docs/probing.md quotes its output.

    python benchmarks/covariance_accumulation.py [--rows 64] [--vocab 151936]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _one_pass(old, new, width: int, dtype, pivot: bool = True):  # type: ignore[no-untyped-def]
    import torch

    from rcea.pipeline.probe.device_stats import (
        finish_covariance,
        new_covariance_state,
        set_pivot,
        torch_fold_covariance,
    )

    if dtype == torch.float64:
        state = new_covariance_state(old.shape[0], "cpu")
        if pivot:
            set_pivot(state, old, new)
        for v0 in range(0, old.shape[1], width):
            torch_fold_covariance(old[:, v0 : v0 + width], new[:, v0 : v0 + width], state)
        return finish_covariance(state)
    # the same formulas in float32 (the fold casts to float64, so they are restated here)
    z, z2 = old.float(), new.float()
    n = z.shape[0]
    m = torch.full((n,), float("-inf"))
    m2 = m.clone()
    s, a, b, c, s2, a2 = (torch.zeros(n) for _ in range(6))
    for v0 in range(0, z.shape[1], width):
        t, t2 = z[:, v0 : v0 + width], z2[:, v0 : v0 + width]
        nm = torch.maximum(m, t.amax(1))
        d = torch.where(torch.isneginf(m), 0.0, nm - m)
        r = torch.where(torch.isneginf(m), 0.0, torch.exp(-d))
        a, c, s, b = r * (a - d * s), r * (c - d * b), r * s, r * b
        u = t - nm[:, None]
        e = u.exp()
        dz = t2 - t
        s, a, b, c = s + e.sum(1), a + (e * u).sum(1), b + (e * dz).sum(1), c + (e * u * dz).sum(1)
        m = nm
        nm2 = torch.maximum(m2, t2.amax(1))
        d2 = torch.where(torch.isneginf(m2), 0.0, nm2 - m2)
        r2 = torch.where(torch.isneginf(m2), 0.0, torch.exp(-d2))
        a2, s2 = r2 * (a2 - d2 * s2), r2 * s2
        u2 = t2 - nm2[:, None]
        e2 = u2.exp()
        s2, a2 = s2 + e2.sum(1), a2 + (e2 * u2).sum(1)
        m2 = nm2
    h_old = s.log() - a / s
    h_new = s2.log() - a2 / s2
    return torch.stack([-(c / s - (a / s) * (b / s)), h_new - h_old]).double()


def _two_pass_f32(old, new):  # type: ignore[no-untyped-def]
    import torch

    z, z2 = old.float(), new.float()
    u = z - z.amax(1, keepdim=True)
    e = u.exp()
    s = e.sum(1, keepdim=True)
    dz = z2 - z
    mu, md = (e * u).sum(1, keepdim=True) / s, (e * dz).sum(1, keepdim=True) / s
    pred = -((e * (u - mu) * (dz - md)).sum(1, keepdim=True) / s)
    h_old = s.log() - mu
    u2 = z2 - z2.amax(1, keepdim=True)
    e2 = u2.exp()
    s2 = e2.sum(1, keepdim=True)
    h_new = s2.log() - (e2 * u2).sum(1, keepdim=True) / s2
    return torch.cat([pred, h_new - h_old], 1).t().double()


def main(argv: list[str] | None = None) -> int:
    import numpy as np
    import torch

    from rcea.audits.covariance import entropy_change_pair

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--tile", type=int, default=8192, help="columns per tile")
    args = ap.parse_args(argv)
    gen = torch.Generator().manual_seed(0)
    old = 3.0 * torch.randn(args.rows, args.vocab, generator=gen)
    noise = 0.1 * torch.randn(args.rows, args.vocab, generator=gen)
    figures: dict[str, dict[str, float]] = {}
    for offset in (0.0, 5.0, 50.0):
        new = old + noise + offset
        ref = entropy_change_pair(old.numpy(), new.numpy())
        ref_rows = np.stack([ref.predicted, ref.observed])
        results = {
            "float64_one_pass": _one_pass(old, new, args.tile, torch.float64),
            "float64_one_pass_no_pivot": _one_pass(old, new, args.tile, torch.float64, False),
            "float32_one_pass": _one_pass(old, new, args.tile, torch.float32),
            "float32_two_pass": _two_pass_f32(old, new),
        }
        for name, got in results.items():
            rel = np.abs(got[:2].numpy() - ref_rows) / np.abs(ref_rows)
            key = f"{name}_offset{offset:g}"
            figures[key] = {"predicted": float(rel[0].max()), "observed": float(rel[1].max())}
        figures[f"median_abs_observed_offset{offset:g}"] = {
            "predicted": float(np.median(np.abs(ref.predicted))),
            "observed": float(np.median(np.abs(ref.observed))),
        }
    for key, fig in figures.items():
        print(f"{key:34s} predicted {fig['predicted']:.2e}  observed {fig['observed']:.2e}")
    print(
        json.dumps({"rows": args.rows, "vocab": args.vocab, "tile": args.tile, "max_rel": figures})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
