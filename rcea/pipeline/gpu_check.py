"""`make gpu-check`: the prepared device script. Without CUDA it says so and exits 0.

One command measures, in this order, and writes every figure to one JSON file
(``--json-out``; rewritten after each section, so a run stopped at its time limit still
leaves the sections it finished):

1. ``env``: device, versions, whether vLLM is installed; ``matmul``: a bf16 8192³ product.
2. ``entropy``: teacher-forced entropy on a randomly initialised Qwen2.5-1.5B-shaped model
   (hidden 1,536, 28 layers, 12/2 heads, MLP 8,960, vocab 151,936; bf16 forward, float32
   entropy), 2 completions × 2,048 tokens after a 64-token prompt: tokens/s and peak
   allocated memory of

   * ``forward``    the plain forward (bf16 logits of the scored positions, no entropy);
   * ``chunked_128`` / ``chunked_1024`` / ``chunked_4096`` the CPU kernel on the GPU
     (:func:`rcea.pipeline.probe.entropy_kernel.token_stats` with ``path="chunked"``,
     chunks of 128 / 1,024 / 4,096 positions, one vocabulary tile on a GPU: the GPU's path
     before issue #49);
   * ``device_triton`` / ``device_torch`` the GPU path (``token_stats``' default on CUDA,
     :mod:`rcea.pipeline.probe.device_stats`): bf16 head tiles folded by the Triton kernel,
     or by the plain-torch fold (the fallback without Triton);
   * ``trl_fused``  TRL's path in ``GRPOTrainer``: ``trl.trainer.utils.add_fused_lm_head``
     (outputs log-probs and entropy, the head applied in tiles), called as the trainer calls
     it (``labels``, ``fused_lm_head=True``);
   * ``trl_utils``  the scored positions' logits, then TRL's ``entropy_from_logits`` and
     ``selective_log_softmax`` (what the CPU benchmark calls TRL's path);

   interleaved: every round runs each method once, the order rotated from round to round;
   the figure is the median round. The per-token entropies and log-probs of the kernels and
   of TRL are compared against a float64 ``log_softmax`` of the same logits.
3. ``covariance``: the exact covariance kernels (``rcea.audits.covariance``:
   ``entropy_change_pair``, ``predicted_entropy_change``, ``observed_entropy_change``) at
   4,096 positions × 152,064 vocabulary, float32 logits held on the GPU (the kernels copy
   row chunks into float64 host buffers): positions/s, peak extra host memory (tracemalloc)
   and peak GPU memory; and the device folds on the same logits
   (``device_triton`` / ``device_torch``,
   :func:`rcea.pipeline.probe.device_stats.entropy_change_from_logits`, float64 on the
   device): positions/s, peak, the ratio to the host pair kernel and the largest relative
   difference of each output from the host's.
4. ``score``: ``rcea probe score``'s producer (:class:`rcea.pipeline.probe.score.Scorer`)
   on a saved Qwen2.5-1.5B-shaped model, 16 texts × 1,000 tokens: tokens/s of its default
   path against ``path="chunked"``, interleaved.
5. ``grpo``: GRPO through the same code as ``rcea train run`` (``build_trainer``) on a
   randomly initialised Qwen2.5-0.5B-shaped model (hidden 896, 24 layers, 14/2 heads, vocab
   151,936; the character tokenizer padded to it, saved like real weights): bf16, LoRA
   r=32/alpha=64 on every attention and MLP projection, gradient checkpointing, 32
   completions × 256 tokens per step; steps/s excluding model build and trainer start-up
   (all steps, and without the first), peak GPU memory. Rollouts use vLLM colocated when
   it is installed, else Transformers generation (the JSON says which).
6. ``objectives``: each of the six objectives for 3 steps (16 completions × 64 tokens):
   loss finite at every step, gradients of every trainable parameter finite (checked
   before each optimizer step), the per-step time relative to ``grpo`` in the same setting.
7. ``imported_trajectory_scoring``: not implemented yet (no teacher-forced scoring of
   imported trajectories exists in the project).

Sections 5 and 6 replace the toy verifier's reward by random 0/1 outcomes (at least one
success and one failure per group): a random model never solves a toy question, so the
real reward would give all-zero advantages and all-zero gradients.

Each section is wrapped: a failure records its error in the JSON and the next section
runs. ``--budget-s`` skips what would start after that many seconds. ``--tiny`` shrinks
every shape so the whole script runs on CPU in seconds (its test); only ``--tiny`` runs
without CUDA. ``--probe-only`` runs sections 1–4 (the probe's GPU path, docs/benchmarks.md
has the command); the Triton fold is timed where torch brings Triton, else the pinned one
in ``.triton-site`` (``make install``) is appended to ``sys.path`` (with CUDA only).

Everything CUDA-specific is imported inside the functions so the module imports anywhere.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib.metadata as md
import importlib.util
import json
import math
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import traceback
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rcea.audits.covariance import (
    DEFAULT_MAX_CHUNK_BYTES,
    entropy_change_pair,
    observed_entropy_change,
    plan_chunk_rows,
    predicted_entropy_change,
)
from rcea.pipeline.policy.model import QWEN25_05B_SHAPE, model_config
from rcea.pipeline.policy.tokenizer import build_char_tokenizer
from rcea.pipeline.probe.entropy_kernel import token_stats

QWEN25_15B_SHAPE: dict[str, Any] = {
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "vocab_size": 151936,
}

#: ``--tiny``: a Qwen2 shape small enough for seconds on one CPU core.
TINY_SHAPE: dict[str, Any] = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "vocab_size": 512,
}

SECTIONS = ("env", "matmul", "entropy", "covariance", "score", "grpo", "objectives")
IMPORTED_SCORING = "not implemented yet"
#: ``--probe-only``: the sections of the probe's GPU path (issue #49's device check).
PROBE_SECTIONS = "env,matmul,entropy,covariance,score"


# --------------------------------------------------------------------------- helpers


def _log(msg: str) -> None:
    print(f"[gpu-check] {msg}", flush=True)


def _gib(n: float) -> float:
    return round(n / 2**30, 3)


def _sync(torch: Any) -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _reset_peak(torch: Any) -> int:
    """Reset the CUDA peak counter; the bytes allocated now (0 without CUDA)."""
    if not torch.cuda.is_available():
        return 0
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    return int(torch.cuda.memory_allocated())


def _peak(torch: Any) -> int:
    return int(torch.cuda.max_memory_allocated()) if torch.cuda.is_available() else 0


def _free(torch: Any) -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class Report:
    """The JSON document, rewritten (atomically) after every section."""

    def __init__(self, path: Path | None, tiny: bool) -> None:
        self.path = path
        self.t0 = time.perf_counter()
        self.data: dict[str, Any] = {
            "schema": "rcea-gpu-check/2",
            "status": "running",
            "tiny": tiny,
            "started_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "section_seconds": {},
            "imported_trajectory_scoring": IMPORTED_SCORING,
        }
        self.write()

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def write(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)

    def section(self, name: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Run one section: its figures, or ``{"error": ...}``; written either way."""
        _log(f"{name}: start at {self.elapsed():.0f} s")
        t0 = time.perf_counter()
        try:
            out = fn()
        except Exception as exc:  # noqa: BLE001 - every failure is a figure here
            out = {
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=12).splitlines()[-24:],
            }
            _log(f"{name}: FAILED {out['error']}")
        dt = round(time.perf_counter() - t0, 1)
        self.data[name] = out
        self.data["section_seconds"][name] = dt
        self.write()
        _log(f"{name}: done in {dt} s")
        return out

    def finish(self) -> None:
        failed = [
            n for n in SECTIONS if isinstance(self.data.get(n), dict) and "error" in self.data[n]
        ]
        self.data["status"] = "done" if not failed else "done with errors"
        self.data["failed_sections"] = failed
        self.data["finished_at"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        self.data["total_s"] = round(self.elapsed(), 1)
        self.write()


# --------------------------------------------------------------------------- env, matmul


def environment(torch: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"python": platform.python_version()}
    for pkg in ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "numpy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "missing"
    out["vllm"] = importlib.util.find_spec("vllm") is not None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        out.update(
            {
                "device": torch.cuda.get_device_name(0),
                "cuda": torch.version.cuda,
                "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
                "multiprocessors": props.multi_processor_count,
                "memory_gib": _gib(props.total_memory),
            }
        )
    else:
        out["device"] = f"cpu ({os.cpu_count()} cores)"
    out["triton"] = importlib.util.find_spec("triton") is not None
    return out


def _matmul_tflops(torch: Any, n: int = 8192, reps: int = 20) -> dict[str, Any]:
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    _sync(torch)
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    _sync(torch)
    dt = (time.perf_counter() - t0) / reps
    del a, b
    _free(torch)
    return {"bf16_matmul_n": n, "bf16_tflops": round(2 * n**3 / dt / 1e12, 1)}


# --------------------------------------------------------------------------- entropy


def device_folds(torch: Any) -> list[str]:
    """The GPU path's folds this machine runs: Triton's (CUDA and Triton present) and the
    plain-torch one (everywhere)."""
    if torch.cuda.is_available() and importlib.util.find_spec("triton") is not None:
        return ["triton", "torch"]
    return ["torch"]


def entropy_change_from_logits(*args: Any, **kwargs: Any) -> Any:
    """:func:`rcea.pipeline.probe.device_stats.entropy_change_from_logits`."""
    # imported here: device_stats imports torch, which this module leaves to its functions
    from rcea.pipeline.probe.device_stats import entropy_change_from_logits as fold

    return fold(*args, **kwargs)


def _interleaved(
    torch: Any, methods: dict[str, Callable[[], Any]], reps: int
) -> dict[str, dict[str, Any]]:
    """Every round runs each method once (order rotated per round); per method the round
    times and the largest peak of allocated memory above what was allocated before."""
    names = list(methods)
    for fn in methods.values():  # warm-up: kernels compiled, allocator primed
        fn()
    _sync(torch)
    times: dict[str, list[float]] = {n: [] for n in names}
    peaks: dict[str, int] = dict.fromkeys(names, 0)
    for r in range(reps):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            before = _reset_peak(torch)
            t0 = time.perf_counter()
            methods[name]()
            _sync(torch)
            times[name].append(time.perf_counter() - t0)
            peaks[name] = max(peaks[name], _peak(torch) - before)
    return {n: {"times_s": times[n], "peak_extra_bytes": peaks[n]} for n in names}


def entropy_throughput(
    torch: Any,
    *,
    shape: dict[str, Any] | None = None,
    completions: int = 2,
    tokens: int = 2048,
    prompt_len: int = 64,
    chunks: tuple[int, ...] = (128, 1024),
    reps: int = 5,
) -> dict[str, Any]:
    """Section 2 (module docstring): tokens/s and peak memory of each method."""
    # transformers and TRL are the `train` extra: only a device check loads them
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from trl.trainer.utils import add_fused_lm_head, entropy_from_logits, selective_log_softmax

    shape = shape or QWEN25_15B_SHAPE
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    with dev:
        model = Qwen2ForCausalLM(Qwen2Config(**shape)).to(torch.bfloat16).eval()
    model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    vocab = shape["vocab_size"]
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (completions, prompt_len + tokens), generator=gen).to(dev)
    prompts = [row[:prompt_len].tolist() for row in ids.cpu()]
    comps = [row[prompt_len:].tolist() for row in ids.cpu()]
    scored = torch.arange(prompt_len - 1, prompt_len - 1 + tokens, device=dev)
    targets = ids[:, prompt_len:]
    labels = ids.clone()
    labels[:, :prompt_len] = -100
    # TRL's GRPOTrainer patches its model the same way (outputs log-probs and entropy); the
    # patched forward without fused_lm_head=True is the original one
    add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))

    def forward() -> Any:
        with torch.no_grad():
            return model(input_ids=ids, logits_to_keep=scored).logits

    def trl_fused() -> tuple[Any, Any]:
        with torch.no_grad():
            out = model(input_ids=ids, labels=labels, fused_lm_head=True)
        return out.entropy[:, prompt_len - 1 :], out.log_probs[:, prompt_len - 1 :]

    def trl_utils() -> tuple[Any, Any]:
        with torch.no_grad():
            logits = model(input_ids=ids, logits_to_keep=scored).logits
            return entropy_from_logits(logits), selective_log_softmax(logits, targets)

    def chunked(size: int) -> Callable[[], Any]:
        return lambda: token_stats(
            model, prompts, comps, chunk_size=size, batch_size=completions, path="chunked"
        )

    def device(fold: str) -> Callable[[], Any]:
        return lambda: token_stats(model, prompts, comps, batch_size=completions, path=fold)

    methods: dict[str, Callable[[], Any]] = {"forward": forward}
    for c in chunks:
        methods[f"chunked_{c}"] = chunked(c)
    folds = device_folds(torch)
    for fold in folds:
        methods[f"device_{fold}"] = device(fold)
    methods["trl_fused"] = trl_fused
    methods["trl_utils"] = trl_utils
    n_tokens = completions * tokens
    raw = _interleaved(torch, methods, reps)
    results: dict[str, Any] = {}
    for name, r in raw.items():
        med = statistics.median(r["times_s"])
        results[name] = {
            "tokens_per_s": round(n_tokens / med),
            "median_s": round(med, 5),
            "rounds_tokens_per_s": [round(n_tokens / t) for t in r["times_s"]],
            "peak_extra_gib": _gib(r["peak_extra_bytes"]),
        }
    fwd = results["forward"]["tokens_per_s"]
    for r in results.values():
        r["vs_forward"] = round(r["tokens_per_s"] / fwd, 3)

    # agreement with a float64 log_softmax of the same bf16 logits
    with torch.no_grad():
        logits = forward().double()
        logp = torch.log_softmax(logits, -1)
        ref_h = -(logp.exp() * logp).sum(-1).cpu().numpy()
        ref_lp = logp.gather(-1, targets[..., None]).squeeze(-1).cpu().numpy()
        del logits, logp
    f_h, f_lp = (x.float().cpu().numpy() for x in trl_fused())
    u_h, u_lp = (x.float().cpu().numpy() for x in trl_utils())

    def dev_max(a: Any, b: Any) -> float:
        return float(np.max(np.abs(a.astype(np.float64) - b)))

    agreement: dict[str, Any] = {"mean_entropy_reference": round(float(ref_h.mean()), 4)}
    for name in [f"chunked_{chunks[0]}", *(f"device_{f}" for f in folds)]:
        stats = methods[name]()
        label = "chunked" if name.startswith("chunked") else name
        agreement[f"{label}_entropy_max_abs_diff"] = dev_max(
            np.stack([s.entropies for s in stats]), ref_h
        )
        agreement[f"{label}_logprob_max_abs_diff"] = dev_max(
            np.stack([s.logprobs for s in stats]), ref_lp
        )
    agreement |= {
        "trl_fused_entropy_max_abs_diff": dev_max(f_h, ref_h),
        "trl_fused_logprob_max_abs_diff": dev_max(f_lp, ref_lp),
        "trl_utils_entropy_max_abs_diff": dev_max(u_h, ref_h),
        "trl_utils_logprob_max_abs_diff": dev_max(u_lp, ref_lp),
    }
    out = {
        "model": ("qwen2.5-1.5b-shaped" if shape is QWEN25_15B_SHAPE else "tiny")
        + f" (random init, bf16), {model_bytes / 1e9:.2f} GB weights",
        "shape": shape,
        "completions": completions,
        "completion_tokens": tokens,
        "prompt_tokens": prompt_len,
        "scored_tokens": n_tokens,
        "rounds": reps,
        "order": "interleaved: each round runs every method once, order rotated per round",
        "figure": "median round; peak_extra_gib = most allocated above the model and inputs",
        "entropy_dtype": "float32 (forward in bf16)",
        "methods": results,
        "agreement_vs_float64": agreement,
        "trl_fused": "trl.trainer.utils.add_fused_lm_head(outputs=(log_probs, entropy)), "
        "called as GRPOTrainer does (labels, fused_lm_head=True)",
        "trl_utils": "logits of the scored positions, trl.trainer.utils.entropy_from_logits + "
        "selective_log_softmax",
        "chunked": "token_stats(path='chunked'): the CPU kernel of 128-row chunks (the GPU "
        "default before issue #49)",
        "device": "token_stats(path=fold): the GPU path (rcea.pipeline.probe.device_stats), "
        "bf16 head tiles folded by the Triton kernel or by the plain-torch fold",
        "device_folds": folds,
    }
    model = None  # free the weights before the next section (the closures hold the cell)
    methods.clear()
    _free(torch)
    return out


# --------------------------------------------------------------------------- covariance


def covariance_throughput(
    torch: Any,
    *,
    positions: int = 4096,
    vocab: int = 152064,
    deadline: Callable[[], bool] = lambda: False,
) -> dict[str, Any]:
    """Section 3: positions/s and peak memory of the three exact kernels, float32 logits on
    the device (old ~ 3·N(0,1), new = old + 0.02·N(0,1), as benchmarks/bench_audits_covariance)."""
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator(device=dev).manual_seed(0)
    old = torch.randn(positions, vocab, generator=gen, device=dev, dtype=torch.float32)
    old.mul_(3.0)
    new = torch.randn(positions, vocab, generator=gen, device=dev, dtype=torch.float32)
    new.mul_(0.02).add_(old)
    out: dict[str, Any] = {
        "positions": positions,
        "vocab": vocab,
        "input": f"float32 torch tensors on {dev.type} ({_gib(2 * old.numel() * 4)} GiB)",
        "chunk_rows": plan_chunk_rows(vocab),
        "max_chunk_mib": DEFAULT_MAX_CHUNK_BYTES // 2**20,
        "arithmetic": "pair/predicted/observed: float64 numpy on the host (row chunks copied "
        "from the device); device_*: float64 folds on the device over column tiles "
        "(rcea.pipeline.probe.device_stats.entropy_change_from_logits)",
        "kernels": {},
    }
    kernels = {
        "pair": entropy_change_pair,
        "predicted": predicted_entropy_change,
        "observed": observed_entropy_change,
    }
    for fold in device_folds(torch):
        kernels[f"device_{fold}"] = functools.partial(entropy_change_from_logits, fold=fold)
    results: dict[str, Any] = {}
    for name, kernel in kernels.items():
        if deadline():
            out["kernels"][name] = {"skipped": "time budget"}
            continue
        if name.startswith("device_"):
            kernel(old[:8], new[:8])  # compile the kernel outside the timing
            _sync(torch)
        before = _reset_peak(torch)
        tracemalloc.start()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        t0 = time.perf_counter()
        res = kernel(old, new)
        _sync(torch)
        dt = time.perf_counter() - t0
        results[name] = res
        host_peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
        pred = getattr(res, "predicted", res if name != "observed" else None)
        obs = getattr(res, "observed", res if name == "observed" else None)
        out["kernels"][name] = {
            "seconds": round(dt, 2),
            "positions_per_s": round(positions / dt, 1),
            "peak_extra_host_mib": round(host_peak / 2**20, 1),
            "peak_extra_gpu_gib": _gib(_peak(torch) - before),
            "mean_predicted": None if pred is None else float(pred.mean()),  # type: ignore[attr-defined]  # the timings are numpy arrays in a dict of mixed values
            "mean_observed": None if obs is None else float(obs.mean()),  # type: ignore[attr-defined]  # the timings are numpy arrays in a dict of mixed values
            "finite": bool(all(x is None or math.isfinite(float(x.sum())) for x in (pred, obs))),  # type: ignore[attr-defined]  # the timings are numpy arrays in a dict of mixed values
        }
        _log(f"covariance {name}: {out['kernels'][name]['positions_per_s']} positions/s")
    host = results.get("pair")
    for name, res in results.items():
        if host is None or not name.startswith("device_"):
            continue
        fig = out["kernels"][name]
        for q in ("predicted", "observed", "entropy_old", "entropy_new"):
            a, b = getattr(res, q), getattr(host, q)
            fig[f"{q}_max_rel_diff_vs_host"] = float(np.max(np.abs(a - b) / np.abs(b)))
        pair = out["kernels"]["pair"]["positions_per_s"]
        fig["vs_host_pair"] = round(fig["positions_per_s"] / pair, 1)
    del old, new
    _free(torch)
    return out


# --------------------------------------------------------------------------- score


def score_throughput(
    torch: Any,
    tmp: Path,
    *,
    shape: dict[str, Any] | None = None,
    items: int = 16,
    chars: int = 1000,
    reps: int = 3,
) -> dict[str, Any]:
    """Section ``score``: ``rcea probe score``'s producer (:class:`rcea.pipeline.probe.score.
    Scorer`, what ``score_trajectories`` calls per checkpoint) on a saved, randomly
    initialised Qwen2.5-1.5B-shaped model (character tokenizer padded to its vocabulary: one
    token per character), ``items`` texts of ``chars`` characters: tokens/s of its default
    path (the GPU path on CUDA) against ``path='chunked'`` on the same token ids, interleaved;
    the load and tokenisation are outside the timing."""
    # the scorer imports transformers (the `train` extra): only a device check loads it
    from rcea.pipeline.probe.score import ScoreItem, Scorer

    shape = shape or QWEN25_15B_SHAPE
    model_dir = build_qwen25_shaped(tmp / "score-policy", shape=shape)
    _free(torch)
    scorer = Scorer(str(model_dir), batch_size=8)
    rng = random.Random(0)
    alphabet = "0123456789+-*=() \n"
    batch = [
        ScoreItem(f"t{i}", f"({i}+1)*2", "".join(rng.choice(alphabet) for _ in range(chars)))
        for i in range(items)
    ]
    pairs = [scorer.encode(it) for it in batch]
    prompts, comps = [p for p, _ in pairs], [c for _, c in pairs]
    pad = scorer.tokenizer.pad_token_id or 0
    n_tokens = sum(len(c) for c in comps)
    methods = {
        "scorer": lambda: scorer.score(batch),
        "chunked_128": lambda: token_stats(
            scorer.model, prompts, comps, batch_size=8, pad_id=pad, path="chunked"
        ),
    }
    raw = _interleaved(torch, methods, reps)
    out: dict[str, Any] = {
        "model": ("qwen2.5-1.5b-shaped" if shape is QWEN25_15B_SHAPE else "tiny")
        + f" (random init, {next(scorer.model.parameters()).dtype}), "
        + f"on {next(scorer.model.parameters()).device}",
        "items": items,
        "scored_tokens": n_tokens,
        "batch_size": 8,
        "figure": "median of interleaved rounds; tokenisation and loading excluded",
        "methods": {},
    }
    for name, r in raw.items():
        med = statistics.median(r["times_s"])
        out["methods"][name] = {
            "tokens_per_s": round(n_tokens / med),
            "median_s": round(med, 4),
            "peak_extra_gib": _gib(r["peak_extra_bytes"]),
        }
    m = out["methods"]
    out["scorer_vs_chunked"] = round(
        m["scorer"]["tokens_per_s"] / m["chunked_128"]["tokens_per_s"], 3
    )
    methods.clear()  # the closures hold the model: drop them before freeing
    _free(torch)
    return out


# --------------------------------------------------------------------------- training


def build_qwen25_shaped(out: Path, seed: int = 0, shape: dict[str, Any] | None = None) -> Path:
    """A random Qwen2.5-0.5B-shaped model (or ``shape``) + character tokenizer padded to its
    vocabulary, saved in ``out``."""
    # torch and transformers are the `train` extra: only a device check loads them
    import torch
    from transformers import AutoModelForCausalLM

    shape = shape or QWEN25_05B_SHAPE
    tok = build_char_tokenizer(pad_vocab_to=shape["vocab_size"])
    torch.manual_seed(seed)
    cfg = model_config(tok, **shape)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def training_config(model_dir: Path, out_dir: Path, args: argparse.Namespace, use_vllm: bool):
    """The GRPO section's config (``args``: steps, objective, batch size, lengths)."""
    return _train_config(
        model_dir,
        out_dir,
        objective=args.objective,
        steps=args.steps,
        batch_size=args.batch_size,
        num_generations=args.num_generations,
        completion_length=args.completion_length,
        use_vllm=use_vllm,
        vllm_memory=args.vllm_memory,
        bf16=getattr(args, "bf16", True),
    )


def _train_config(
    model_dir: Path,
    out_dir: Path,
    *,
    objective: str,
    steps: int,
    batch_size: int,
    num_generations: int,
    completion_length: int,
    use_vllm: bool,
    vllm_memory: float = 0.3,
    bf16: bool = True,
):
    # rcea.pipeline.training imports torch (the `train` extra): only a device check loads it
    from rcea.pipeline.training.config import parse_config

    return parse_config(
        {
            "model": {"path": str(model_dir), "dtype": "bfloat16"},
            "objective": {"name": objective},
            "training": {
                "output_dir": str(out_dir),
                "max_steps": steps,
                "learning_rate": 1e-5,
                "per_device_train_batch_size": batch_size,
                "num_generations": num_generations,
                "num_iterations": 1,
                "max_completion_length": completion_length,
                "save_steps": 10_000,
                "logging_steps": 1,
                "bf16": bf16,
                "gradient_checkpointing": True,
                "use_vllm": use_vllm,
                "vllm_mode": "colocate",
                "vllm_gpu_memory_utilization": vllm_memory,
                "vllm_max_model_length": completion_length + 64,
                "progress_bar": False,
            },
            "lora": {"enabled": True, "r": 32, "alpha": 64},
        },
        source="gpu-check",
    )


class CoinReward:
    """Random 0/1 outcomes standing in for the toy verifier (same name and outcome record):
    seeded, with at least one success and one failure in every group of ``group`` so the
    advantages, and so the gradients, are not all zero."""

    __name__ = "toy_correct"

    def __init__(self, group: int, seed: int = 0) -> None:
        self.group = group
        self.rng = random.Random(seed)
        self._pending: list[float] = []

    def __call__(self, prompts: list[Any], completions: list[Any], **_: Any) -> list[float]:
        out = [float(self.rng.random() < 0.5) for _ in completions]
        for g in range(0, len(out), self.group):
            block = out[g : g + self.group]
            if len(block) > 1 and len(set(block)) == 1:
                out[g] = 1.0 - out[g]
        self._pending.extend(out)
        return out

    def pop_outcomes(self) -> list[float]:
        out, self._pending = self._pending, []
        return out


def _instrument(trainer: Any, group: int, torch: Any) -> dict[str, Any]:
    """Coin rewards in place of the toy verifier; per step: wall time, the objective's loss
    values, and whether every trainable parameter's gradient is finite (before the
    optimizer step; losses recorded around ``_compute_loss``, whichever loss computes
    them). Returns the record the callback fills."""
    from transformers import TrainerCallback  # the `train` extra: only a device check loads it

    coin = CoinReward(group)
    trainer.reward_funcs[0] = coin
    trainer._rcea_recorder = coin
    rec: dict[str, Any] = {"step_s": [], "losses": [], "grad_checks": []}
    compute_loss = trainer._compute_loss  # the objective's loss, or TRL's own (GRPO, DAPO)

    def loss(model: Any, inputs: Any) -> Any:
        value = compute_loss(model, inputs)
        rec["losses"].append(float(value.detach().float()))
        return value

    trainer._compute_loss = loss

    class StepRecorder(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            _sync(torch)
            self.t0 = time.perf_counter()

        def on_pre_optimizer_step(self, args, state, control, model=None, **kw):
            n = finite = nonzero = 0
            sq = 0.0
            for p in model.parameters():
                if not p.requires_grad:
                    continue
                n += 1
                if p.grad is None:
                    continue
                g = p.grad.detach().float()
                ok = bool(torch.isfinite(g).all())
                finite += ok
                nonzero += bool(g.abs().sum() > 0)
                if ok:
                    sq += float((g * g).sum())
            rec["grad_checks"].append(
                {
                    "trainable": n,
                    "finite": finite,
                    "nonzero": nonzero,
                    "grad_norm_after_clip": math.sqrt(sq),
                }
            )

        def on_step_end(self, args, state, control, **kw):
            _sync(torch)
            rec["step_s"].append(time.perf_counter() - self.t0)

    trainer.add_callback(StepRecorder())
    return rec


def _train_once(torch: Any, cfg: Any, group: int) -> dict[str, Any]:
    """Build the trainer for ``cfg``, train, and return timings, memory and checks."""
    # imports torch, TRL and transformers (the `train` extra): only a device check loads them
    from rcea.pipeline.training.run import build_trainer

    _free(torch)
    before = _reset_peak(torch)
    t0 = time.perf_counter()
    trainer, _, logger = build_trainer(cfg, progress=False)
    init_s = time.perf_counter() - t0
    rec = _instrument(trainer, group, torch)
    t0 = time.perf_counter()
    trainer.train()
    _sync(torch)
    train_s = time.perf_counter() - t0
    steps = int(trainer.state.global_step)
    step_s = rec["step_s"]
    checks = rec["grad_checks"]
    out: dict[str, Any] = {
        "trainer_init_s": round(init_s, 2),
        "steps": steps,
        "train_s": round(train_s, 2),
        "steps_per_s": round(steps / train_s, 4) if train_s else None,
        "step_s": [round(s, 3) for s in step_s],
        "median_step_s": round(statistics.median(step_s), 3) if step_s else None,
        "steps_per_s_after_first": (
            round((len(step_s) - 1) / sum(step_s[1:]), 4) if len(step_s) > 1 else None
        ),
        "losses": rec["losses"],
        "loss_finite": bool(rec["losses"]) and all(math.isfinite(x) for x in rec["losses"]),
        "grads_finite": bool(checks) and all(c["finite"] == c["trainable"] for c in checks),
        "grad_checks": checks,
        "peak_allocated_gib": _gib(_peak(torch)),
        "peak_extra_gib": _gib(_peak(torch) - before),
        "last_logged": {k: logger.last.get(k) for k in ("loss", "grad_norm", "entropy", "reward")},
    }
    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        out["device_used_gib_at_end"] = _gib(total - free)
    del trainer
    _free(torch)
    return out


def _rollouts(use_vllm: bool) -> str:
    if use_vllm:
        return "vLLM colocated"
    return "Transformers generate (vLLM is not installed)"


def grpo_throughput(
    torch: Any, args: argparse.Namespace, tmp: Path, shape: dict[str, Any] | None
) -> dict[str, Any]:
    """Section 4: GRPO steps/s, bf16 + LoRA, through build_trainer."""
    use_vllm = not args.no_vllm and importlib.util.find_spec("vllm") is not None
    t0 = time.perf_counter()
    model_dir = build_qwen25_shaped(tmp / "policy", shape=shape)
    build_s = time.perf_counter() - t0
    _free(torch)
    cfg = training_config(model_dir, tmp / "run-grpo", args, use_vllm)
    out: dict[str, Any] = {
        "model": "qwen2.5-0.5b-shaped (random init), bf16" if shape is None else "tiny",
        "objective": args.objective,
        "lora": "r32/alpha64 on q,k,v,o,gate,up,down projections",
        "gradient_checkpointing": True,
        "bf16_mixed_precision": args.bf16,
        "weights_dtype": "bfloat16",
        "rollouts": _rollouts(use_vllm),
        "use_vllm": use_vllm,
        "completions_per_step": args.batch_size,
        "num_generations": args.num_generations,
        "max_completion_length": args.completion_length,
        "reward": "random 0/1 outcomes (CoinReward), not the toy verifier",
        "model_build_s": round(build_s, 2),
        "excluded_from_steps_per_s": "model build, saving, trainer init",
    }
    out.update(_train_once(torch, cfg, args.num_generations))
    return out


def objectives_check(
    torch: Any,
    args: argparse.Namespace,
    tmp: Path,
    deadline: Callable[[], bool],
) -> dict[str, Any]:
    """Section 5: each objective for ``--objective-steps`` steps on the section-4 model."""
    from rcea.pipeline.training.objectives import OBJECTIVES  # imports torch (the `train` extra)

    model_dir = tmp / "policy"
    if not (model_dir / "config.json").exists():
        build_qwen25_shaped(model_dir, shape=TINY_SHAPE if args.tiny else None)
    use_vllm = not args.no_vllm and importlib.util.find_spec("vllm") is not None
    out: dict[str, Any] = {
        "steps": args.objective_steps,
        "completions_per_step": args.objective_batch,
        "num_generations": args.objective_generations,
        "max_completion_length": args.objective_length,
        "bf16_mixed_precision": args.bf16,
        "rollouts": _rollouts(use_vllm),
        "reward": "random 0/1 outcomes (CoinReward), not the toy verifier",
        "relative_time": "median step time / grpo's median step time in this section",
        "results": {},
    }
    names = ["grpo"] + [n for n in OBJECTIVES if n != "grpo"]
    for name in names:
        if deadline():
            out["results"][name] = {"skipped": "time budget"}
            continue
        _log(f"objectives: {name}")
        try:
            cfg = _train_config(
                model_dir,
                tmp / f"run-{name}",
                objective=name,
                steps=args.objective_steps,
                batch_size=args.objective_batch,
                num_generations=args.objective_generations,
                completion_length=args.objective_length,
                use_vllm=use_vllm,
                vllm_memory=args.vllm_memory,
                bf16=args.bf16,
            )
            res = _train_once(torch, cfg, args.objective_generations)
            res["ok"] = res["loss_finite"] and res["grads_finite"]
        except Exception as exc:  # noqa: BLE001 - one objective's failure is a figure
            res = {
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=12).splitlines()[-24:],
            }
            _free(torch)
        out["results"][name] = res
    base = out["results"].get("grpo", {}).get("median_step_s")
    for res in out["results"].values():
        if base and res.get("median_step_s"):
            res["step_time_vs_grpo"] = round(res["median_step_s"] / base, 3)
    ran = [r for r in out["results"].values() if "skipped" not in r]
    out["all_ok"] = bool(ran) and len(ran) == len(names) and all(r.get("ok") for r in ran)
    return out


# --------------------------------------------------------------------------- main


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m rcea.pipeline.gpu_check")
    ap.add_argument("--json-out", type=Path, help="write every figure to this JSON file")
    ap.add_argument("--steps", type=int, default=5, help="GRPO steps to time")
    ap.add_argument("--objective", default="grpo", help="objective of the GRPO section")
    ap.add_argument("--batch-size", type=int, default=32, help="completions per step")
    ap.add_argument("--num-generations", type=int, default=8, help="completions per prompt")
    ap.add_argument("--completion-length", type=int, default=256)
    ap.add_argument("--objective-steps", type=int, default=3)
    ap.add_argument("--objective-batch", type=int, default=16)
    ap.add_argument("--objective-generations", type=int, default=8)
    ap.add_argument("--objective-length", type=int, default=64)
    ap.add_argument("--entropy-reps", type=int, default=5, help="interleaved rounds")
    ap.add_argument("--cov-positions", type=int, default=4096)
    ap.add_argument("--vllm-memory", type=float, default=0.3, help="vLLM's GPU memory share")
    ap.add_argument("--no-vllm", action="store_true", help="generate with Transformers")
    ap.add_argument(
        "--only", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}"
    )
    ap.add_argument("--entropy-only", action="store_true", help="--only env,matmul,entropy")
    ap.add_argument(
        "--probe-only",
        action="store_true",
        help=f"--only {PROBE_SECTIONS}: the probe's GPU path (entropy, covariance, score)",
    )
    ap.add_argument("--no-entropy", action="store_true", help="skip the entropy section")
    ap.add_argument(
        "--budget-s", type=float, default=0.0, help="skip work that would start later (0: none)"
    )
    ap.add_argument(
        "--tiny",
        action="store_true",
        help="tiny shapes, runs on CPU too (the test of this script; figures mean nothing)",
    )
    args = ap.parse_args(argv)
    args.bf16 = True  # mixed precision; main turns it off on CPU (--tiny only)
    if args.entropy_only:
        args.only = "env,matmul,entropy"
    if args.probe_only:
        args.only = PROBE_SECTIONS
    if args.no_entropy:
        args.only = ",".join(x for x in args.only.split(",") if x.strip() != "entropy")
    if args.tiny:
        args.steps, args.batch_size, args.num_generations, args.completion_length = 2, 8, 4, 8
        args.objective_steps, args.objective_batch = 2, 8
        args.objective_generations, args.objective_length = 4, 8
        args.entropy_reps, args.cov_positions = 2, 48
    return args


#: Where ``make install`` puts the pinned Triton (for the tests' interpreter); a CUDA build
#: of torch brings its own, which wins (the folder is appended to ``sys.path``).
TRITON_SITE = Path(__file__).resolve().parents[2] / ".triton-site"


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        import torch  # the `train` extra: without it the check says so and exits 0
    except ImportError:
        print("gpu-check skipped: torch is not installed (install the `train` extra)")
        return 0
    # only a GPU runs the Triton folds; on CPU (--tiny) a Triton loaded here, without its
    # interpreter, would be the one every later import in this process gets
    cuda = torch.cuda.is_available()
    if cuda and importlib.util.find_spec("triton") is None and (TRITON_SITE / "triton").is_dir():
        sys.path.append(str(TRITON_SITE))
    if not cuda and not args.tiny:
        print(f"gpu-check skipped: no CUDA device (torch {torch.__version__})")
        return 0
    if not cuda:
        # --tiny on CPU: Transformers refuses bf16 mixed precision there (the weights
        # stay bfloat16)
        args.bf16 = False
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    report = Report(args.json_out, args.tiny)

    def deadline() -> bool:
        return bool(args.budget_s) and report.elapsed() > args.budget_s

    def run(name: str, fn: Callable[[], dict[str, Any]]) -> None:
        if name not in only:
            return
        if name != "env" and deadline():
            report.data[name] = {"skipped": "time budget"}
            report.write()
            return
        report.section(name, fn)

    tiny = TINY_SHAPE if args.tiny else None
    run("env", lambda: environment(torch))
    run("matmul", lambda: _matmul_tflops(torch, *((256, 2) if args.tiny else ())))
    run(
        "entropy",
        lambda: entropy_throughput(
            torch,
            shape=tiny,
            tokens=32 if args.tiny else 2048,
            prompt_len=8 if args.tiny else 64,
            chunks=(16, 64) if args.tiny else (128, 1024, 4096),
            reps=args.entropy_reps,
        ),
    )
    run(
        "covariance",
        lambda: covariance_throughput(
            torch,
            positions=args.cov_positions,
            vocab=1000 if args.tiny else 152064,
            deadline=deadline,
        ),
    )
    with tempfile.TemporaryDirectory(prefix="rcea-gpu-check-") as tmp:
        run(
            "score",
            lambda: score_throughput(
                torch,
                Path(tmp),
                shape=tiny,
                items=4 if args.tiny else 16,
                chars=24 if args.tiny else 1000,
                reps=2 if args.tiny else 3,
            ),
        )
        run("grpo", lambda: grpo_throughput(torch, args, Path(tmp), tiny))
        run("objectives", lambda: objectives_check(torch, args, Path(tmp), deadline))
    report.finish()
    summary = _summary(report.data)
    for line in summary:
        _log(line)
    print(json.dumps(report.data, default=str))
    return 0


def _summary(d: dict[str, Any]) -> list[str]:
    """A few human lines from the report (missing sections said as such)."""
    lines = []
    e = d.get("entropy", {})
    if "methods" in e:
        m = e["methods"]
        lines.append(
            "entropy: "
            + ", ".join(
                f"{k} {v['tokens_per_s']:,} tok/s ({v['vs_forward']}x fwd, "
                f"+{v['peak_extra_gib']} GiB)"
                for k, v in m.items()
            )
        )
    c = d.get("covariance", {})
    for name, k in c.get("kernels", {}).items():
        if "positions_per_s" in k:
            lines.append(
                f"covariance {name}: {k['positions_per_s']} positions/s"
                + (f" ({k['vs_host_pair']}x host)" if "vs_host_pair" in k else "")
            )
    sc = d.get("score", {})
    if "methods" in sc:
        lines.append(
            "score: "
            + ", ".join(f"{k} {v['tokens_per_s']:,} tok/s" for k, v in sc["methods"].items())
        )
    g = d.get("grpo", {})
    if "steps_per_s" in g:
        lines.append(
            f"grpo: {g['steps']} steps, {g['steps_per_s']} steps/s "
            f"({g['steps_per_s_after_first']} after the first), peak "
            f"{g['peak_allocated_gib']} GiB, {g['rollouts']}"
        )
    o = d.get("objectives", {})
    for name, r in o.get("results", {}).items():
        lines.append(
            f"objective {name}: ok={r.get('ok')} x{r.get('step_time_vs_grpo')} "
            f"{r.get('error', r.get('skipped', ''))}"
        )
    lines.append(f"status: {d.get('status')} {d.get('failed_sections', [])}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
