"""Teacher-forced entropy pass: throughput and peak memory against the forward floor and TRL.

Methods, each on the same random Qwen2-shaped model and the same token sequences (2 ×
(32-token prompt + 512-token completion) by default: 1,088 positions, 1,024 scored):

* ``forward``  — the floor: one plain forward pass whose LM head runs on exactly the scored
                 positions (``logits_to_keep`` = the 1,024 positions that predict a
                 completion token), then a sum over the logits; no entropy;
* ``forward_all`` — the same forward with logits for every position (prompt included:
                 1,088 rows, 6 % more head work; the floor of runs before 2026-12-02);
* ``trl``      — the peer: TRL's own path, the scored positions' logits, then
                 ``trl.trainer.utils.entropy_from_logits`` and ``selective_log_softmax``
                 (as TRL's trainers score completions without a fused kernel);
* ``full``     — full-matrix entropy: forward, then ``log_softmax`` over all scored
                 positions, entropy and chosen log-probs (the naive reference);
* ``chunked``  — ``rcea.pipeline.probe.entropy_kernel.token_stats`` (decoder once, LM head + entropy
                 over ``chunk`` positions × one vocabulary tile at a time).

Throughput = completion tokens scored per second (median of ``--reps`` rounds after one
warm-up, the methods interleaved in each round in one process, so that load from other
processes hits them alike); the 1-minute load average before and after the timed rounds is
stored with the figures. Peak memory = peak RSS of one call, in a fresh process per method,
minus the RSS once the model and inputs are ready. Targets: chunked ≥ 0.8× forward
throughput; chunked peak ≤ forward peak + one chunk of float32 logits (chunk × vocab × 4
bytes). ``--profile`` instead prints where the chunked pass spends its time (torch.profiler
self time per operator, grouped: decoder, head matmul, reductions, exp, …), for the current
vocabulary tiling and for one tile of the whole vocabulary (the kernel before tiling).

    python benchmarks/bench_probe_entropy.py [--tokens 1024] [--vocab 151936] [--chunk 128]

``--smoke`` runs 32 tokens over a 512-token vocabulary in seconds (``make test`` runs it so
that the script cannot rot); its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import add_json_out, emit  # benchmarks/common.py

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPE = {  # a small decoder with Qwen2.5's vocabulary: the LM head dominates on CPU
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
}


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _setup(args: argparse.Namespace) -> dict:
    """The model, the sequences and the three methods as zero-argument callables."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rcea.pipeline.probe.entropy_kernel import token_stats

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=args.vocab, tie_word_embeddings=True, **SHAPE)
    model = Qwen2ForCausalLM(cfg).eval()
    gen = torch.Generator().manual_seed(1)
    prompt_len = 32
    per_seq = args.tokens // args.batch
    ids = torch.randint(0, args.vocab, (args.batch, prompt_len + per_seq), generator=gen)
    prompts = [row[:prompt_len].tolist() for row in ids]
    comps = [row[prompt_len:].tolist() for row in ids]

    scored = torch.arange(prompt_len - 1, prompt_len - 1 + per_seq)  # rows predicting y_t
    targets = ids[:, prompt_len:]

    def forward() -> None:
        with torch.no_grad():
            model(input_ids=ids, logits_to_keep=scored).logits.sum().item()

    def forward_all() -> None:
        with torch.no_grad():
            model(input_ids=ids).logits.sum().item()

    def trl() -> None:
        from trl.trainer.utils import entropy_from_logits, selective_log_softmax

        with torch.no_grad():
            logits = model(input_ids=ids, logits_to_keep=scored).logits
            ent = entropy_from_logits(logits)
            chosen = selective_log_softmax(logits, targets)
            (ent.sum() + chosen.sum()).item()

    def full() -> None:
        with torch.no_grad():
            logits = model(input_ids=ids, logits_to_keep=scored).logits.float()
            logp = torch.log_softmax(logits, -1)
            ent = -(logp.exp() * logp).sum(-1)
            chosen = logp.gather(-1, targets[:, :, None]).squeeze(-1)
            (ent.sum() + chosen.sum()).item()

    def chunked() -> None:
        token_stats(
            model, prompts, comps, chunk_size=args.chunk, batch_size=args.batch,
            vocab_block=args.vocab_block,
        )  # fmt: skip

    return {
        "n_tokens": args.batch * per_seq,
        "model": model,
        "prompts": prompts,
        "comps": comps,
        "methods": {
            "forward": forward,
            "forward_all": forward_all,
            "trl": trl,
            "full": full,
            "chunked": chunked,
        },
    }


def run_memory(args: argparse.Namespace) -> dict:
    """Peak RSS of one call of ``args.method`` above the RSS once everything is set up."""
    setup = _setup(args)
    base_rss = _rss_mb()
    setup["methods"][args.method]()
    return {"method": args.method, "peak_extra_mb": _peak_mb() - base_rss}


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # not on every platform
        return None


def run_timing(args: argparse.Namespace) -> dict:
    """Tokens/s of each method: median of ``reps`` rounds, methods interleaved round-robin
    inside each round so that load from other processes hits all of them alike; the
    1-minute load average before and after the timed rounds."""
    setup = _setup(args)
    methods = setup["methods"]
    for fn in methods.values():
        fn()  # warm-up
    load_before = _load()
    times: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(args.reps):
        for name, fn in methods.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    n = setup["n_tokens"]
    return {
        "tokens_per_s": {name: n / statistics.median(t) for name, t in times.items()},
        "rounds_tokens_per_s": {name: [round(n / x, 1) for x in t] for name, t in times.items()},
        "load_before": load_before,
        "load_after": _load(),
    }


#: torch operators grouped into the parts of the chunk loop (self CPU time)
PARTS = {
    "head matmul": ("aten::mm", "aten::addmm", "aten::matmul", "aten::bmm"),
    "max (amax)": ("aten::amax", "aten::max", "aten::clamp_"),
    "shift (sub)": ("aten::sub",),
    "exp": ("aten::exp",),
    "sums (Σe, Σe·u)": ("aten::sum",),
    "product e·u (mul_)": ("aten::mul_", "aten::mul"),
    "tile merge (add, log, div)": ("aten::maximum", "aten::add", "aten::log", "aten::div"),
    "temperature (div_)": ("aten::div_",),
    "hidden rows, target logits (index)": ("aten::index", "aten::index_put_", "aten::gather"),
    "copies (.cpu(), head output)": ("aten::copy_", "aten::_to_copy", "aten::to"),
}


def run_profile(args: argparse.Namespace) -> dict:
    """Where the chunked pass spends its time, in ms per call (median of ``reps`` calls after
    a warm-up): the decoder timed alone, then the chunk loop of ``token_stats`` (the
    hidden-row gather, ``_ChunkBuffers.stats``, the ``.cpu()`` copies) under
    torch.profiler, self CPU time per group of operators; "other" = loop wall time minus
    the groups (Python, small ops, the profiler itself)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from rcea.pipeline.probe.entropy_kernel import (
        _ChunkBuffers,
        decoder_and_head,
        hidden_states,
        padded_batch,
    )

    setup = _setup(args)
    model, prompts, comps = setup["model"], setup["prompts"], setup["comps"]
    ids, mask, plen = padded_batch(prompts, comps, 0)
    hid = hidden_states(model, ids, mask)
    rb = torch.cat([torch.full((len(c),), i) for i, c in enumerate(comps)])
    rt = torch.cat([torch.arange(plen[i] - 1, plen[i] - 1 + len(c)) for i, c in enumerate(comps)])
    tgt = torch.tensor([t for c in comps for t in c])
    _, head = decoder_and_head(model)
    n_rows = min(args.chunk, rb.numel())
    out: dict = {"load_before": _load()}
    tilings = {"tiled": args.vocab_block, "one tile (before)": args.vocab}
    for label, block in tilings.items():
        buffers = _ChunkBuffers(head, n_rows, "cpu", block)

        def loop(buffers: _ChunkBuffers = buffers) -> None:
            with torch.no_grad():
                for c0 in range(0, rb.numel(), args.chunk):
                    c1 = min(c0 + args.chunk, rb.numel())
                    h, lp = buffers.stats(hid[rb[c0:c1], rt[c0:c1]], tgt[c0:c1], 1.0)
                    h.cpu(), lp.cpu()

        loop()
        runs = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            hidden_states(model, ids, mask)
            parts = {"decoder (timed alone)": (time.perf_counter() - t0) * 1000}
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                t0 = time.perf_counter()
                loop()
                wall = (time.perf_counter() - t0) * 1000
            self_ms = {e.key: e.self_cpu_time_total / 1000 for e in prof.key_averages()}
            for part, ops in PARTS.items():
                parts[part] = sum(self_ms.get(op, 0.0) for op in ops)
            parts["other (Python, small ops)"] = wall - sum(
                v for k, v in parts.items() if not k.startswith("decoder")
            )
            parts["chunk loop (wall)"] = wall
            runs.append(parts)
        out[label] = {k: round(statistics.median(r[k] for r in runs), 1) for k in runs[0]}
        out[label]["block"] = buffers.block
    out["load_after"] = _load()
    return out


METHODS = ("forward", "forward_all", "trl", "full", "chunked")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=1024, help="completion tokens per pass")
    ap.add_argument("--batch", type=int, default=2, help="sequences per pass")
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--chunk", type=int, default=128, help="positions per LM-head chunk")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: steadier on a shared machine)"
    )
    ap.add_argument(
        "--vocab-block", type=int, default=None, help="vocabulary tile (default: the kernel's)"
    )
    ap.add_argument("--profile", action="store_true", help="where the chunked pass spends time")
    ap.add_argument("--method", choices=METHODS, help=argparse.SUPPRESS)
    ap.add_argument("--timing", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: does it still run?")
    add_json_out(ap)
    args = ap.parse_args()
    if args.smoke:  # the children get these values through their explicit arguments
        args.tokens, args.vocab, args.chunk, args.reps, args.threads = 32, 512, 8, 1, 1
    if args.profile:
        prof = run_profile(args)
        for label in ("tiled", "one tile (before)"):
            print(f"{label} (ms per call, median of {args.reps}):")
            for part, ms in prof[label].items():
                print(f"  {part:<32}{ms:>10.1f}")
        print(json.dumps(prof))
        return
    if args.method or args.timing:
        print(json.dumps(run_timing(args) if args.timing else run_memory(args)))
        return

    def child(*extra: str) -> dict:
        cmd = [sys.executable, __file__, *extra]
        for key in ("tokens", "batch", "vocab", "chunk", "reps", "threads", "vocab_block"):
            if getattr(args, key) is not None:
                cmd += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])

    timing = child("--timing")
    speed = timing["tokens_per_s"]
    res = {m: {"tokens_per_s": speed[m], **child("--method", m)} for m in METHODS}
    fwd, ours = res["forward"], res["chunked"]
    chunk_mb = args.chunk * args.vocab * 4 / 2**20
    ratio = ours["tokens_per_s"] / fwd["tokens_per_s"]
    print(
        f"teacher-forced entropy, {args.tokens} tokens, vocab {args.vocab:,}, "
        f"chunk {args.chunk} ({chunk_mb:.0f} MB of float32 logits), {args.threads} threads, "
        f"load {timing['load_before']} -> {timing['load_after']}"
    )
    print(f"{'method':<12}{'tokens/s':>12}{'peak extra MB':>16}{'vs forward':>12}")
    for name, r in res.items():
        print(
            f"{name:<12}{r['tokens_per_s']:>12.0f}{r['peak_extra_mb']:>16.0f}"
            f"{r['tokens_per_s'] / fwd['tokens_per_s']:>11.2f}x"
        )
    print(
        f"target: chunked >= 0.8x forward throughput: {ratio:.2f}x "
        f"({'met' if ratio >= 0.8 else 'NOT met'})"
    )
    mem_ok = ours["peak_extra_mb"] <= fwd["peak_extra_mb"] + chunk_mb
    print(
        f"target: chunked peak <= forward peak + one chunk: {ours['peak_extra_mb']:.0f} MB <= "
        f"{fwd['peak_extra_mb'] + chunk_mb:.0f} MB ({'met' if mem_ok else 'NOT met'})"
    )
    skip = ("method", "timing", "profile", "json_out")
    from rcea.pipeline.probe.entropy_kernel import default_vocab_block  # numpy only: no torch here

    rows = min(args.chunk, args.tokens)
    tile = min(
        args.vocab, args.vocab_block or default_vocab_block(args.vocab, rows, "cpu", args.threads)
    )
    emit(
        {
            "bench": "probe_entropy",
            **{k: v for k, v in vars(args).items() if k not in skip},
            "tile": tile,
            "results": res,
            "rounds_tokens_per_s": timing["rounds_tokens_per_s"],
            "load_before": timing["load_before"],
            "load_after": timing["load_after"],
            "throughput_vs_forward": ratio,
            # chunked / forward within each round (the pair ran back to back): its median
            "paired_vs_forward_median": statistics.median(
                c / f
                for c, f in zip(
                    timing["rounds_tokens_per_s"]["chunked"],
                    timing["rounds_tokens_per_s"]["forward"],
                    strict=True,
                )
            ),
            "vs_trl": ours["tokens_per_s"] / res["trl"]["tokens_per_s"],
            "trl_vs_forward": res["trl"]["tokens_per_s"] / fwd["tokens_per_s"],
            "full_vs_forward": res["full"]["tokens_per_s"] / fwd["tokens_per_s"],
            "forward_all_vs_forward": res["forward_all"]["tokens_per_s"] / fwd["tokens_per_s"],
            "memory_target_met": mem_ok,
        },
        args.json_out,
    )


if __name__ == "__main__":
    main()
