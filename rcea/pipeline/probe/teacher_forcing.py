"""What every teacher-forced pass shares: the per-token result, the split of a Hugging Face
causal LM into decoder and LM head, the right-padded batch and its final hidden states
(the chunked kernel, :mod:`rcea.pipeline.probe.entropy_kernel`, and the GPU path,
:mod:`rcea.pipeline.probe.device_stats`, both start from these)."""

from __future__ import annotations

from collections.abc import Sequence
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
    import torch  # the `train` extra: called only with a loaded model's tensors

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
    import torch  # the `train` extra: called only with a loaded model's tensors

    decoder, _ = decoder_and_head(model)
    with torch.no_grad():
        out = decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
