"""Teacher-forced token entropy and log-probabilities, chunked over positions.

For a completion y = (y_1..y_T) (EOS included when the sample ended) after prompt x, at
sampling temperature τ, the position predicting y_t has logits z_t = W h_t / τ (h_t the
final hidden state, W the LM head). With log p_t = log_softmax(z_t) in float32:

* token entropy      h_t = −Σ_v p_t(v) log p_t(v)           (full vocabulary, nats)
* chosen log-prob    log p_t(y_t)
* sequence log-prob  ℓ = Σ_t log p_t(y_t)                    (float64 sum; EOS included)

computed in float32 as, with u = z_t − max z_t, e = exp(u) and S = Σ_v e(v):
h_t = log S − Σ_v e(v) u(v) / S and log p_t(y_t) = u(y_t) − log S (one exp pass, no
log-probability matrix; shifted values keep float32 within ≈ 1e-6 of a float64 reference).

The decoder runs once per batch of sequences and yields hidden states [B, L, H]; the LM
head is applied to at most ``chunk_size`` completion positions at a time, and within a
chunk to one vocabulary tile at a time: on CPU with one torch thread [chunk × block] with
chunk × block = 2**18
float32 (1 MiB, so that the head's output tile is still in the core's cache when the max,
shift, exp and sums read it — a whole [128 × 151,936] chunk is 78 MB and every pass over it
went to memory); per-tile max, Σ e and Σ e·u are merged exactly at the end (module
:class:`_ChunkBuffers`). Elsewhere (several threads, GPU) one tile spans the vocabulary
(:func:`default_vocab_block`). Two tile buffers
are reused for every chunk and tile, so the extra memory is O(chunk_size × block) ≤
O(chunk_size × vocab) — the [tokens × vocab] matrix never exists at once.

That is the CPU design (tiles that stay in a core's cache). For a model on CUDA
:func:`token_stats` hands over to the GPU path (:mod:`rcea.pipeline.probe.device_stats`:
rows gathered once per batch, bf16 head tiles folded by a Triton kernel, no host
synchronisation between tiles), which computes the same quantities.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from rcea.pipeline.probe.teacher_forcing import (
    TokenStats,
    decoder_and_head,
    hidden_states,
    padded_batch,
)

__all__ = [
    "PATHS",
    "TokenStats",
    "decoder_and_head",
    "default_vocab_block",
    "hidden_states",
    "naive_token_stats",
    "padded_batch",
    "token_stats",
]


def _chunks(n: int, size: int) -> Iterator[tuple[int, int]]:
    for start in range(0, n, size):
        yield start, min(start + size, n)


#: Vocabulary tile on CPU: [chunk × block] float32 elements per buffer (2 × 1 MiB), so that
#: the logits tile and its shifted copy stay in a core's L2 cache (2 MiB here) between the
#: head matmul and the reductions (a [128 × 151,936] buffer is 78 MB: every pass over it
#: went to memory). Tiles of 2**17..2**21 elements measured alike under load; one tile slower.
CPU_TILE_ELEMENTS = 2**18


def default_vocab_block(
    vocab: int, rows: int, device_type: str = "cpu", threads: int | None = None
) -> int:
    """Columns per vocabulary tile for ``rows`` positions per chunk: on CPU with one torch
    thread, ``CPU_TILE_ELEMENTS // rows`` (at least 256, at most the vocabulary); otherwise
    the whole vocabulary. With several threads every small tile op is an OpenMP parallel
    region, and on shared cores each waits for a descheduled thread: 2 threads under load
    ≈ 10 measured 0.15× forward with tiles against ≈ 0.7× with one tile (2026-12-02). On a
    GPU each tile would cost kernel launches. ``threads``: default torch.get_num_threads()."""
    if device_type != "cpu":
        return vocab
    if threads is None:
        import torch  # the `train` extra: called only with a loaded model's tensors

        threads = torch.get_num_threads()
    if threads > 1:
        return vocab
    return min(vocab, max(256, CPU_TILE_ELEMENTS // rows))


class _ChunkBuffers:
    """Two [chunk × block] float32 buffers, allocated once per call and reused for every
    chunk and vocabulary tile (fresh allocations cost page faults on every chunk), and the
    per-chunk statistics computed in them.

    The vocabulary is walked in tiles of ``block`` columns (:func:`default_vocab_block`: on
    CPU with one thread ``CPU_TILE_ELEMENTS // chunk``, so the tile stays in cache; with
    several threads, on other devices and for heads of unknown width, one tile of the
    whole vocabulary). In tile j with logits z (divided by τ): m_j = max z,
    u = z − m_j (buffer 2), e = exp(u) (buffer 1, over z), S_j = Σ e and T_j = Σ e·u. With
    M = max_j m_j and d_j = m_j − M ≤ 0, the whole-vocabulary sums relative to M are
    S = Σ_j e^(d_j) S_j and Σ e·(z − M) = Σ_j e^(d_j) (T_j + d_j S_j); then
    h = log S − Σ e·(z − M) / S and log p(y) = z(y) − M − log S, z(y) read from the tile
    that holds y. With one tile these are the unmerged formulas. A chunk with -inf logits
    (masked entries) is redone with the max clamped and 0 · (−inf) counted as 0."""

    def __init__(
        self, head: Any, chunk_size: int, device: Any, vocab_block: int | None = None
    ) -> None:
        import torch  # the `train` extra: called only with a loaded model's tensors

        linear = isinstance(head, torch.nn.Linear)
        self.head = head
        self.weight = head.weight if linear else None
        self.bias = head.bias if linear else None
        # Fast path: a float32 linear head writes its logits straight into the buffer (addmm
        # with the bias tile); any other head is called (per tile if linear) and copied.
        self.fast = linear and self.weight.dtype == torch.float32  # type: ignore[union-attr]  # the chunk state is set by the first iteration before it is read
        self.vocab = head.out_features if linear else None
        self.z = self.u = None
        self.block = 0
        self._tile_cache: dict[int, list[tuple[int, int, Any, Any, Any, Any]]] = {}
        if self.vocab is not None:
            if vocab_block is None:
                vocab_block = default_vocab_block(self.vocab, chunk_size, torch.device(device).type)
            self.block = min(self.vocab, vocab_block)
            self.z = torch.empty(chunk_size, self.block, dtype=torch.float32, device=device)
            self.u = torch.empty(chunk_size, self.block, dtype=torch.float32, device=device)

    def _tiles(self, n: int) -> list[tuple[int, int, Any, Any, Any, Any]]:
        """(v0, v1, z tile, u tile, weight tile transposed, bias tile) for chunks of ``n``
        rows: contiguous [n × width] views at the start of the buffers, made once per n."""
        if n not in self._tile_cache:
            tiles = []
            for v0 in range(0, self.vocab, self.block):  # type: ignore[arg-type]  # the chunk state is set by the first iteration before it is read
                v1 = min(v0 + self.block, self.vocab)  # type: ignore[type-var]  # a stored row's id is set: SQLModel types every primary key Optional
                z, u = (buf.view(-1)[: n * (v1 - v0)].view(n, v1 - v0) for buf in (self.z, self.u))  # type: ignore[operator, union-attr]  # the chunk state is set by the first iteration before it is read
                w = self.weight[v0:v1]  # type: ignore[index]  # the chunk state is set by the first iteration before it is read
                b = None if self.bias is None else self.bias[v0:v1]
                tiles.append((v0, v1, z, u, w, b))
            self._tile_cache[n] = tiles  # type: ignore[assignment]  # the chunk state is set by the first iteration before it is read
        return self._tile_cache[n]

    def _logits(self, rows: Any, v0: int, v1: int, z: Any, w: Any, b: Any) -> None:
        import torch  # the `train` extra: called only with a loaded model's tensors

        if self.fast and rows.dtype == torch.float32:
            if b is None:
                torch.matmul(rows, w.t(), out=z)
            else:
                torch.addmm(b, rows, w.t(), out=z)
        elif v0 == 0 and v1 == self.vocab:
            z.copy_(self.head(rows))
        else:
            z.copy_(torch.nn.functional.linear(rows, w, b))

    def stats(self, rows: Any, targets: Any, temperature: float) -> tuple[Any, Any]:
        import torch  # the `train` extra: called only with a loaded model's tensors

        h, lp = self._stats(rows, targets, temperature, safe=False)
        if not bool(torch.isfinite(h).all()):
            # -inf logits (masked vocabulary entries): a row whose tile is all -inf has no
            # finite max, and e = 0 there with 0 · (-inf) = nan — redo the chunk with the
            # max clamped and the -inf shifts zeroed before the product (0 · log 0 = 0)
            h, lp = self._stats(rows, targets, temperature, safe=True)
        return h, lp

    def _stats(self, rows: Any, targets: Any, temperature: float, *, safe: bool) -> Any:
        import torch  # the `train` extra: called only with a loaded model's tensors

        n = rows.shape[0]
        if self.z is None:  # unknown vocabulary size: one tile, plain tensors
            z = self.head(rows).float()
            tiles = [(0, z.shape[1], z, torch.empty_like(z), None, None)]
        else:
            tiles = self._tiles(n)
        # the rows whose target falls in each tile (most tiles have none)
        by_tile: dict[int, tuple[list[int], list[int]]] = {}
        for r, t in enumerate(targets.tolist()):
            j = t // self.block if self.z is not None else 0
            by_tile.setdefault(j, ([], []))[0].append(r)
            by_tile[j][1].append(t - j * (self.block if self.z is not None else 0))
        z_y = torch.empty(n, dtype=torch.float32, device=rows.device)
        # per tile: max m, S_b = Σ e, T_b = Σ e·u (rows of [tiles × n]), merged at the end
        ms, ss, ts = torch.empty(3, len(tiles), n, dtype=torch.float32, device=rows.device)
        for j, (v0, v1, z, u, w, b) in enumerate(tiles):
            if w is not None:
                self._logits(rows, v0, v1, z, w, b)
            if temperature != 1.0:
                z.div_(temperature)
            if j in by_tile:
                ri, ci = (torch.tensor(x, device=rows.device) for x in by_tile[j])
                z_y[ri] = z[ri, ci]
            m = torch.amax(z, -1, out=ms[j])
            if safe:
                m.clamp_(min=torch.finfo(torch.float32).min)  # an all -inf row: no nan shift
            torch.sub(z, m[:, None], out=u)
            e = torch.exp(u, out=z)
            torch.sum(e, -1, out=ss[j])
            if safe:
                u.nan_to_num_(neginf=0.0)
            torch.sum(e.mul_(u), -1, out=ts[j])
        big_m = ms.amax(0)
        d = ms - big_m  # ≤ 0: each tile's shift relative to the overall max
        a = d.exp()
        total = (a * ss).sum(0)
        eu = (a * (ts + d * ss)).sum(0)
        log_total = total.log()
        return log_total - eu / total, z_y - big_m - log_total


#: ``token_stats(path=...)``: auto, the chunked kernel, the GPU path with either fold.
PATHS = ("auto", "chunked", "triton", "torch")


def token_stats(
    model: Any,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    *,
    temperature: float = 1.0,
    chunk_size: int = 128,
    batch_size: int = 16,
    pad_id: int = 0,
    vocab_block: int | None = None,
    path: str = "auto",
) -> list[TokenStats]:
    """Teacher-forced :class:`TokenStats` of every (prompt ids, completion ids) pair.

    Formulas in the module docstring. Completions must be non-empty. ``path``: ``auto`` (the
    GPU path, :mod:`rcea.pipeline.probe.device_stats`, for a model on CUDA; the chunked
    kernel of this module elsewhere), ``chunked`` (this module's kernel on any device), or
    ``triton`` / ``torch`` (the GPU path with that fold, on any device: on CPU tensors the
    Triton fold runs only under Triton's interpreter — the tests). ``chunk_size`` and
    ``vocab_block`` belong to the chunked kernel; the GPU path bounds its memory by its tile.
    """
    import torch  # the `train` extra: called only with a loaded model's tensors

    if chunk_size < 1 or batch_size < 1 or temperature <= 0:
        raise ValueError("chunk_size and batch_size must be >= 1, temperature > 0")
    if any(len(c) == 0 for c in completions):
        raise ValueError("every completion needs at least one token")
    if path not in PATHS:
        raise ValueError(f"path must be one of {', '.join(PATHS)}, got {path!r}")
    _, head = decoder_and_head(model)
    device = next(model.parameters()).device
    if path in ("triton", "torch") or (path == "auto" and device.type == "cuda"):
        # imported here: the GPU path (torch at module level, Triton where present) loads
        # only for a model on CUDA or when asked for by name
        from rcea.pipeline.probe.device_stats import device_token_stats

        return device_token_stats(
            model,
            prompts,
            completions,
            temperature=temperature,
            batch_size=batch_size,
            pad_id=pad_id,
            fold="auto" if path == "auto" else path,
        )
    model.eval()
    n_rows = min(chunk_size, sum(len(c) for c in completions))
    buffers = _ChunkBuffers(head, n_rows, device, vocab_block)
    out: list[TokenStats] = []
    for b0, b1 in _chunks(len(prompts), batch_size):
        ids, mask, plen = padded_batch(prompts[b0:b1], completions[b0:b1], pad_id)
        ids, mask = ids.to(device), mask.to(device)
        hid = hidden_states(model, ids, mask)
        # Flatten the completion positions of the batch: row r predicts token tgt[r].
        rows_b, rows_t, targets = [], [], []
        for i, c in enumerate(completions[b0:b1]):
            pos = torch.arange(plen[i] - 1, plen[i] - 1 + len(c))
            rows_b.append(torch.full_like(pos, i))
            rows_t.append(pos)
            targets.append(torch.tensor(list(c), dtype=torch.long))
        rb = torch.cat(rows_b).to(device)
        rt = torch.cat(rows_t).to(device)
        tgt = torch.cat(targets).to(device)
        ent = torch.empty(rb.numel(), dtype=torch.float32)
        lp = torch.empty(rb.numel(), dtype=torch.float32)
        with torch.no_grad():
            for c0, c1 in _chunks(rb.numel(), chunk_size):
                h, lp_c = buffers.stats(hid[rb[c0:c1], rt[c0:c1]], tgt[c0:c1], temperature)
                ent[c0:c1] = h.cpu()
                lp[c0:c1] = lp_c.cpu()
        del hid
        offset = 0
        for c in completions[b0:b1]:
            n = len(c)
            out.append(
                TokenStats(
                    ent[offset : offset + n].numpy().copy(), lp[offset : offset + n].numpy().copy()
                )
            )
            offset += n
    return out


def naive_token_stats(
    model: Any, prompt: Sequence[int], completion: Sequence[int], *, temperature: float = 1.0
) -> TokenStats:
    """Reference: one full forward pass, full [tokens × vocab] ``log_softmax`` (tests, bench)."""
    import torch  # the `train` extra: called only with a loaded model's tensors

    ids = torch.tensor([list(prompt) + list(completion)], dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float() / temperature
    logp = torch.log_softmax(logits, dim=-1)
    n0 = len(prompt) - 1
    rows = logp[n0 : n0 + len(completion)]
    ent = -(rows.exp() * rows).nan_to_num(0.0).sum(-1)
    chosen = rows.gather(-1, torch.tensor(list(completion))[:, None]).squeeze(-1)
    return TokenStats(ent.numpy(), chosen.numpy())
