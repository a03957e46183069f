"""Build the tiny base policy: tokenizer + random Qwen2 model + supervised warm start,
saved with ``save_pretrained`` and evaluated on the probe split."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rcea.pipeline import toy
from rcea.pipeline.policy.model import build_model, n_parameters
from rcea.pipeline.policy.sampling import sample_completions, summarise
from rcea.pipeline.policy.sft import Mixture, warm_start
from rcea.pipeline.policy.tokenizer import build_char_tokenizer

METADATA_FILE = "rcea_base.json"
SHAPE_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
)


@dataclass
class BaseReport:
    path: str
    seed: int
    n_parameters: int
    sft_steps: int
    seconds: float
    final_loss: float
    evaluation: dict[str, Any]
    # The Qwen2 shape actually built (TINY_DEFAULTS with the overrides applied).
    model_shape: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def build_base(
    out_dir: str | Path,
    *,
    seed: int = 0,
    sft_steps: int = 1500,
    batch_size: int = 16,
    lr: float = 3e-3,
    eval_questions: int = 43,
    eval_k: int = 8,
    mixture: Mixture | None = None,
    model_overrides: dict[str, Any] | None = None,
    progress: bool = True,
) -> BaseReport:
    """Build, warm-start, save and evaluate the tiny base model in ``out_dir``."""
    import torch  # the `train` extra: only `rcea train base` pays for it

    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_char_tokenizer()
    model = build_model(tokenizer, seed=seed, **(model_overrides or {}))
    mix = mixture or Mixture()
    losses = warm_start(
        model,
        tokenizer,
        steps=sft_steps,
        batch_size=batch_size,
        lr=lr,
        seed=seed,
        mixture=mix,
        progress=progress,
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    probe = toy.generate_questions("probe", min(eval_questions, len(toy.question_pool("probe"))))
    with torch.no_grad():
        samples = sample_completions(model, tokenizer, probe, eval_k, seed=seed)
    summary = summarise(samples, eval_k).to_dict()
    tail = losses[-20:] if losses else [float("nan")]
    report = BaseReport(
        path=str(out),
        seed=seed,
        n_parameters=n_parameters(model),
        sft_steps=sft_steps,
        seconds=time.perf_counter() - t0,
        final_loss=sum(tail) / len(tail),
        evaluation=summary,
        model_shape={k: getattr(model.config, k) for k in SHAPE_KEYS},
    )
    meta = {**report.to_dict(), "mixture": mix.to_dict(), "batch_size": batch_size, "lr": lr}
    (out / METADATA_FILE).write_text(json.dumps(meta, indent=2))
    return report
