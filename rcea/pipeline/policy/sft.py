"""Supervised warm start of the tiny policy on a strategy mixture with injected errors.

The mixture gives the base model several correct modes (both strategies of every kind),
realisation variety (operand order, step order, spacing), failures (injected arithmetic,
operand and copy errors plus its own mistakes) and some R=1, V=0 trajectories (slips)."""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from typing import Any

from tqdm.auto import tqdm

from rcea.pipeline import toy


@dataclass(frozen=True)
class Mixture:
    first_strategy: float = 0.6  # probability of the kind's first strategy (else the second)
    commute: float = 0.5
    reorder: float = 0.5
    spaced: float = 0.25
    error_rate: float = 0.3
    arith: float = 0.45  # shares of the injected error kinds (normalised)
    slip: float = 0.3
    operand: float = 0.1
    boxed: float = 0.15

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sample_example(rng: random.Random, question: toy.Question, mix: Mixture) -> str:
    """One warm-start completion for ``question`` drawn from the mixture."""
    first, second = question.strategies
    strat = first if rng.random() < mix.first_strategy else second
    variant = toy.Variant(
        commute=rng.random() < mix.commute,
        reorder=rng.random() < mix.reorder,
        spaced=rng.random() < mix.spaced,
    )
    error = None
    if rng.random() < mix.error_rate:
        kinds = ("arith", "slip", "operand", "boxed")
        kind = rng.choices(kinds, weights=[mix.arith, mix.slip, mix.operand, mix.boxed])[0]
        n_steps = 2 if strat in ("add_first", "factor") else 3
        step = rng.randrange(n_steps - 1 if kind == "slip" else n_steps)
        delta = rng.choice([-3, -2, -1, 1, 2, 3])
        error = toy.StepError(kind, step=step, delta=delta)
    return toy.render_trajectory(question, strat, variant, error)


def warm_start(
    model: Any,
    tokenizer: Any,
    *,
    steps: int = 1500,
    batch_size: int = 16,
    lr: float = 3e-3,
    seed: int = 0,
    mixture: Mixture | None = None,
    progress: bool = True,
) -> list[float]:
    """Train ``model`` in place on completions of the train split; returns the loss trace.

    Loss on completion tokens (and the final EOS) only; AdamW with linear warm-up (5%)
    and cosine decay."""
    import torch  # the `train` extra: only the commands that train pay for it

    mix = mixture or Mixture()
    rng = random.Random(f"sft:{seed}")
    torch.manual_seed(seed)
    questions = toy.generate_questions("train", seed=seed)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    prompt_ids = {q.question_id: tokenizer(q.prompt)["input_ids"] for q in questions}
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    warm = max(1, steps // 20)

    def lr_at(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    model.train()
    losses: list[float] = []
    bar = tqdm(range(steps), desc="warm start", disable=not progress, leave=False)
    for _ in bar:
        rows, labels = [], []
        for _ in range(batch_size):
            q = rng.choice(questions)
            comp = tokenizer(sample_example(rng, q, mix))["input_ids"] + [eos]
            p = prompt_ids[q.question_id]
            rows.append(p + comp)
            labels.append([-100] * len(p) + comp)
        width = max(len(r) for r in rows)
        ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
        lab = torch.tensor([r + [-100] * (width - len(r)) for r in labels])
        att = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        loss = model(input_ids=ids, attention_mask=att, labels=lab).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
    model.eval()
    return losses
