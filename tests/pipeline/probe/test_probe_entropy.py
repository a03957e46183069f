"""Teacher-forced entropy pass: against a naive full ``log_softmax`` reference, sequence
log-prob, EOS, chunk-bounded LM-head calls (the memory contract)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("transformers")

from rcea.pipeline.probe.entropy_kernel import naive_token_stats, token_stats  # noqa: E402
from tests.support.probe import torch

TEXTS = [
    ("(3+4)*5\n", "3+4=7\n7*5=35\n\\boxed{35}", True),
    ("2*6-2*1\n", "6-1=5\n2*5=10\n\\boxed{10}", True),
    ("1*2+1*3\n", "2+3=5", False),  # truncated: no EOS
    ("(1+1)*1\n", "2", True),
]


@pytest.fixture(scope="module")
def policy() -> tuple[Any, Any]:
    from rcea.pipeline.policy import build_char_tokenizer, build_model

    torch.set_num_threads(1)
    tok = build_char_tokenizer()
    return build_model(tok, seed=3), tok


def _ids(tok: Any) -> tuple[list[list[int]], list[list[int]]]:
    prompts, comps = [], []
    for prompt, comp, eos in TEXTS:
        prompts.append(tok(prompt)["input_ids"])
        comps.append(tok(comp)["input_ids"] + ([tok.eos_token_id] if eos else []))
    return prompts, comps


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize(
    ("chunk", "batch", "block"),
    [(1, 1, None), (7, 3, None), (4096, 16, None), (7, 3, 16), (5, 2, 1)],
)
def test_matches_full_log_softmax_reference(
    policy: tuple[Any, Any], temperature: float, chunk: int, batch: int, block: int | None
) -> None:
    """``block``: vocabulary tiles of that many columns merged online (16 does not divide
    the vocabulary: a narrower last tile; 1: every column its own tile); None: the default
    (one tile for this small vocabulary)."""
    model, tok = policy
    prompts, comps = _ids(tok)
    got = token_stats(
        model,
        prompts,
        comps,
        temperature=temperature,
        chunk_size=chunk,
        batch_size=batch,
        pad_id=tok.pad_token_id,
        vocab_block=block,
    )
    for p, c, st in zip(prompts, comps, got, strict=True):
        ref = naive_token_stats(model, p, c, temperature=temperature)
        assert st.entropies.dtype == np.float32 and st.n_tokens == len(c)
        assert np.max(np.abs(st.entropies - ref.entropies)) < 1e-5
        assert np.max(np.abs(st.logprobs - ref.logprobs)) < 1e-5
        assert (st.entropies >= 0).all() and (st.logprobs <= 0).all()
        # a random policy is far from deterministic: entropies near log(vocab)
        assert 0.5 * np.log(len(tok)) < st.mean_entropy <= np.log(len(tok)) + 1e-5


def test_sequence_logprob_is_the_sum_and_matches_the_model_loss(policy: tuple[Any, Any]) -> None:
    """ℓ = Σ chosen log-probs, and equals −(mean token cross-entropy × T) from the model's own
    loss with the prompt masked (an independent code path), EOS included."""
    model, tok = policy
    prompts, comps = _ids(tok)
    for p, c, st in zip(prompts, comps, token_stats(model, prompts, comps), strict=True):
        assert st.seq_logprob == pytest.approx(float(np.sum(st.logprobs, dtype=np.float64)))
        ids = torch.tensor([p + c])
        labels = ids.clone()
        labels[0, : len(p)] = -100
        with torch.no_grad():
            loss = model(input_ids=ids, labels=labels).loss
        assert st.seq_logprob == pytest.approx(-float(loss) * len(c), abs=1e-4)
    # the EOS position is scored: dropping it changes ℓ by exactly its log-prob
    st_eos = token_stats(model, prompts[:1], comps[:1])[0]
    st_no = token_stats(model, prompts[:1], [comps[0][:-1]])[0]
    assert st_eos.n_tokens == st_no.n_tokens + 1
    assert st_eos.seq_logprob == pytest.approx(st_no.seq_logprob + float(st_eos.logprobs[-1]))


def test_lm_head_never_sees_more_rows_than_the_chunk(
    policy: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory contract: logits exist for at most ``chunk_size`` positions at a time (the
    two reused [chunk × vocab] buffers), and every completion position is scored once."""
    from rcea.pipeline.probe import entropy_kernel as entropy_mod

    model, tok = policy
    prompts, comps = _ids(tok)
    rows: list[int] = []
    buffer_rows: list[int] = []
    real_stats = entropy_mod._ChunkBuffers.stats

    def spy(self, hidden, targets, temperature):  # type: ignore[no-untyped-def]
        rows.append(int(hidden.shape[0]))
        buffer_rows.extend(int(b.shape[0]) for b in (self.z, self.u))
        return real_stats(self, hidden, targets, temperature)

    monkeypatch.setattr(entropy_mod._ChunkBuffers, "stats", spy)
    token_stats(model, prompts, comps, chunk_size=5, batch_size=4)
    assert rows and max(rows) <= 5 and max(buffer_rows) <= 5
    assert sum(rows) == sum(len(c) for c in comps)  # every completion position exactly once


def test_bad_input_is_refused(policy: tuple[Any, Any]) -> None:
    model, tok = policy
    with pytest.raises(ValueError, match="at least one token"):
        token_stats(model, [[1, 2]], [[]])
    with pytest.raises(ValueError, match="chunk_size"):
        token_stats(model, [[1, 2]], [[3]], chunk_size=0)


@pytest.mark.gpu
def test_gpu_entropy_throughput_figures() -> None:
    """`make gpu-check`'s entropy figures (CUDA only; a short run of the same function)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from rcea.pipeline.gpu_check import device_folds, entropy_throughput

    fig = entropy_throughput(torch, tokens=256, chunks=(128,), reps=2)
    folds = device_folds(torch)
    methods = {"forward", "chunked_128", "trl_fused", "trl_utils"} | {f"device_{f}" for f in folds}
    assert set(fig["methods"]) == methods and fig["scored_tokens"] == 2 * 256
    for name, m in fig["methods"].items():
        # a 1.5B-shaped bf16 model does tens of thousands of tokens/s on any CUDA device;
        # 500 only catches a figure that is not a measurement (0, or a CPU fallback)
        assert m["tokens_per_s"] >= 500, name
        assert m["vs_forward"] == round(
            m["tokens_per_s"] / fig["methods"]["forward"]["tokens_per_s"], 3
        )
    agree = fig["agreement_vs_float64"]
    for f in folds:
        assert agree[f"device_{f}_entropy_max_abs_diff"] < 1e-4
        assert agree[f"device_{f}_logprob_max_abs_diff"] < 1e-3
        # the GPU path's extra memory over the forward's: one 64 MiB bf16 tile, the rows
        extra = fig["methods"][f"device_{f}"]["peak_extra_gib"]
        assert extra <= fig["methods"]["forward"]["peak_extra_gib"] + 0.3


@pytest.mark.parametrize("block", [None, 4, 12])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("bias", [False, True])
def test_chunk_statistics_with_masked_logits_match_float64(
    bias: bool, dtype: str, block: int | None
) -> None:
    """The in-buffer kernel (float32 matmul/addmm path; a float64 head is called per tile and
    copied) against a float64 log_softmax reference, with -inf logits (masked vocabulary
    entries: 0 · log 0 = 0). Tiles of 4 columns: the first tile is all -inf, the second
    partly; of 12: the first partly; None: one tile of all 50."""
    import torch

    from rcea.pipeline.probe.entropy_kernel import _ChunkBuffers

    torch.manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=bias).to(getattr(torch, dtype))
    with torch.no_grad():
        head.weight.mul_(8.0)  # large logits: the shifted form must keep float32 accurate
        if bias:
            head.bias[:5] = -float("inf")
    rows, targets = torch.randn(7, 16, dtype=head.weight.dtype), torch.randint(5, 50, (7,))
    targets[:3] = torch.tensor([5, 49, 48])  # first and last live columns, in the last tile
    with torch.no_grad():
        buffers = _ChunkBuffers(head, 7, "cpu", block)
        assert buffers.block == (50 if block is None else block)
        h, lp = buffers.stats(rows, targets, 0.7)
        logp = torch.log_softmax(head(rows).double() / 0.7, -1)
    ref_h = -(logp.exp() * logp).nan_to_num(0.0).sum(-1)
    ref_lp = logp.gather(-1, targets[:, None]).squeeze(-1)
    assert torch.isfinite(h).all()
    assert (h.double() - ref_h).abs().max() < 1e-5
    assert (lp.double() - ref_lp).abs().max() < 1e-5


def test_default_vocabulary_tile() -> None:
    """On CPU with one thread a [chunk × block] tile holds 2**18 float32 (1 MiB, so the
    logits tile and its shifted copy stay in L2 between the matmul and the reductions), at
    least 256 columns and never more than the vocabulary; with several threads (a parallel
    region per small op) and off CPU one tile of the whole vocabulary."""
    import torch

    from rcea.pipeline.probe.entropy_kernel import _ChunkBuffers, default_vocab_block

    assert default_vocab_block(151_936, 128, "cpu", 1) == 2048
    assert default_vocab_block(151_936, 1, "cpu", 1) == 151_936
    assert default_vocab_block(151_936, 4096, "cpu", 1) == 256
    assert default_vocab_block(151_936, 300, "cpu", 1) == 873
    assert default_vocab_block(151_936, 128, "cpu", 2) == 151_936
    assert default_vocab_block(151_936, 128, "cuda", 1) == 151_936
    head = torch.nn.Linear(8, 151_936, bias=False, device="meta")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert _ChunkBuffers(head, 128, "cpu").block == 2048
        assert _ChunkBuffers(head, 128, "meta").block == 151_936
        assert tuple(_ChunkBuffers(head, 128, "meta").z.shape) == (128, 151_936)
        small = torch.nn.Linear(8, 300, bias=False, device="meta")
        assert _ChunkBuffers(small, 1, "cpu").block == 300
        torch.set_num_threads(2)
        assert _ChunkBuffers(head, 128, "cpu").block == 151_936
    finally:
        torch.set_num_threads(before)
