"""The GPU path: token entropies/log-probs and the exact covariance with the data on the device.

Chosen by :func:`rcea.pipeline.probe.entropy_kernel.token_stats` and by ``rcea probe
covariance`` when the model is on CUDA (the CPU paths stay as they are). Per batch of
sequences:

1. the decoder runs once; the hidden states of every scored position are gathered with one
   index operation ([N × H] in the model's dtype) and the decoder's output is freed;
2. the vocabulary is walked in tiles: the LM head's matmul for a tile of columns is written
   in the model's dtype into one reused [N × width] buffer (``torch.matmul``/``addmm`` with
   ``out=``: the fp32-accumulated product rounded once to the model's dtype, as the Hugging
   Face head rounds its logits), and one fold kernel per tile merges it into per-row running
   statistics (:mod:`rcea.pipeline.probe.triton_folds`, or the same folds in plain torch,
   :func:`torch_fold_entropy` / :func:`torch_fold_covariance`, where Triton is absent);
3. the statistics are finished on the device and copied to the host once per batch.

No step waits for the host between tiles, so the head matmuls and folds queue back to back;
the head weight is read once per batch (not once per row chunk) and the extra memory is the
tile, ``tile_elements`` values of the model's dtype (64 MiB in bf16 at the default), plus
O(N) state. Without Triton the plain-torch fold is used: ``torch.compile`` would not help
there, because Inductor's GPU code is itself Triton.

The tile width: ``tile_elements // N`` columns rounded down to a multiple of the kernel's
``BLOCK`` (at least one block, at most the vocabulary); with more than ``tile_elements //
BLOCK`` scored positions the rows are split into groups of that many and the vocabulary is
walked once per group. The covariance holds two tiles (both checkpoints' heads over the
same columns), each half the budget, and folds them in float64.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from rcea.audits.covariance import EntropyChange
from rcea.pipeline.probe.teacher_forcing import (
    TokenStats,
    decoder_and_head,
    hidden_states,
    padded_batch,
)

#: Values per logits tile (64 MiB of bf16): large enough that each head matmul is a big GEMM
#: and the per-tile launches are few (19 tiles for 4,096 rows of Qwen2.5's vocabulary), small
#: against the 0.3 GiB target for the path's extra memory (docs/benchmarks.md).
DEVICE_TILE_ELEMENTS = 2**25

#: Columns per Triton program step on CUDA (a row's tile is walked BLOCK columns at a time).
DEVICE_BLOCK = 1024

FOLDS = ("triton", "torch")


def triton_available() -> bool:
    """Whether Triton can be imported (CUDA builds of torch ship it)."""
    return importlib.util.find_spec("triton") is not None


def resolve_fold(fold: str, device: Any) -> str:
    """``auto`` → ``triton`` where Triton imports and can run on ``device`` (CUDA, or CPU
    under Triton's interpreter), else ``torch``; a named fold as given."""
    if fold not in ("auto", *FOLDS):
        raise ValueError(f"fold must be auto, triton or torch, got {fold!r}")
    if fold == "torch":
        return fold
    if not triton_available():
        if fold == "triton":
            raise ValueError("fold = triton, but Triton is not installed")
        return "torch"
    if fold == "auto" and torch.device(device).type != "cuda":
        # imported here: Triton loads only where a Triton fold may run
        from rcea.pipeline.probe.triton_folds import interpreter_active

        return "triton" if interpreter_active() else "torch"
    return "triton"


# --------------------------------------------------------------------------- folds


def new_entropy_state(rows: int, device: Any) -> Any:
    """[4, rows] float32: m = −inf, S = 0, T = 0, z(y) = 0."""
    state = torch.zeros(4, rows, dtype=torch.float32, device=device)
    state[0].fill_(float("-inf"))
    return state


def torch_fold_entropy(tile: Any, col0: int, targets: Any, state: Any, temperature: float) -> None:
    """The Triton entropy fold in plain torch (same state, same formulas; one tile at once)."""
    m, s, t, zy = state
    z = tile.float()
    width = z.shape[1]
    new_m = torch.maximum(m, z.amax(1))
    shift = torch.where(torch.isneginf(new_m), 0.0, new_m)
    live = ~torch.isneginf(m)
    d = torch.where(live, (shift - m) / temperature, 0.0)
    r = torch.where(live, torch.exp(-d), 0.0)
    t.copy_(r * (t - d * s))
    s.mul_(r)
    u = (z - shift[:, None]) / temperature
    e = torch.exp(u)
    s += e.sum(1)
    t += (e * torch.where(torch.isneginf(z), 0.0, u)).sum(1)  # 0 · log 0 = 0
    m.copy_(new_m)
    local = targets - col0
    here = (local >= 0) & (local < width)
    picked = z.gather(1, local.clamp(0, width - 1)[:, None]).squeeze(1)
    zy.copy_(torch.where(here, picked, zy))


def finish_entropy(state: Any, temperature: float) -> tuple[Any, Any]:
    """(h, log p(y)) float32 from the folded state: h = log S − T/S,
    log p(y) = (z(y) − m)/τ − log S."""
    m, s, t, zy = state
    log_s = s.log()
    return log_s - t / s, (zy - m) / temperature - log_s


def new_covariance_state(rows: int, device: Any) -> Any:
    """[9, rows] float64: m, S, A, B, C, m′, S′, A′ (maxima −inf, sums 0) and the pivot p
    of δ (set from the first tile by :func:`set_pivot`)."""
    state = torch.zeros(9, rows, dtype=torch.float64, device=device)
    state[0].fill_(float("-inf"))
    state[5].fill_(float("-inf"))
    return state


def set_pivot(state: Any, old: Any, new: Any) -> None:
    """p = z′ − z at the tile's first column (column 0: the first tile), per row: δ − p has
    no common shift, so the one-pass B and C stay small (a constant shift of z′ leaves the
    covariance unchanged; without the pivot a shift of 5 costs 1,000× in relative error,
    docs/probing.md)."""
    state[8].copy_(new[:, 0].double() - old[:, 0].double())


def _rescale(m: Any, block_max: Any) -> tuple[Any, Any, Any]:
    new_m = torch.maximum(m, block_max)
    live = ~torch.isneginf(m)
    d = torch.where(live, new_m - m, 0.0)
    r = torch.where(live, torch.exp(-d), 0.0)
    return new_m, d, r


def torch_fold_covariance(old: Any, new: Any, state: Any) -> None:
    """The Triton covariance fold in plain torch (float64, one tile at once)."""
    m, s, a, b, c, m2, s2, a2, pivot = state
    z = old.double()
    z2 = new.double()
    new_m, d, r = _rescale(m, z.amax(1))
    a.copy_(r * (a - d * s))
    c.copy_(r * (c - d * b))
    s.mul_(r)
    b.mul_(r)
    u = z - new_m[:, None]
    e = u.exp()
    dz = z2 - z - pivot[:, None]
    eu = e * u
    s += e.sum(1)
    a += eu.sum(1)
    b += (e * dz).sum(1)
    c += (eu * dz).sum(1)
    m.copy_(new_m)
    new_m2, d2, r2 = _rescale(m2, z2.amax(1))
    a2.copy_(r2 * (a2 - d2 * s2))
    s2.mul_(r2)
    u2 = z2 - new_m2[:, None]
    e2 = u2.exp()
    s2 += e2.sum(1)
    a2 += (e2 * u2).sum(1)
    m2.copy_(new_m2)


def finish_covariance(state: Any) -> Any:
    """[4, rows] float64: predicted Δh = −(C/S − A·B/S²), observed Δh = H′ − H, H, H′."""
    _, s, a, b, c, _, s2, a2, _ = state
    h_old = s.log() - a / s
    h_new = s2.log() - a2 / s2
    mean_u = a / s
    pred = -(c / s - mean_u * (b / s))
    return torch.stack([pred, h_new - h_old, h_old, h_new])


# --------------------------------------------------------------------------- tiles


def tile_columns(rows: int, vocab: int, tile_elements: int, block: int) -> int:
    """Columns per tile: ``tile_elements // rows`` rounded down to whole blocks, at least one
    block, at most the vocabulary (module docstring)."""
    cols = max(block, (tile_elements // max(rows, 1)) // block * block)
    return min(vocab, cols)


def row_groups(rows: int, tile_elements: int, block: int) -> Iterator[tuple[int, int]]:
    """[r0, r1) groups of at most ``tile_elements // block`` rows (one block-wide tile each)."""
    size = max(1, tile_elements // block)
    for r0 in range(0, rows, size):
        yield r0, min(r0 + size, rows)


class HeadTiles:
    """The LM head's logits for fixed rows, one reused [rows × width] tile at a time."""

    def __init__(self, head: Any, rows: Any, width: int) -> None:
        self.head = head
        self.rows = rows
        self.linear = isinstance(head, torch.nn.Linear)
        if self.linear:
            self.weight = head.weight
            self.bias = head.bias
            self.vocab = int(head.out_features)
            self.width = min(width, self.vocab)
            dtype = self.weight.dtype if rows.dtype == self.weight.dtype else None
            dtype = dtype or torch.result_type(rows, self.weight)
            self.buffer = torch.empty(rows.shape[0], self.width, dtype=dtype, device=rows.device)

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        if not self.linear:  # an unknown head: called once on the rows, one tile
            yield 0, self.head(self.rows)
            return
        n = self.rows.shape[0]
        for v0 in range(0, self.vocab, self.width):
            v1 = min(v0 + self.width, self.vocab)
            out = self.buffer.view(-1)[: n * (v1 - v0)].view(n, v1 - v0)
            w = self.weight[v0:v1].t()
            if self.bias is None:
                torch.matmul(self.rows, w, out=out)
            else:
                torch.addmm(self.bias[v0:v1], self.rows, w, out=out)
            yield v0, out


class LogitTiles:
    """Column tiles of a given logits matrix (tests, the device check)."""

    def __init__(self, logits: Any, width: int) -> None:
        self.logits = logits
        self.width = width

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        vocab = self.logits.shape[1]
        for v0 in range(0, vocab, self.width):
            yield v0, self.logits[:, v0 : min(v0 + self.width, vocab)]


def _block(device: Any, block: int | None) -> int:
    if block is not None:
        return block
    return DEVICE_BLOCK if torch.device(device).type == "cuda" else 128


# --------------------------------------------------------------------------- entropy


def fold_entropy_tiles(tiles: Any, targets: Any, temperature: float, fold: str, block: int) -> Any:
    """[4, rows] entropy state after folding every tile of ``tiles``."""
    state = new_entropy_state(targets.shape[0], targets.device)
    for col0, tile in tiles:
        if fold == "triton":
            # imported here: Triton is needed only by this fold (CUDA builds of torch ship it)
            from rcea.pipeline.probe.triton_folds import fold_entropy

            fold_entropy(tile, col0, targets, state, temperature, block)
        else:
            torch_fold_entropy(tile, col0, targets, state, temperature)
    return state


def entropy_from_logits(
    logits: Any,
    targets: Any,
    *,
    temperature: float = 1.0,
    fold: str = "auto",
    tile_columns_: int | None = None,
    block: int | None = None,
) -> tuple[Any, Any]:
    """(entropy, log p(target)) float32 of every row of ``logits`` [rows × vocab], folded
    tile by tile on the logits' device (tests and the device check)."""
    fold = resolve_fold(fold, logits.device)
    block = _block(logits.device, block)
    width = tile_columns_ or tile_columns(
        logits.shape[0], logits.shape[1], DEVICE_TILE_ELEMENTS, block
    )
    state = fold_entropy_tiles(LogitTiles(logits, width), targets, temperature, fold, block)
    return finish_entropy(state, temperature)


def device_token_stats(
    model: Any,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    *,
    temperature: float = 1.0,
    batch_size: int = 16,
    pad_id: int = 0,
    fold: str = "auto",
    tile_elements: int = DEVICE_TILE_ELEMENTS,
    block: int | None = None,
) -> list[TokenStats]:
    """:func:`rcea.pipeline.probe.entropy_kernel.token_stats` with the data on the model's
    device (module docstring); same results within float32 rounding."""
    _, head = decoder_and_head(model)
    device = next(model.parameters()).device
    fold = resolve_fold(fold, device)
    block = _block(device, block)
    model.eval()
    out: list[TokenStats] = []
    for b0 in range(0, len(prompts), batch_size):
        b1 = min(b0 + batch_size, len(prompts))
        comps = completions[b0:b1]
        ids, mask, plen = padded_batch(prompts[b0:b1], comps, pad_id)
        rb, rt = _row_index(plen, [len(c) for c in comps])
        index = torch.from_numpy(np.stack([rb, rt]))
        tgt = torch.tensor([t for c in comps for t in c], dtype=torch.long)
        index, tgt = index.to(device), tgt.to(device)
        with torch.no_grad():
            hid = hidden_states(model, ids.to(device), mask.to(device))
            rows = hid[index[0], index[1]]
            del hid
            res = torch.empty(2, rows.shape[0], dtype=torch.float32, device=device)
            for r0, r1 in row_groups(rows.shape[0], tile_elements, block):
                width = tile_columns(r1 - r0, _vocab(head), tile_elements, block)
                tiles = HeadTiles(head, rows[r0:r1], width)
                state = fold_entropy_tiles(tiles, tgt[r0:r1], temperature, fold, block)
                h, lp = finish_entropy(state, temperature)
                res[0, r0:r1] = h
                res[1, r0:r1] = lp
            del rows
        host = res.cpu().numpy()  # the one transfer of this batch
        offset = 0
        for c in comps:
            n = len(c)
            out.append(
                TokenStats(host[0, offset : offset + n].copy(), host[1, offset : offset + n].copy())
            )
            offset += n
    return out


def _vocab(head: Any) -> int:
    return int(head.out_features) if isinstance(head, torch.nn.Linear) else 1 << 62


def _row_index(plen: Sequence[int], lengths: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(sequence, position) of every scored row: row r of sequence i predicts token r of its
    completion from position plen[i] − 1 + r."""
    rb = np.concatenate([np.full(n, i, dtype=np.int64) for i, n in enumerate(lengths)])
    rt = np.concatenate(
        [np.arange(p - 1, p - 1 + n, dtype=np.int64) for p, n in zip(plen, lengths, strict=True)]
    )
    return rb, rt


# --------------------------------------------------------------------------- covariance


def fold_covariance_tiles(old_tiles: Any, new_tiles: Any, rows: int, device: Any, fold: str,
                          block: int) -> Any:  # fmt: skip
    """[9, rows] covariance state after folding the paired tiles (same columns)."""
    state = new_covariance_state(rows, device)
    for (c_old, t_old), (c_new, t_new) in zip(old_tiles, new_tiles, strict=True):
        if c_old != c_new or t_old.shape != t_new.shape:
            raise ValueError("the two checkpoints' heads differ in vocabulary size")
        if c_old == 0:
            set_pivot(state, t_old, t_new)
        if fold == "triton":
            # imported here: Triton is needed only by this fold (CUDA builds of torch ship it)
            from rcea.pipeline.probe.triton_folds import fold_covariance

            fold_covariance(t_old, t_new, state, block)
        else:
            torch_fold_covariance(t_old, t_new, state)
    return state


def _entropy_change(result: Any, rows: int) -> EntropyChange:
    host = result.cpu().numpy()  # the one transfer
    bad = ~np.isfinite(host).all(0)
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"logits_old or logits_new contain a non-finite value (NaN or inf) at position {pos}"
        )
    return EntropyChange(
        predicted=host[0].copy(),
        observed=host[1].copy(),
        entropy_old=host[2].copy(),
        entropy_new=host[3].copy(),
        chunk_rows=rows,
    )


def entropy_change_from_logits(
    logits_old: Any,
    logits_new: Any,
    *,
    fold: str = "auto",
    tile_columns_: int | None = None,
    block: int | None = None,
) -> EntropyChange:
    """:func:`rcea.audits.covariance.entropy_change_pair` folded tile by tile on the logits'
    device (float64 arithmetic; tests and the device check)."""
    if logits_old.shape != logits_new.shape or logits_old.dim() != 2:
        raise ValueError(
            f"logits_old and logits_new must be 2-D of one shape, got "
            f"{tuple(logits_old.shape)} and {tuple(logits_new.shape)}"
        )
    fold = resolve_fold(fold, logits_old.device)
    rows, vocab = logits_old.shape
    block = _block(logits_old.device, block)
    width = tile_columns_ or tile_columns(rows, vocab, DEVICE_TILE_ELEMENTS, block)
    state = fold_covariance_tiles(
        LogitTiles(logits_old, width),
        LogitTiles(logits_new, width),
        rows,
        logits_old.device,
        fold,
        block,
    )
    return _entropy_change(finish_covariance(state), rows)


def device_entropy_change(
    model_old: Any,
    model_new: Any,
    prompts: list[list[int]],
    completions: list[list[int]],
    positions: list[np.ndarray],
    pad_id: int,
    *,
    fold: str = "auto",
    tile_elements: int = DEVICE_TILE_ELEMENTS,
    block: int | None = None,
) -> EntropyChange:
    """Predicted and observed Δh at completion positions ``positions[i]`` of sequence i (in
    order), both checkpoints' heads applied tile by tile on the device: the same numbers as
    ``entropy_change_pair(position_logits(old…), position_logits(new…))`` without the
    [positions × vocab] logits ever leaving the device (or existing at once)."""
    device = next(model_old.parameters()).device
    fold = resolve_fold(fold, device)
    block = _block(device, block)
    ids, mask, plen = padded_batch(prompts, completions, pad_id)
    rb = np.concatenate([np.full(len(p), i, dtype=np.int64) for i, p in enumerate(positions)])
    rt = np.concatenate([plen[i] - 1 + np.asarray(p, dtype=np.int64)
                         for i, p in enumerate(positions)])  # fmt: skip
    index = torch.from_numpy(np.stack([rb, rt])).to(device)
    ids, mask = ids.to(device), mask.to(device)
    with torch.no_grad():
        picked = []
        for model in (model_old, model_new):
            model.eval()
            hid = hidden_states(model, ids, mask)
            picked.append(hid[index[0], index[1]])
            del hid
        rows_old, rows_new = picked
        n = rows_old.shape[0]
        _, head_old = decoder_and_head(model_old)
        _, head_new = decoder_and_head(model_new)
        result = torch.empty(4, n, dtype=torch.float64, device=device)
        # two tiles (old and new) share the budget
        for r0, r1 in row_groups(n, tile_elements // 2, block):
            width = tile_columns(r1 - r0, _vocab(head_old), tile_elements // 2, block)
            state = fold_covariance_tiles(
                HeadTiles(head_old, rows_old[r0:r1], width),
                HeadTiles(head_new, rows_new[r0:r1], width),
                r1 - r0,
                device,
                fold,
                block,
            )
            result[:, r0:r1] = finish_covariance(state)
    return _entropy_change(result, n)
