"""Teacher-forced entropy pass: throughput and peak memory against two baselines.

Methods, each on the same random Qwen2-shaped model and the same token sequences:

* ``forward``  — the floor: one plain forward pass that produces the [B, L, V] logits;
* ``full``     — full-matrix entropy: forward, then ``log_softmax`` over all positions,
                 entropy and chosen log-probs (the naive reference);
* ``chunked``  — ``pipeline.probe.entropy_kernel.token_stats`` (decoder once, LM head +
                 log_softmax over ``chunk`` positions at a time).

Throughput = completion tokens scored per second (median of ``--reps`` rounds after one
warm-up, the three methods interleaved in each round in one process, so that load from
other processes hits them alike). Peak memory = peak RSS of one call, in a fresh process
per method, minus the RSS once the model and inputs are ready. Targets: chunked ≥ 0.8×
forward throughput; chunked peak ≤ forward peak + one chunk of float32 logits
(chunk × vocab × 4 bytes).

    python benchmarks/bench_probe_entropy.py [--tokens 1024] [--vocab 151936] [--chunk 128]

``--smoke`` runs 32 tokens over a 512-token vocabulary in seconds (``make test`` runs it so
that the script cannot rot); its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
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

    from pipeline.probe.entropy_kernel import token_stats

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

    def forward() -> None:
        with torch.no_grad():
            model(input_ids=ids).logits.sum()

    def full() -> None:
        with torch.no_grad():
            logits = model(input_ids=ids).logits[:, prompt_len - 1 : -1].float()
            logp = torch.log_softmax(logits, -1)
            ent = -(logp.exp() * logp).sum(-1)
            chosen = logp.gather(-1, ids[:, prompt_len:, None]).squeeze(-1)
            (ent.sum() + chosen.sum()).item()

    def chunked() -> None:
        token_stats(model, prompts, comps, chunk_size=args.chunk, batch_size=args.batch)

    return {
        "n_tokens": args.batch * per_seq,
        "methods": {"forward": forward, "full": full, "chunked": chunked},
    }


def run_memory(args: argparse.Namespace) -> dict:
    """Peak RSS of one call of ``args.method`` above the RSS once everything is set up."""
    setup = _setup(args)
    base_rss = _rss_mb()
    setup["methods"][args.method]()
    return {"method": args.method, "peak_extra_mb": _peak_mb() - base_rss}


def run_timing(args: argparse.Namespace) -> dict:
    """Tokens/s of each method: median of ``reps`` rounds, methods interleaved round-robin
    inside each round so that load from other processes hits all of them alike."""
    setup = _setup(args)
    methods = setup["methods"]
    for fn in methods.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(args.reps):
        for name, fn in methods.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: setup["n_tokens"] / statistics.median(t) for name, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=1024, help="completion tokens per pass")
    ap.add_argument("--batch", type=int, default=2, help="sequences per pass")
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--chunk", type=int, default=128, help="positions per LM-head chunk")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--method", choices=["forward", "full", "chunked"], help=argparse.SUPPRESS)
    ap.add_argument("--timing", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: does it still run?")
    add_json_out(ap)
    args = ap.parse_args()
    if args.smoke:  # the children get these values through their explicit arguments
        args.tokens, args.vocab, args.chunk, args.reps, args.threads = 32, 512, 8, 1, 1
    if args.method or args.timing:
        print(json.dumps(run_timing(args) if args.timing else run_memory(args)))
        return

    def child(*extra: str) -> dict:
        cmd = [sys.executable, __file__, *extra]
        for key in ("tokens", "batch", "vocab", "chunk", "reps", "threads"):
            cmd += [f"--{key}", str(getattr(args, key))]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])

    speed = child("--timing")
    res = {
        m: {"tokens_per_s": speed[m], **child("--method", m)}
        for m in ("forward", "full", "chunked")
    }
    fwd, full, ours = res["forward"], res["full"], res["chunked"]
    chunk_mb = args.chunk * args.vocab * 4 / 2**20
    ratio = ours["tokens_per_s"] / fwd["tokens_per_s"]
    print(
        f"teacher-forced entropy, {args.tokens} tokens, vocab {args.vocab:,}, "
        f"chunk {args.chunk} ({chunk_mb:.0f} MB of float32 logits), {args.threads} threads"
    )
    print(f"{'method':<10}{'tokens/s':>12}{'peak extra MB':>16}{'vs forward':>12}")
    for name, r in res.items():
        print(
            f"{name:<10}{r['tokens_per_s']:>12.0f}{r['peak_extra_mb']:>16.0f}"
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
    emit(
        {
            "bench": "probe_entropy",
            **{k: v for k, v in vars(args).items() if k not in ("method", "timing", "json_out")},
            "results": res,
            "throughput_vs_forward": ratio,
            "full_vs_forward": full["tokens_per_s"] / fwd["tokens_per_s"],
            "memory_target_met": mem_ok,
        },
        args.json_out,
    )


if __name__ == "__main__":
    main()
