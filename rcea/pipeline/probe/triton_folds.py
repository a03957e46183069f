"""Triton kernels that fold one tile of LM-head logits into per-row running statistics.

The device path (:mod:`rcea.pipeline.probe.device_stats`) walks the vocabulary in tiles
[rows × width] and calls one of these kernels per tile; every program owns one row, loads
its running state, walks the tile's columns ``BLOCK`` at a time, and stores the state
back. Nothing is synchronised with the host: the state lives on the device until the
last tile.

``fold_entropy`` (float32, τ applied in registers): for raw logits z, running max m,
u = (z − m)/τ (shifted before the division: z − m is exact for bf16 logits, and the
rounding of z/τ at |z/τ| ≈ 20 alone is 1e-6), S = Σ e^u, T = Σ e^u·u and the target's raw
logit z(y). On a new max m′ ≥ m, with d = (m′ − m)/τ and r = e^(−d): S ← r·S,
T ← r·(T − d·S). −inf logits (masked vocabulary) count e = 0 and e·u = 0; a row whose
columns so far are all −inf keeps S = T = 0 and m = −inf. Then h = log S − T/S and
log p(y) = (z(y) − m)/τ − log S (:func:`rcea.pipeline.probe.device_stats.finish_entropy`).
T sums e·u ≤ 0 and h = log S + (−T/S) adds two non-negative terms: no cancellation,
unlike log Z − E[z]. Compiled, e^u is libdevice's ``expf`` (within 2 ulp) rather than
``tl.exp`` (``ex2.approx`` of u·log2 e, whose rounding grows with |u|); the interpreter,
which has no libdevice, uses numpy's exp.

``fold_covariance`` (float64 throughout): for old logits z and new logits z′ of the same
rows, u = z − m, e = e^u, δ = z′ − z − p (p: the row's z′ − z at column 0, a pivot that
removes a common shift of the new logits, to which the covariance is blind but the
one-pass sums are not), running S = Σ e, A = Σ e·u, B = Σ e·δ, C = Σ e·u·δ,
and the new logits' own m′, S′, A′ = Σ e′·u′. On a new max (shift d = m_new − m ≥ 0,
r = e^(−d)): S ← r S, A ← r (A − d S), B ← r B, C ← r (C − d B). Then H = log S − A/S,
H′ = log S′ − A′/S′, predicted Δh = −(C/S − A·B/S²) and observed Δh = H′ − H
(:func:`rcea.pipeline.probe.device_stats.finish_covariance`). Float64 per element and
across tiles: the products e·u·δ and the difference C/S − A·B/S² lose digits to
cancellation, which float32 cannot spare at the required 1e-9 (docs/probing.md, "GPU
path", has the numbers).

Compiled for CUDA tensors; under Triton's interpreter (``TRITON_INTERPRET=1`` when Triton
is first imported: its own library functions are wrapped then) they run on CPU tensors with
the CPU torch (Triton 3.9), which is how the tests check them without a GPU.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import triton
import triton.language as tl
from triton.language.extra import libdevice
from triton.runtime.interpreter import InterpretedFunction


def _fold_entropy(
    tile_ptr,
    stride_row,
    width,
    col0,
    targets_ptr,
    m_ptr,
    s_ptr,
    t_ptr,
    zy_ptr,
    temperature,
    BLOCK: tl.constexpr,
    PRECISE_EXP: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    base = tile_ptr + row * stride_row
    m = tl.load(m_ptr + row)
    s = tl.load(s_ptr + row)
    t = tl.load(t_ptr + row)
    neg_inf = float("-inf")
    for start in range(0, width, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        inside = cols < width
        z = tl.load(base + cols, mask=inside, other=neg_inf).to(tl.float32)
        new_m = tl.maximum(m, tl.max(z, 0))
        shift = tl.where(new_m == neg_inf, 0.0, new_m)  # all −inf so far: no nan shift
        live = m != neg_inf
        d = tl.where(live, tl.div_rn(shift - m, temperature), 0.0)
        u = tl.div_rn(z - shift, temperature)  # shifted first: exact for bf16 logits
        if PRECISE_EXP:  # libdevice's expf (≤ 2 ulp); tl.exp is ex2.approx(x·log2 e)
            r = tl.where(live, libdevice.exp(-d), 0.0)
            e = libdevice.exp(u)
        else:
            r = tl.where(live, tl.exp(-d), 0.0)
            e = tl.exp(u)  # 0 where z = −inf (masked or past the tile)
        t = r * (t - d * s)
        s = r * s
        s += tl.sum(e, 0)
        t += tl.sum(e * tl.where(z != neg_inf, u, 0.0), 0)  # 0 · log 0 = 0
        m = new_m
    tl.store(m_ptr + row, m)
    tl.store(s_ptr + row, s)
    tl.store(t_ptr + row, t)
    local = tl.load(targets_ptr + row) - col0
    here = (local >= 0) & (local < width)
    zy = tl.load(base + tl.where(here, local, 0)).to(tl.float32)
    tl.store(zy_ptr + row, zy, mask=here)


def _fold_covariance(
    old_ptr,
    new_ptr,
    stride_old,
    stride_new,
    width,
    state_ptr,
    n_rows,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    old_base = old_ptr + row * stride_old
    new_base = new_ptr + row * stride_new
    # state [9, n_rows] float64: m, S, A, B, C, m′, S′, A′ and the pivot p of δ
    m = tl.load(state_ptr + row)
    s = tl.load(state_ptr + n_rows + row)
    a = tl.load(state_ptr + 2 * n_rows + row)
    b = tl.load(state_ptr + 3 * n_rows + row)
    c = tl.load(state_ptr + 4 * n_rows + row)
    m2 = tl.load(state_ptr + 5 * n_rows + row)
    s2 = tl.load(state_ptr + 6 * n_rows + row)
    a2 = tl.load(state_ptr + 7 * n_rows + row)
    pivot = tl.load(state_ptr + 8 * n_rows + row)
    neg_inf = float("-inf")
    for start in range(0, width, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        inside = cols < width
        z = tl.load(old_base + cols, mask=inside, other=0.0).to(tl.float64)
        z2 = tl.load(new_base + cols, mask=inside, other=0.0).to(tl.float64)
        # old logits: rescale to the new max, then add this block
        new_m = tl.maximum(m, tl.max(tl.where(inside, z, neg_inf), 0))
        live = m != neg_inf
        d = tl.where(live, new_m - m, 0.0)
        r = tl.where(live, tl.exp(-d), 0.0)
        a = r * (a - d * s)
        c = r * (c - d * b)
        s = r * s
        b = r * b
        u = z - new_m
        e = tl.where(inside, tl.exp(u), 0.0)
        dz = z2 - z - pivot
        eu = e * u
        s += tl.sum(e, 0)
        a += tl.sum(eu, 0)
        b += tl.sum(e * dz, 0)
        c += tl.sum(eu * dz, 0)
        m = new_m
        # new logits: their own max, sum and Σ e′·u′
        new_m2 = tl.maximum(m2, tl.max(tl.where(inside, z2, neg_inf), 0))
        live2 = m2 != neg_inf
        d2 = tl.where(live2, new_m2 - m2, 0.0)
        r2 = tl.where(live2, tl.exp(-d2), 0.0)
        a2 = r2 * (a2 - d2 * s2)
        s2 = r2 * s2
        u2 = z2 - new_m2
        e2 = tl.where(inside, tl.exp(u2), 0.0)
        s2 += tl.sum(e2, 0)
        a2 += tl.sum(e2 * u2, 0)
        m2 = new_m2
    tl.store(state_ptr + row, m)
    tl.store(state_ptr + n_rows + row, s)
    tl.store(state_ptr + 2 * n_rows + row, a)
    tl.store(state_ptr + 3 * n_rows + row, b)
    tl.store(state_ptr + 4 * n_rows + row, c)
    tl.store(state_ptr + 5 * n_rows + row, m2)
    tl.store(state_ptr + 6 * n_rows + row, s2)
    tl.store(state_ptr + 7 * n_rows + row, a2)


@dataclass(frozen=True)
class Kernels:
    """The two fold kernels of one mode (compiled or interpreted)."""

    entropy: Any
    covariance: Any


def interpreter_active() -> bool:
    """Whether Triton was imported in interpreter mode (its library functions interpreted)."""
    return isinstance(tl.max, InterpretedFunction)


@functools.cache
def kernels() -> Kernels:
    """The two kernels, wrapped in the mode Triton runs in (at first use, not at import, so
    that the mode is Triton's and not whatever the environment said later)."""
    with triton.knobs.runtime.scope():
        triton.knobs.runtime.interpret = interpreter_active()
        return Kernels(triton.jit(_fold_entropy), triton.jit(_fold_covariance))


def _check_device(tensor: Any) -> None:
    if tensor.device.type != "cuda" and not interpreter_active():
        raise ValueError(
            f"the Triton folds run on CUDA tensors (or on CPU tensors under Triton's "
            f"interpreter, TRITON_INTERPRET=1 before Triton is imported); got {tensor.device}"
        )


def fold_entropy(
    tile: Any,
    col0: int,
    targets: Any,
    state: Any,
    temperature: float,
    block: int,
) -> None:
    """Fold ``tile`` (logits of columns col0.., [rows × width], unit column stride) into
    ``state`` ([4, rows] float32: m, S, T, z(y)) in place."""
    rows, width = tile.shape
    _check_device(tile)
    k = kernels().entropy
    k[(rows,)](
        tile,
        tile.stride(0),
        width,
        col0,
        targets,
        state[0],
        state[1],
        state[2],
        state[3],
        float(temperature),
        BLOCK=block,
        PRECISE_EXP=not interpreter_active(),  # the interpreter has no libdevice
    )


def fold_covariance(old: Any, new: Any, state: Any, block: int) -> None:
    """Fold the tiles ``old``/``new`` (same columns, [rows × width]) into ``state``
    ([9, rows] float64, contiguous; its pivot row set) in place."""
    rows, width = old.shape
    _check_device(old)
    k = kernels().covariance
    k[(rows,)](old, new, old.stride(0), new.stride(0), width, state, rows, BLOCK=block)
