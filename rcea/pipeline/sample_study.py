"""A small synthetic study in the interchange format, for the quick start and tests.

It is not the embedded RLVR study (that trains a real tiny model): it is a seeded,
statistically plausible stand-in — two runs, a base and two later checkpoints, several
solution modes per question — so that ingest, stats and the views have data on a fresh
machine in under a second.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

MODES = ("direct", "distribute", "factor")


def generate_sample_records(
    *,
    n_questions: int = 12,
    samples_per_question: int = 32,
    steps: tuple[int, ...] = (0, 50, 100),
    runs: tuple[str, ...] = ("grpo", "clip_cov"),
    model: str = "tiny-char-lm",
    n_token_entropies: int = 24,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Return records (dicts) with provenance, rewards, entropies, validity and modes."""
    rng = np.random.default_rng(seed)
    difficulty = rng.uniform(0.2, 0.8, size=n_questions)
    records: list[dict[str, Any]] = []
    for run_index, run in enumerate(runs):
        for step in steps:
            run_steps = [0] if step == 0 else [step]
            if step == 0 and run_index > 0:
                continue  # one shared base checkpoint, recorded under the first run
            progress = step / max(steps)
            for q in range(n_questions):
                p_success = float(np.clip(1 - difficulty[q] + 0.35 * progress, 0.05, 0.95))
                # Training concentrates the success mass on fewer modes.
                mode_weights = np.array([1.0, 0.8 * (1 - 0.7 * progress), 0.6 * (1 - progress)])
                mode_weights /= mode_weights.sum()
                for k in range(samples_per_question):
                    reward = int(rng.random() < p_success)
                    base_h = 0.9 * (1 - 0.5 * progress) + (0.25 if reward == 0 else 0.0)
                    tok = np.abs(rng.normal(base_h, 0.2, size=n_token_entropies))
                    mode = str(rng.choice(MODES, p=mode_weights)) if reward else None
                    validity = int(rng.random() < 0.9) if reward else None
                    a, b, c = (int(v) for v in rng.integers(2, 10, size=3))
                    text = _render(mode or "direct", a, b, c, wrong=not reward)
                    for s in run_steps:
                        records.append(
                            {
                                "trajectory_id": f"{run}-s{s}-q{q:03d}-k{k:02d}",
                                "question_id": f"q{q:03d}",
                                "question": _question(q),
                                "text": text,
                                "reward": reward,
                                "run": run,
                                "model": model,
                                "step": s,
                                "seed": 1000 + k,
                                "token_entropies": [round(float(x), 6) for x in tok],
                                "seq_logprob": round(float(-tok.sum() * 1.1), 6),
                                "validity": validity,
                                "mode": mode,
                                "split": "probe",
                            }
                        )
    return records


def _question(q: int) -> str:
    """The problem statement of sample question ``q`` (its numbers vary per sample)."""
    return (
        f"Sample problem {q + 1}: for the three numbers a, b and c given in the solution, "
        "compute (a + b) × c and box the result."
    )


def _render(mode: str, a: int, b: int, c: int, *, wrong: bool) -> str:
    if mode == "distribute":
        steps = [f"{a}*{c} = {a * c}", f"{b}*{c} = {b * c}", f"{a * c}+{b * c} = {(a + b) * c}"]
    elif mode == "factor":
        steps = [f"({a}+{b}) is a common factor", f"{a + b}*{c} = {(a + b) * c}"]
    else:
        steps = [f"{a}+{b} = {a + b}", f"{a + b}*{c} = {(a + b) * c}"]
    answer = (a + b) * c + (1 if wrong else 0)
    return "\n".join(steps) + f"\n\\boxed{{{answer}}}"


def write_sample_study(path: Path, **kwargs: Any) -> Path:
    """Write the sample records as JSONL (deterministic for a given seed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for rec in generate_sample_records(**kwargs):
            fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
    return path
