"""The GPU path's folds without a GPU: the Triton kernels under Triton's interpreter on CPU
tensors, and the plain-torch fallback, against float64 references — entropy within 1e-6
nats, log-probs within 1e-6 relative to max(1, |log p|) (the float32 output's own rounding
is 1e-6 at |log p| ≈ 16), the covariance within 1e-9 relative of ``entropy_change_pair``.
Shapes stay small: the interpreter runs a kernel program by program in numpy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("transformers")

from rcea.audits.covariance import entropy_change_pair  # noqa: E402
from rcea.pipeline.probe.covariance import position_logits  # noqa: E402
from rcea.pipeline.probe.device_stats import (  # noqa: E402
    HeadTiles,
    device_entropy_change,
    device_token_stats,
    entropy_change_from_logits,
    entropy_from_logits,
    resolve_fold,
    tile_columns,
)
from rcea.pipeline.probe.entropy_kernel import naive_token_stats, token_stats  # noqa: E402
from tests.support.probe import torch
from tests.support.triton_env import import_triton_interpreted

FOLDS = ["triton", "torch"]
NEG_INF = float("-inf")


@pytest.fixture(params=FOLDS)
def fold(request: pytest.FixtureRequest) -> str:
    if request.param == "triton":
        import_triton_interpreted()
    return request.param


def _reference(logits: Any, targets: Any, temperature: float) -> tuple[Any, Any]:
    logp = torch.log_softmax(logits.double() / temperature, -1)
    h = -(logp.exp() * logp).nan_to_num(0.0).sum(-1)
    return h, logp.gather(1, targets[:, None]).squeeze(1)


def _assert_close(h: Any, lp: Any, ref_h: Any, ref_lp: Any) -> None:
    assert h.dtype == torch.float32 and lp.dtype == torch.float32
    assert torch.isfinite(h).all()
    assert (h.double() - ref_h).abs().max() <= 1e-6
    assert torch.equal(torch.isneginf(lp), torch.isneginf(ref_lp))  # a masked target: −inf
    live = torch.isfinite(ref_lp)
    rel = (lp.double() - ref_lp)[live].abs() / ref_lp[live].abs().clamp(min=1.0)
    assert rel.max() <= 1e-6


def _masked_logits(dtype: Any) -> tuple[Any, Any]:
    """8 rows × 1,000 columns (tiles of 384: 384, 384, 232 — not a multiple of the tile nor
    of the 128-column block): row 0's first tile all −inf, row 1 every third column −inf
    (its target among them), row 2 live only in the last column (its target), row 3's
    target the last column, the rest random; logits ~ 4·N(0, 1)."""
    gen = torch.Generator().manual_seed(0)
    z = 4.0 * torch.randn(8, 1000, generator=gen)
    z[0, :384] = NEG_INF
    z[1, ::3] = NEG_INF
    z[2, :999] = NEG_INF
    targets = torch.randint(0, 1000, (8,), generator=gen)
    targets[0] = 500
    targets[1] = 3
    targets[2] = targets[3] = 999
    return z.to(dtype), targets


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_entropy_fold_matches_float64_with_masks_and_tiles(fold: str, temperature: float) -> None:
    z, targets = _masked_logits(torch.float32)
    h, lp = entropy_from_logits(
        z, targets, temperature=temperature, fold=fold, tile_columns_=384, block=128
    )
    _assert_close(h, lp, *_reference(z, targets, temperature))
    # one tile of the whole vocabulary: the same numbers within float32 rounding
    h1, lp1 = entropy_from_logits(z, targets, temperature=temperature, fold=fold, block=128)
    assert (h1 - h).abs().max() <= 1e-6


def test_entropy_fold_reads_bf16_logits(fold: str) -> None:
    """bf16 logits (what a bf16 head writes) are folded as they are, against the float64
    reference of the same bf16 values."""
    z, targets = _masked_logits(torch.bfloat16)
    h, lp = entropy_from_logits(
        z, targets, temperature=0.7, fold=fold, tile_columns_=384, block=128
    )
    _assert_close(h, lp, *_reference(z, targets, 0.7))


def _pair(dtype: Any, offset: float = 0.0) -> tuple[Any, Any]:
    """6 positions × 1,000: old ~ 3·N(0, 1), new = old + 0.1·N(0, 1) + offset (ΔH ~ 1e-2)."""
    gen = torch.Generator().manual_seed(1)
    old = 3.0 * torch.randn(6, 1000, generator=gen)
    new = old + 0.1 * torch.randn(6, 1000, generator=gen) + offset
    return old.to(dtype), new.to(dtype)


def _assert_covariance(got: Any, ref: Any) -> None:
    for name in ("predicted", "observed", "entropy_old", "entropy_new"):
        a, b = getattr(got, name), getattr(ref, name)
        assert a.dtype == np.float64
        assert np.max(np.abs(a - b) / np.abs(b)) <= 1e-9, name


@pytest.mark.parametrize(
    ("dtype", "offset"), [("float32", 0.0), ("float32", 50.0), ("bfloat16", 0.0)]
)
def test_covariance_fold_matches_the_float64_host_kernel(
    fold: str, dtype: str, offset: float
) -> None:
    """Tiles of 384 columns, blocks of 128 (the max moves between tiles); ``offset``: the new
    logits shifted by a constant (predicted and observed Δh unchanged, the sums B and C
    large: the cancellation in C/S − A·B/S² the float64 accumulation must absorb)."""
    old, new = _pair(getattr(torch, dtype), offset)
    ref = entropy_change_pair(old.float().numpy(), new.float().numpy())
    assert 1e-3 < np.median(np.abs(ref.observed)) < 1e-1  # ΔH ~ 1e-2
    got = entropy_change_from_logits(old, new, fold=fold, tile_columns_=384, block=128)
    _assert_covariance(got, ref)


def test_covariance_fold_refuses_non_finite_logits(fold: str) -> None:
    old, new = _pair(torch.float32)
    new[4, 7] = float("nan")
    with pytest.raises(ValueError, match="non-finite value .* at position 4"):
        entropy_change_from_logits(old, new, fold=fold, tile_columns_=384, block=128)


@pytest.fixture(scope="module")
def policies() -> tuple[Any, Any, Any]:
    from rcea.pipeline.policy import build_char_tokenizer, build_model

    tok = build_char_tokenizer()
    old = build_model(tok, seed=3, initializer_range=0.2)
    new = build_model(tok, seed=3, initializer_range=0.2)
    gen = torch.Generator().manual_seed(9)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=gen))
    return old, new, tok


def _texts(tok: Any) -> tuple[list[list[int]], list[list[int]]]:
    pairs = [("(3+4)*5\n", "3+4=7\n7*5=35"), ("2*6-2*1\n", "6-1=5"), ("1+1\n", "2")]
    prompts = [tok(p)["input_ids"] for p, _ in pairs]
    comps = [tok(c)["input_ids"] + [tok.eos_token_id] for _, c in pairs]
    return prompts, comps


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_device_token_stats_match_the_full_log_softmax(
    policies: tuple[Any, Any, Any], fold: str, dtype: str
) -> None:
    """The whole GPU path on a CPU model: rows gathered once per batch, head tiles of 64
    columns written in the model's dtype (a bf16 head rounds its logits to bf16 like the
    Hugging Face head), folded; against a float64 log_softmax of the head's own logits at
    the same rows (``position_logits``: the same padded batch, so the same hidden states)."""
    model, _, tok = policies
    model = model.to(getattr(torch, dtype))
    try:
        prompts, comps = _texts(tok)
        got = device_token_stats(
            model, prompts, comps, temperature=0.7, batch_size=3, fold=fold,
            tile_elements=64 * 16, block=32, pad_id=tok.pad_token_id,
        )  # fmt: skip
        every = [np.arange(len(c)) for c in comps]
        logits = position_logits(model, prompts, comps, every, tok.pad_token_id)
        ref_h, ref_lp = _reference(logits, torch.tensor([t for c in comps for t in c]), 0.7)
        h = torch.from_numpy(np.concatenate([st.entropies for st in got]))
        lp = torch.from_numpy(np.concatenate([st.logprobs for st in got]))
        _assert_close(h, lp, ref_h, ref_lp)
    finally:
        model.float()


def test_token_stats_paths_agree(policies: tuple[Any, Any, Any], fold: str) -> None:
    """``token_stats(path=...)``: the GPU path on CPU tensors (two batches) gives the chunked
    kernel's and the naive reference's numbers (1e-5: the batches' hidden states differ in
    float32 rounding from the unpadded forward's); an unknown path is refused."""
    model, _, tok = policies
    prompts, comps = _texts(tok)
    device = token_stats(model, prompts, comps, path=fold, pad_id=tok.pad_token_id, batch_size=2)
    chunked = token_stats(model, prompts, comps, path="chunked", pad_id=tok.pad_token_id)
    for p, c, a, b in zip(prompts, comps, device, chunked, strict=True):
        ref = naive_token_stats(model, p, c)
        assert np.max(np.abs(a.entropies - ref.entropies)) <= 1e-5
        assert np.max(np.abs(a.entropies - b.entropies)) <= 1e-5
        assert np.max(np.abs(a.logprobs - b.logprobs)) <= 1e-5
    with pytest.raises(ValueError, match="path must be one of"):
        token_stats(model, prompts, comps, path="fused")


def test_head_tiles_round_like_the_hugging_face_head() -> None:
    """A bf16 linear head with a bias: each [rows × width] tile written into the reused
    buffer equals the same columns of ``head(rows)`` bit for bit (one rounding to bf16
    after the matmul and bias), the last tile narrower."""
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 100, bias=True).to(torch.bfloat16)
    rows = torch.randn(5, 16).to(torch.bfloat16)
    with torch.no_grad():
        full = head(rows)
        seen = []
        for v0, tile in HeadTiles(head, rows, 32):
            assert tile.dtype == torch.bfloat16
            assert torch.equal(tile, full[:, v0 : v0 + tile.shape[1]])
            seen.append((v0, tile.shape[1]))
    assert seen == [(0, 32), (32, 32), (64, 32), (96, 4)]


def test_device_covariance_matches_the_host_path(policies: tuple[Any, Any, Any], fold: str) -> None:
    """``probe covariance`` on a device: both checkpoints' heads in tiles, folded, equal to
    the float64 host kernel on the logits the host path copies (1e-9 relative)."""
    m_old, m_new, tok = policies
    prompts, comps = _texts(tok)
    positions = [np.array([0, 3, 7]), np.array([1, 5]), np.array([0, 1])]
    z_old = position_logits(m_old, prompts, comps, positions, tok.pad_token_id)
    z_new = position_logits(m_new, prompts, comps, positions, tok.pad_token_id)
    ref = entropy_change_pair(z_old, z_new)
    got = device_entropy_change(
        m_old, m_new, prompts, comps, positions, tok.pad_token_id,
        fold=fold, tile_elements=2 * 64 * 8, block=32,
    )  # fmt: skip
    _assert_covariance(got, ref)


def test_tile_plan_and_fold_choice() -> None:
    assert tile_columns(4096, 151_936, 2**25, 1024) == 8192
    assert tile_columns(64, 151_936, 2**25, 1024) == 151_936  # one tile
    assert tile_columns(100_000, 151_936, 2**25, 1024) == 1024  # at least one block
    assert tile_columns(3000, 151_936, 2**25, 1024) == 10_240  # whole blocks (11,184 → 10)
    assert resolve_fold("torch", "cpu") == "torch"
    with pytest.raises(ValueError, match="fold must be"):
        resolve_fold("fused", "cpu")


COMPILE_FOR_SM90 = """
import json, sys
sys.path.append(sys.argv[1])
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from rcea.pipeline.probe.triton_folds import interpreter_active, kernels

assert not interpreter_active()
k = kernels()
scalars = {"stride_row": "i32", "width": "i32", "col0": "i32", "temperature": "fp32"}
entropy = {"tile_ptr": "*bf16", "targets_ptr": "*i64", "BLOCK": "constexpr",
           "PRECISE_EXP": "constexpr", **scalars}
entropy |= {name: "*fp32" for name in ("m_ptr", "s_ptr", "t_ptr", "zy_ptr")}
covariance = {"old_ptr": "*bf16", "new_ptr": "*bf16", "stride_old": "i32", "stride_new": "i32",
              "width": "i32", "state_ptr": "*fp64", "n_rows": "i32", "BLOCK": "constexpr"}
out = {}
for name, fn, sig in (("entropy", k.entropy, entropy), ("covariance", k.covariance, covariance)):
    consts = {"BLOCK": 1024} | ({"PRECISE_EXP": True} if name == "entropy" else {})
    src = ASTSource(fn=fn, signature=sig, constexprs=consts)
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32))
    out[name] = {"cubin": len(compiled.asm["cubin"]), "llir": compiled.asm["llir"]}
print(json.dumps(out))
"""


def test_kernels_compile_for_an_h100_without_a_gpu(tmp_path: Path) -> None:
    """The interpreter checks the numbers, not the compiled mode: here both kernels go
    through Triton's whole compiler (TTIR → PTX → cubin with the wheel's own ptxas) for
    sm_90 (H100/H200) with bf16 tiles, in a fresh process without the interpreter. Both
    exps are libdevice's (inlined: its range reduction's float64 FMAs, resp. float32
    ones), not ``tl.exp``'s bare ``ex2.approx`` of x·log2 e."""
    import json
    import os
    import subprocess
    import sys

    from tests.support.triton_env import TRITON_SITE

    import_triton_interpreted()  # skips (or fails under CI) where .triton-site is missing
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env |= {"TRITON_CACHE_DIR": str(tmp_path), "TRITON_DEFAULT_FP_FUSION": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", COMPILE_FOR_SM90, str(TRITON_SITE)],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["entropy"]["cubin"] > 0 and out["covariance"]["cubin"] > 0
    assert "llvm.nvvm.fma.rn.d" in out["covariance"]["llir"]  # float64 exp, not approximated
    assert "ex2.approx" not in out["covariance"]["llir"]
    assert "llvm.nvvm.fma.rn" in out["entropy"]["llir"]  # expf's range reduction
