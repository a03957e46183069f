"""Teacher-forced token entropy and log-probabilities, chunked over positions.

For a completion y = (y_1..y_T) (EOS included when the sample ended) after prompt x, at
sampling temperature τ, the position predicting y_t has logits z_t = W h_t / τ (h_t the
final hidden state, W the LM head). With log p_t = log_softmax(z_t) in float32:

* token entropy      h_t = −Σ_v p_t(v) log p_t(v)           (full vocabulary, nats)
* chosen log-prob    log p_t(y_t)
* sequence log-prob  ℓ = Σ_t log p_t(y_t)                    (float64 sum; EOS included)

computed in float32 as, with u = z_t − max z_t, e = exp(u) and S = Σ_v e(v):
h_t = log S − Σ_v e(v) u(v) / S and log p_t(y_t) = u(y_t) − log S (one exp pass, no
log-probability matrix, two [chunk × vocab] buffers reused for every chunk; shifted values
keep float32 within ≈ 1e-6 of a float64 reference).

The decoder runs once per batch of sequences and yields hidden states [B, L, H]; the LM
head is applied to at most ``chunk_size`` completion positions at a time, so the extra
memory is O(chunk_size × vocab) — the [tokens × vocab] matrix never exists at once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class TokenStats:
    """Per-token entropies and chosen log-probs of one completion (float32), and ℓ."""

    entropies: np.ndarray
    logprobs: np.ndarray

    @property
    def n_tokens(self) -> int:
        return int(self.entropies.size)

    @property
    def mean_entropy(self) -> float:
        return float(self.entropies.astype(np.float64).mean()) if self.n_tokens else 0.0

    @property
    def seq_logprob(self) -> float:
        return float(self.logprobs.astype(np.float64).sum())


def decoder_and_head(model: Any) -> tuple[Any, Any]:
    """(decoder returning final hidden states, LM head) of a Hugging Face causal LM."""
    head = model.get_output_embeddings()
    decoder = model.base_model
    if head is None or decoder is model:
        raise ValueError(f"{type(model).__name__}: cannot split into decoder and LM head")
    return decoder, head


def padded_batch(
    prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], pad_id: int
) -> tuple[Any, Any, list[int]]:
    """Right-padded ``input_ids``/``attention_mask`` of prompt + completion, prompt lengths."""
    import torch

    seqs = [list(p) + list(c) for p, c in zip(prompts, completions, strict=True)]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids, mask, [len(p) for p in prompts]


def hidden_states(model: Any, input_ids: Any, attention_mask: Any) -> Any:
    """Final hidden states [B, L, H] (no logits computed)."""
    import torch

    decoder, _ = decoder_and_head(model)
    with torch.no_grad():
        out = decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]


def _chunks(n: int, size: int) -> Iterator[tuple[int, int]]:
    for start in range(0, n, size):
        yield start, min(start + size, n)


class _ChunkBuffers:
    """Two [chunk × vocab] float32 buffers, allocated once per call and reused for every
    chunk (fresh allocations of that size cost page faults on every chunk), and the
    per-chunk statistics computed in them.

    For the chunk's logits z (divided by τ): u = z − max z (buffer 1), e = exp(u) (buffer 2,
    over z), S = Σ e, h = log S − Σ e·u / S, log p(y) = u(y) − log S — one exp pass, no
    log-probability matrix, and shifted values so that float32 keeps ≈ 1e-6 accuracy."""

    def __init__(self, head: Any, chunk_size: int, device: Any) -> None:
        import torch

        weight = getattr(head, "weight", None)
        # Fast path: a bias-free float32 linear head writes its logits straight into the
        # buffer; any other head (bf16, bias, custom) is called and its output copied.
        self.weight_t = (
            weight.t()
            if isinstance(head, torch.nn.Linear)
            and head.bias is None
            and weight is not None
            and weight.dtype == torch.float32
            else None
        )
        self.head = head
        vocab = head.out_features if isinstance(head, torch.nn.Linear) else None
        self.z = self.u = None
        if vocab is not None:
            self.z = torch.empty(chunk_size, vocab, dtype=torch.float32, device=device)
            self.u = torch.empty(chunk_size, vocab, dtype=torch.float32, device=device)

    def stats(self, rows: Any, targets: Any, temperature: float) -> tuple[Any, Any]:
        import torch

        n = rows.shape[0]
        if self.z is None:  # unknown vocabulary size: plain tensors
            z = self.head(rows).float()
            u = torch.empty_like(z)
        else:
            z, u = self.z[:n], self.u[:n]
            if self.weight_t is not None and rows.dtype == torch.float32:
                torch.matmul(rows, self.weight_t, out=z)
            else:
                z.copy_(self.head(rows))
        if temperature != 1.0:
            z.div_(temperature)
        torch.sub(z, z.amax(-1, keepdim=True), out=u)
        e = torch.exp(u, out=z)
        total = e.sum(-1)
        # Σ e·u as an in-place product and a sum: about 2.5× faster on CPU than
        # torch.linalg.vecdot, which materialises the product anyway.
        eu = e.mul_(u).sum(-1)
        bad = ~torch.isfinite(eu)
        if bool(bad.any()):  # -inf logits: e = 0 there and 0 · (-inf) counts as 0
            eu[bad] = (u[bad].exp() * u[bad].nan_to_num(neginf=0.0)).sum(-1)
        log_total = total.log()
        chosen = u.gather(-1, targets[:, None]).squeeze(-1) - log_total
        return log_total - eu / total, chosen


def token_stats(
    model: Any,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    *,
    temperature: float = 1.0,
    chunk_size: int = 128,
    batch_size: int = 16,
    pad_id: int = 0,
) -> list[TokenStats]:
    """Teacher-forced :class:`TokenStats` of every (prompt ids, completion ids) pair.

    Formulas in the module docstring. Completions must be non-empty.
    """
    import torch

    if chunk_size < 1 or batch_size < 1 or temperature <= 0:
        raise ValueError("chunk_size and batch_size must be >= 1, temperature > 0")
    if any(len(c) == 0 for c in completions):
        raise ValueError("every completion needs at least one token")
    _, head = decoder_and_head(model)
    device = next(model.parameters()).device
    model.eval()
    n_rows = min(chunk_size, sum(len(c) for c in completions))
    buffers = _ChunkBuffers(head, n_rows, device)
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
    import torch

    ids = torch.tensor([list(prompt) + list(completion)], dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float() / temperature
    logp = torch.log_softmax(logits, dim=-1)
    n0 = len(prompt) - 1
    rows = logp[n0 : n0 + len(completion)]
    ent = -(rows.exp() * rows).nan_to_num(0.0).sum(-1)
    chosen = rows.gather(-1, torch.tensor(list(completion))[:, None]).squeeze(-1)
    return TokenStats(ent.numpy(), chosen.numpy())
