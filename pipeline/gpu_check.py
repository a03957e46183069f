"""`make gpu-check`: the prepared device script. Without CUDA it says so and exits 0.

With CUDA it

1. reports the device and times a bf16 matmul;
2. builds a randomly initialised Qwen2.5-0.5B-shaped model (hidden 896, 24 layers, 14/2
   heads, vocab 151,936; the in-process character tokenizer padded to that vocabulary) and
   saves it like real weights;
3. trains it for a few steps through the same code as ``rcea train run`` (the shared TRL
   trainer, ``grpo`` by default): bf16, LoRA r=32/alpha=64 on every attention and MLP
   projection, gradient checkpointing, and vLLM colocated for the rollouts (without the
   ``gpu`` extra it says so and generates with Transformers instead);
4. prints steps/s (excluding model build and vLLM start-up) and peak GPU memory;
5. times the probe's teacher-forced entropy pass (``pipeline.probe.entropy_kernel.token_stats``)
   on a randomly initialised Qwen2.5-1.5B-shaped model (hidden 1,536, 28 layers, 12/2
   heads, MLP 8,960, vocab 151,936; bf16) over one 2,048-token completion, against a plain
   forward pass (logits only) and full-matrix ``log_softmax`` entropy: tokens/s and peak
   allocated memory of each (``--no-entropy`` skips it, ``--entropy-only`` skips training);

then prints one JSON line. Budget: well under 8 minutes on an H200.

Everything CUDA-specific is imported inside ``main`` so the module imports anywhere.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _matmul_tflops(torch: Any) -> dict[str, Any]:
    dev = torch.device("cuda")
    n = 8192
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    reps = 20
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / reps
    del a, b
    torch.cuda.empty_cache()
    return {"bf16_matmul_n": n, "bf16_tflops": round(2 * n**3 / dt / 1e12, 1)}


def build_qwen25_shaped(out: Path, seed: int = 0) -> Path:
    """A random Qwen2.5-0.5B-shaped model + padded character tokenizer, saved in ``out``."""
    import torch
    from transformers import AutoModelForCausalLM

    from pipeline.policy.model import QWEN25_05B_SHAPE, model_config
    from pipeline.policy.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer(pad_vocab_to=QWEN25_05B_SHAPE["vocab_size"])
    torch.manual_seed(seed)
    cfg = model_config(tok, **QWEN25_05B_SHAPE)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


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


def entropy_throughput(
    torch: Any, tokens: int = 2048, chunk: int = 1024, reps: int = 5
) -> dict[str, Any]:
    """Teacher-forced entropy on a random Qwen2.5-1.5B-shaped bf16 model: tokens/s and peak
    allocated GiB of the plain forward (floor), full-matrix log_softmax and the chunked pass."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from pipeline.probe.entropy_kernel import token_stats

    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen2ForCausalLM(Qwen2Config(**QWEN25_15B_SHAPE)).to(torch.bfloat16).eval()
    prompt_len = 64
    ids = torch.randint(0, QWEN25_15B_SHAPE["vocab_size"], (1, prompt_len + tokens), device="cuda")
    prompt, completion = ids[0, :prompt_len].tolist(), ids[0, prompt_len:].tolist()

    def forward() -> None:
        with torch.no_grad():
            model(input_ids=ids).logits.sum().item()

    def full() -> None:
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, prompt_len - 1 : -1].float()
            logp = torch.log_softmax(logits, -1)
            ent = -(logp.exp() * logp).sum(-1)
            chosen = logp.gather(-1, ids[0, prompt_len:, None]).squeeze(-1)
            (ent.sum() + chosen.sum()).item()

    def chunked() -> None:
        token_stats(model, [prompt], [completion], chunk_size=chunk, batch_size=1)

    out: dict[str, Any] = {
        "entropy_model": "qwen2.5-1.5b-shaped (random, bf16)",
        "entropy_tokens": tokens,
        "entropy_chunk": chunk,
    }
    for name, fn in (("forward", forward), ("full", full), ("chunked", chunked)):
        fn()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        times.sort()
        out[f"entropy_{name}_tokens_per_s"] = round(tokens / times[len(times) // 2])
        out[f"entropy_{name}_peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    out["entropy_chunked_vs_forward"] = round(
        out["entropy_chunked_tokens_per_s"] / out["entropy_forward_tokens_per_s"], 2
    )
    return out


def training_config(model_dir: Path, out_dir: Path, args: argparse.Namespace, use_vllm: bool):  # type: ignore[no-untyped-def]
    from pipeline.training.config import parse_config

    return parse_config(
        {
            "model": {"path": str(model_dir), "dtype": "bfloat16"},
            "objective": {"name": args.objective},
            "training": {
                "output_dir": str(out_dir),
                "max_steps": args.steps,
                "learning_rate": 1e-5,
                "per_device_train_batch_size": args.batch_size,
                "num_generations": 8,
                "num_iterations": 1,
                "max_completion_length": args.completion_length,
                "save_steps": 10_000,
                "bf16": True,
                "gradient_checkpointing": True,
                "use_vllm": use_vllm,
                "vllm_mode": "colocate",
                "vllm_gpu_memory_utilization": args.vllm_memory,
                "vllm_max_model_length": args.completion_length + 64,
                "progress_bar": False,
            },
            "lora": {"enabled": True, "r": 32, "alpha": 64},
        },
        source="gpu-check",
    )


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m pipeline.gpu_check")
    ap.add_argument("--steps", type=int, default=6, help="training steps to time")
    ap.add_argument("--objective", default="grpo")
    ap.add_argument("--batch-size", type=int, default=32, help="completions per step")
    ap.add_argument("--completion-length", type=int, default=256)
    ap.add_argument("--vllm-memory", type=float, default=0.3, help="vLLM's GPU memory share")
    ap.add_argument("--no-vllm", action="store_true", help="generate with Transformers")
    ap.add_argument("--no-entropy", action="store_true", help="skip the entropy throughput")
    ap.add_argument("--entropy-only", action="store_true", help="only the entropy throughput")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        import torch
    except ImportError:
        print("gpu-check skipped: torch is not installed (install the `train` extra)")
        return 0
    if not torch.cuda.is_available():
        print(f"gpu-check skipped: no CUDA device (torch {torch.__version__})")
        return 0
    figures: dict[str, Any] = {"device": torch.cuda.get_device_name(0)}
    figures.update(_matmul_tflops(torch))
    if not args.no_entropy:
        figures.update(entropy_throughput(torch))
        torch.cuda.empty_cache()
        print(
            f"teacher-forced entropy, 2,048 tokens, Qwen2.5-1.5B shape: "
            f"{figures['entropy_chunked_tokens_per_s']} tokens/s chunked "
            f"({figures['entropy_chunked_vs_forward']}x the plain forward's "
            f"{figures['entropy_forward_tokens_per_s']}), peak "
            f"{figures['entropy_chunked_peak_gib']} GiB vs forward "
            f"{figures['entropy_forward_peak_gib']} GiB"
        )
    if args.entropy_only:
        print(json.dumps(figures))
        return 0
    use_vllm = not args.no_vllm and importlib.util.find_spec("vllm") is not None
    if not use_vllm and not args.no_vllm:
        print("vLLM is not installed (the `gpu` extra): rollouts use Transformers generate")
    from pipeline.training.run import build_trainer

    with tempfile.TemporaryDirectory(prefix="rcea-gpu-check-") as tmp:
        t0 = time.perf_counter()
        model_dir = build_qwen25_shaped(Path(tmp) / "qwen25-0.5b-shaped")
        figures["build_s"] = round(time.perf_counter() - t0, 1)
        cfg = training_config(model_dir, Path(tmp) / "run", args, use_vllm)
        torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        trainer, _, logger = build_trainer(cfg, progress=False)
        figures["trainer_init_s"] = round(time.perf_counter() - t0, 1)
        t0 = time.perf_counter()
        trainer.train()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        free, total = torch.cuda.mem_get_info()
        figures.update(
            {
                "objective": args.objective,
                "lora": "r32/alpha64, attention+MLP",
                "use_vllm": use_vllm,
                "steps": trainer.state.global_step,
                "completions_per_step": args.batch_size,
                "max_completion_length": args.completion_length,
                "train_s": round(dt, 1),
                "steps_per_s": round(trainer.state.global_step / dt, 3),
                "peak_torch_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
                "device_used_gib_at_end": round((total - free) / 2**30, 2),
                "last_entropy": logger.last.get("entropy"),
            }
        )
        del trainer
    print(
        f"{figures['device']}: {figures['steps']} steps in {figures['train_s']} s = "
        f"{figures['steps_per_s']} steps/s ({'vLLM colocated' if use_vllm else 'HF generate'}); "
        f"peak torch memory {figures['peak_torch_allocated_gib']} GiB, "
        f"device memory in use {figures['device_used_gib_at_end']} GiB"
    )
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
