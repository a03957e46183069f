"""Training speed of the tiny policy on CPU, per objective, through the shared TRL trainer.

Figures, all measured in this run on the same base model:

* steps/s of a short training run per objective (rollouts with Transformers ``generate``,
  4 optimizer iterations per rollout, 32 completions per step);
* the loss overhead of each objective relative to ``grpo``: on one fixed scored rollout,
  the median time of ``prepare`` (once per rollout, divided by the 4 iterations that share
  it) plus ``_compute_loss`` forward and backward, as a ratio to GRPO's (target <= 1.3x);
* the cost of the live ``rcea/`` numbers (docs/training-live.md): GRPO training runs with
  the callback on and off, each in its own process (interleaved, on/off/on/off), the
  median optimizer-step time (TRL's ``step_time``) on vs off as a ratio, the callback's own
  time per step as a share of the step off (target <= 3 %: the whole-step ratio carries the
  machine's noise, larger than 3 % on a shared machine), and the peak RSS on vs off
  (target within 5 %).

Run: ``make bench`` or ``python benchmarks/bench_training.py [--model DIR] [--steps 12]``.
Without ``--model`` a base model is warm-started for ``--sft-steps`` steps first (speed
does not depend on its quality). ``--smoke`` runs 5 warm-start steps, one training step
per objective on 8 completions of 16 tokens (``make test`` runs it so that the script cannot
rot); its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from common import add_json_out, emit  # benchmarks/common.py

warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", category=UserWarning)

OBJECTIVES = ("grpo", "dapo", "clip_cov", "kl_cov", "gtpo", "ep_grpo")


BATCH, GENERATIONS, COMPLETION = 32, 8, 64  # completions per step, per question, tokens


def config(model: Path, out: Path, objective: str, steps: int, threads: int):  # type: ignore[no-untyped-def]
    from rcea.pipeline.training.config import parse_config

    return parse_config(
        {
            "model": {"path": str(model)},
            "objective": {"name": objective},
            "objectives": {"clip_cov": {"clip_ratio": 0.02}, "kl_cov": {"k_ratio": 0.2}},
            "training": {
                "output_dir": str(out),
                "max_steps": steps,
                "learning_rate": 3e-4,
                "per_device_train_batch_size": BATCH,
                "num_generations": GENERATIONS,
                "num_iterations": 4,
                "max_completion_length": COMPLETION,
                "save_steps": 10_000,
                "seed": 42,
                "torch_threads": threads,
                "progress_bar": False,
            },
        },
        source="bench",
    )


def loss_timings(model: Path, root: Path, reps: int, threads: int) -> dict[str, dict[str, float]]:
    """Median prepare and loss (forward + backward) times per objective on one rollout.

    All six trainers are built first; the repetitions then go round-robin over the
    objectives (after one warm-up round) so that machine-load drift hits all of them alike."""
    from rcea.pipeline.training.run import build_trainer

    trainers = {}
    for name in OBJECTIVES:
        trainer, _, _ = build_trainer(
            config(model, root / f"loss-{name}", name, 4, threads), progress=False
        )
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = 1
        trainers[name] = trainer
    first = trainers["grpo"]
    rows = next(iter(first.get_train_dataloader()))
    # one rollout, generated and scored by TRL (no objective-specific preparation)
    scored = super(type(first), first)._generate_and_score_completions(rows)
    outcomes = first._rcea_recorder.pop_outcomes()
    times: dict[str, dict[str, list[float]]] = {n: {"prep": [], "loss": []} for n in OBJECTIVES}
    for rep in range(reps + 1):
        for name, trainer in trainers.items():
            t0 = time.perf_counter()
            inputs = trainer.rcea_prepare(dict(scored), list(outcomes))
            t1 = time.perf_counter()
            trainer.model.zero_grad(set_to_none=True)
            trainer._compute_loss(trainer.model, inputs).backward()
            t2 = time.perf_counter()
            if rep > 0:  # round 0 warms up
                times[name]["prep"].append(t1 - t0)
                times[name]["loss"].append(t2 - t1)
    return {
        n: {
            "prepare_ms": 1000 * statistics.median(v["prep"]),
            "loss_ms": 1000 * statistics.median(v["loss"]),
        }
        for n, v in times.items()
    }


def live_child(model: Path, out: Path, live: bool, steps: int, threads: int) -> dict[str, Any]:
    """One GRPO run with the live callback on or off (in a fresh process: peak RSS is the
    run's own): median step time, the callback's own time per step, peak RSS."""
    import resource

    from rcea.pipeline.training.run import build_trainer

    cfg = config(model, out, "grpo", steps, threads)
    cfg.training.live_metrics = live
    trainer, _, _ = build_trainer(cfg, progress=False)
    trainer.train()
    step_times = [h["step_time"] for h in trainer.state.log_history if "step_time" in h]
    live_cb = trainer.rcea_live
    return {
        "step_ms": 1000 * statistics.median(step_times[1:] or step_times),  # step 1 warms up
        "callback_ms": 1000 * live_cb.seconds / max(len(step_times), 1) if live_cb else 0.0,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def live_cost(model: Path, root: Path, steps: int, threads: int, rounds: int) -> dict[str, Any]:
    """Interleaved child runs with the callback on and off; medians over the rounds."""
    runs: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    for r in range(rounds):
        for mode in ("on", "off"):
            cmd = [sys.executable, __file__, "--live-child", mode, "--model", str(model),
                   "--steps", str(steps), "--threads", str(threads),
                   "--out", str(root / f"live-{mode}-{r}")]  # fmt: skip
            if BATCH != 32:
                cmd.append("--smoke")
            res = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if res.returncode != 0:
                raise RuntimeError(f"live child failed:\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
            runs[mode].append(json.loads(res.stdout.strip().splitlines()[-1]))

    def med(mode: str, key: str) -> float:
        return statistics.median(x[key] for x in runs[mode])

    on, off = med("on", "step_ms"), med("off", "step_ms")
    return {
        "step_ms_on": round(on, 2),
        "step_ms_off": round(off, 2),
        "step_ratio_on_off": round(on / off, 4),
        "callback_ms_per_step": round(med("on", "callback_ms"), 3),
        "callback_share_of_step": round(med("on", "callback_ms") / off, 4),
        "peak_rss_mb_on": round(med("on", "peak_rss_mb"), 1),
        "peak_rss_mb_off": round(med("off", "peak_rss_mb"), 1),
        "peak_rss_ratio_on_off": round(med("on", "peak_rss_mb") / med("off", "peak_rss_mb"), 4),
        "rounds": rounds,
        "target_step_ratio": 1.03,
        "target_callback_share": 0.03,
        "target_rss_ratio": 1.05,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, default=None, help="a built base model directory")
    ap.add_argument("--sft-steps", type=int, default=300)
    ap.add_argument("--steps", type=int, default=12, help="training steps per objective")
    ap.add_argument("--reps", type=int, default=15, help="loss timing repetitions")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--live-rounds", type=int, default=3, help="on/off rounds, live cost")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: does it still run?")
    ap.add_argument("--live-child", choices=("on", "off"), help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    add_json_out(ap)
    args = ap.parse_args()
    global BATCH, GENERATIONS, COMPLETION
    if args.smoke:
        BATCH, GENERATIONS, COMPLETION = 8, 4, 16
    if args.live_child:
        import torch

        torch.set_num_threads(args.threads)
        live = live_child(args.model, args.out, args.live_child == "on", args.steps, args.threads)
        print(json.dumps(live))
        return
    if args.smoke:
        args.sft_steps, args.steps, args.reps, args.live_rounds = 5, 1, 1, 1
    import torch

    torch.set_num_threads(args.threads)
    from rcea.pipeline.training.run import run_training

    with tempfile.TemporaryDirectory(prefix="rcea-bench-train-") as tmp:
        root = Path(tmp)
        model = args.model
        if model is None:
            from rcea.pipeline.policy import build_base

            model = build_base(
                root / "base", sft_steps=args.sft_steps, eval_questions=4, eval_k=2, progress=False
            ).path
        timings = loss_timings(Path(model), root, args.reps, args.threads)
        speed = {}
        for name in OBJECTIVES:
            res = run_training(
                config(Path(model), root / name, name, args.steps, args.threads), progress=False
            )
            speed[name] = res.steps / res.seconds
        live = live_cost(Path(model), root, max(args.steps, 2), args.threads, args.live_rounds)
    iters = 4
    per_step = {k: v["loss_ms"] + v["prepare_ms"] / iters for k, v in timings.items()}
    ratio = {k: per_step[k] / per_step["grpo"] for k in OBJECTIVES}
    print(
        f"{'objective':<10}{'steps/s':>9}{'loss ms':>10}{'prepare ms':>12}"
        f"{'per step ms':>13}{'vs grpo':>9}"
    )
    for k in OBJECTIVES:
        print(
            f"{k:<10}{speed[k]:>9.2f}{timings[k]['loss_ms']:>10.1f}"
            f"{timings[k]['prepare_ms']:>12.1f}{per_step[k]:>13.1f}{ratio[k]:>8.2f}x"
        )
    worst = max(ratio[k] for k in OBJECTIVES)
    print(
        f"loss overhead vs grpo (prepare/{iters} + loss fwd/bwd), worst {worst:.2f}x "
        f"(target <= 1.3x); {args.threads} torch thread(s), {BATCH} completions/step"
    )
    print(
        f"live rcea/ numbers: step {live['step_ms_on']:.1f} ms on vs {live['step_ms_off']:.1f} ms "
        f"off ({live['step_ratio_on_off']:.3f}x, target <= 1.03x); callback "
        f"{live['callback_ms_per_step']:.2f} ms/step ({live['callback_share_of_step']:.2%}); "
        f"peak RSS {live['peak_rss_mb_on']:.0f} vs {live['peak_rss_mb_off']:.0f} MB "
        f"({live['peak_rss_ratio_on_off']:.3f}x, target <= 1.05x)"
    )
    emit(
        {
            "bench": "training",
            "smoke": args.smoke,
            "threads": args.threads,
            "steps": args.steps,
            "steps_per_s": {k: round(v, 3) for k, v in speed.items()},
            "loss_ms": {k: round(v["loss_ms"], 2) for k, v in timings.items()},
            "prepare_ms": {k: round(v["prepare_ms"], 2) for k, v in timings.items()},
            "overhead_vs_grpo": {k: round(v, 3) for k, v in ratio.items()},
            "target_overhead": 1.3,
            "live": live,
        },
        args.json_out,
    )


if __name__ == "__main__":
    main()
