"""Checkpoint selection shared by ``rcea stats`` (files) and ``rcea report`` (the store),
so both compute a number from the same trajectories the same way.

Checkpoint keys are tuples whose last element is the step: ``(run, step)`` for
``rcea stats retention``, ``(run, model, step)`` for reports.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from typing import Any

from audits.entropy import EntropyReport, entropy_report
from audits.modes import RarefiedRetention, rarefied_retention

UNCERTAIN = "uncertain"

Key = tuple[Hashable, ...]
ModesByCheckpoint = dict[Key, dict[str, list[str]]]


def mode_label(mode: str | None) -> str:
    """A stored mode as a rarefaction label: missing, empty or ``uncertain`` → ``uncertain``
    (excluded from q̂ and counted against coverage)."""
    return UNCERTAIN if mode in (None, "", UNCERTAIN) else str(mode)


def pool(groups: Sequence[dict[str, list[str]]]) -> dict[str, list[str]]:
    """Question-wise concatenation of several checkpoints' mode lists."""
    out: dict[str, list[str]] = defaultdict(list)
    for g in groups:
        for q, ms in g.items():
            out[q].extend(ms)
    return dict(out)


def retention_table(
    modes: ModesByCheckpoint,
    *,
    base_step: int,
    seed: int,
    n_min: int,
    n_draws: int,
    n_boot: int,
    confidence: float = 0.95,
) -> list[tuple[Key, RarefiedRetention]]:
    """Rarefied retention (DESIGN.md item 5) of every checkpoint whose step is not
    ``base_step``, in key order, against its base: the checkpoint with the same key
    prefix at ``base_step`` when it exists, else the question-wise pool of every
    checkpoint at ``base_step``. Raises ``ValueError`` when there is no base checkpoint."""
    base_keys = [k for k in modes if k[-1] == base_step]
    if not base_keys:
        raise ValueError(f"no accepted trajectories at base step {base_step}")
    pooled: dict[str, list[str]] | None = None
    out = []
    for key in sorted((k for k in modes if k[-1] != base_step), key=_sort_key):
        own = (*key[:-1], base_step)
        if own in modes:
            base = modes[own]
        else:
            if pooled is None:
                pooled = pool([modes[k] for k in base_keys])
            base = pooled
        res = rarefied_retention(
            dict(base),
            dict(modes[key]),
            seed=seed,
            n_min=n_min,
            n_draws=n_draws,
            n_boot=n_boot,
            confidence=confidence,
        )
        out.append((key, res))
    return out


def retention_dict(res: RarefiedRetention) -> dict[str, Any]:
    """The JSON of one retention result without the per-question draws."""
    d = res.to_dict()
    d.pop("questions", None)
    return d


def checkpoint_entropy(
    question_ids: Sequence[str],
    rewards: Sequence[int],
    mean_token_entropy: Sequence[float | None],
    seq_logprobs: Sequence[float | None],
    *,
    seed: int,
    k_min: int,
    n_boot: int,
    confidence: float = 0.95,
) -> EntropyReport:
    """Items 1–3 for one checkpoint. Every trajectory needs a mean token entropy
    (``ValueError`` naming how many lack one); the sequence decomposition is computed
    only when every trajectory has a sequence log-probability."""
    missing = sum(v is None for v in mean_token_entropy)
    if missing:
        raise ValueError(
            f"{missing} trajectory(ies) of this checkpoint lack mean_token_entropy/token_entropies"
        )
    lps = list(seq_logprobs)
    return entropy_report(
        list(question_ids),
        list(rewards),
        list(mean_token_entropy),
        lps if all(v is not None for v in lps) else None,
        seed=seed,
        k_min=k_min,
        n_boot=n_boot,
        confidence=confidence,
    )


def _sort_key(key: Key) -> tuple[str, ...]:
    return tuple(f"{v:020d}" if isinstance(v, int) else str(v) for v in key)
