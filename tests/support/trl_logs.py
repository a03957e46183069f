"""Completion logs written by TRL's own ``GRPOTrainer(log_completions=True)``: a tiny CPU run
of a plain ``trl.GRPOTrainer`` on the tiny Qwen (:mod:`tests.support.tiny_qwen`), so the
importer is tested on exactly the files TRL writes (as the verl tests use verl's own dump
writer). Two reward functions: ``correct`` (0/1, the verifier outcome) and ``fmt`` (±0.5)."""

from __future__ import annotations

from pathlib import Path

from tests.support.tiny_qwen import build_tiny_qwen

QUESTIONS = ("What is 2 + 3?", "What is 7 - 4?", "What is 3 * 3?")


def correct(completions: list, **kw: object) -> list[float]:  # type: ignore[type-arg]
    texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
    return [float(len(t) % 2) for t in texts]


def fmt(completions: list, **kw: object) -> list[float]:  # type: ignore[type-arg]
    texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
    return [0.5 if t.strip() else -0.5 for t in texts]


def write_trl_logs(tmp: Path, *, conversational: bool, max_steps: int = 2) -> Path:
    """Run TRL's trainer for ``max_steps`` steps and return its ``output_dir``."""
    # the `train` extra: torch, datasets and TRL are imported only by the tests that train
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    model = build_tiny_qwen(tmp / "model").path
    prompts = (
        [[{"role": "user", "content": q}] for q in QUESTIONS]
        if conversational
        else [f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n" for q in QUESTIONS]
    )
    out = tmp / "trl-out"
    args = GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        max_steps=max_steps,
        logging_steps=1,
        learning_rate=1e-4,
        beta=0.0,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        log_completions=True,
        disable_tqdm=True,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=str(model),
        reward_funcs=[correct, fmt],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": prompts * 4}),
    )
    trainer.train()
    return out
