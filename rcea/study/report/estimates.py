"""Checkpoint selection shared by ``rcea stats`` (files) and ``rcea report`` (the store),
so both compute a number from the same trajectories the same way.

A checkpoint is ``(run, model, step)`` everywhere (docs/estimators.md item 14): two models are
never pooled, and retention compares a checkpoint with the base of the same model.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rcea.audits.entropy import EntropyReport, entropy_report
from rcea.audits.modes import RarefiedRetention, rarefied_retention
from rcea.audits.realization import (
    RealizationReport,
    RealizationRetention,
    realization_retention,
    within_mode_entropy,
)

UNCERTAIN = "uncertain"

Key = tuple[Hashable, ...]
CheckpointKey = tuple[str, str, int]
ModesByCheckpoint = dict[CheckpointKey, dict[str, list[str]]]


def mode_label(mode: str | None) -> str:
    """A stored mode as a rarefaction label: missing, empty or ``uncertain`` → ``uncertain``
    (excluded from q̂ and counted against coverage)."""
    return UNCERTAIN if mode in (None, "", UNCERTAIN) else str(mode)


BASE_RUN = "base"


@dataclass(frozen=True)
class RetentionRow:
    """One checkpoint's retention against the base of its own model: ``base`` is the
    base checkpoint's key, ``result`` ``None`` with ``error`` saying why when the model
    has no base checkpoint."""

    key: CheckpointKey
    base: CheckpointKey | None
    result: RarefiedRetention | None
    error: str | None = None


def base_checkpoint(
    keys: Iterable[CheckpointKey], run: str, model: str, *, base_step: int, base_run: str
) -> tuple[CheckpointKey | None, str | None]:
    """The base of checkpoint (run, model, ·) — docs/estimators.md item 14 — and, when there is
    none, why. In order: the same run and model at ``base_step``; run ``base_run`` of the
    same model at ``base_step``; the model's only checkpoint at ``base_step`` (one shared
    base recorded under some run). Never a checkpoint of another model; several candidate
    bases of the model and none of the above is ambiguous (``None`` and the reason)."""
    have = set(keys)
    for cand in ((run, model, base_step), (base_run, model, base_step)):
        if cand in have:
            return cand, None
    same_model = sorted(k for k in have if k[1] == model and k[2] == base_step)
    if len(same_model) == 1:
        return same_model[0], None
    if not same_model:
        return None, (
            f"model {model!r} has no base checkpoint (no checkpoint of that model at step "
            f"{base_step}); retention is never computed against another model's base"
        )
    return None, (
        f"model {model!r} has {len(same_model)} checkpoints at step {base_step} "
        f"(runs {', '.join(k[0] for k in same_model)}) and none of run {run!r} or "
        f"{base_run!r}: name the shared base run (--base-run)"
    )


def retention_table(
    modes: ModesByCheckpoint,
    *,
    base_step: int,
    seed: int,
    n_min: int,
    n_draws: int,
    n_boot: int,
    confidence: float = 0.95,
    base_run: str = BASE_RUN,
) -> list[RetentionRow]:
    """Rarefied retention (docs/estimators.md item 5) of every (run, model, step) checkpoint whose
    step is not ``base_step``, in key order, against the base of the SAME model
    (:func:`base_checkpoint`). A checkpoint whose model has no base gets a row with
    ``result = None`` and the reason. Raises ``ValueError`` when no checkpoint at all is
    at ``base_step``."""
    for key in modes:
        if len(key) != 3:
            raise ValueError(f"checkpoint keys are (run, model, step), got {key!r}")
    if not any(k[-1] == base_step for k in modes):
        raise ValueError(f"no accepted trajectories at base step {base_step}")
    out = []
    for key in sorted((k for k in modes if k[-1] != base_step), key=_sort_key):
        run, model, _ = key
        base, why = base_checkpoint(modes, run, model, base_step=base_step, base_run=base_run)
        if base is None:
            out.append(RetentionRow(key, None, None, why))
            continue
        res = rarefied_retention(
            dict(modes[base]),  # type: ignore[arg-type]  # Mapping is invariant in its key; the str keys are valid str | int keys
            dict(modes[key]),  # type: ignore[arg-type]  # Mapping is invariant in its key; the str keys are valid str | int keys
            seed=seed,
            n_min=n_min,
            n_draws=n_draws,
            n_boot=n_boot,
            confidence=confidence,
        )
        out.append(RetentionRow(key, base, res))
    return out


def sequence_quantity(
    sampling_temperature: float | None,
    sampling_top_p: float | None,
    logprob_temperature: float | None,
) -> str:
    """What −mean ℓ estimates for one trajectory (docs/estimators.md item 2): ``entropy`` when it
    was sampled from the distribution ℓ is computed under, else ``cross_entropy``: top-p
    below 1, or a sampling temperature other than ℓ's (ℓ's temperature is 1 — the policy
    itself — unless stated). Unknown sampling settings count as matching."""
    if sampling_top_p is not None and sampling_top_p < 1.0:
        return "cross_entropy"
    if sampling_temperature is not None:
        ell_t = 1.0 if logprob_temperature is None else logprob_temperature
        if abs(sampling_temperature - ell_t) > 1e-12:
            return "cross_entropy"
    return "entropy"


def rows_entropy(
    ck: Sequence[dict[str, Any]], *, seed: int, k_min: int, n_boot: int, confidence: float = 0.95
) -> EntropyReport:
    """:func:`checkpoint_entropy` of one checkpoint's trajectory rows (dicts with
    question_id, reward, mean_token_entropy, seq_logprob, truncated and the sampling
    columns): the one call of the report, ``rcea stats entropy`` and ``rcea stats seeds``."""
    return checkpoint_entropy(
        [r["question_id"] for r in ck],
        [r["reward"] for r in ck],
        [r["mean_token_entropy"] for r in ck],
        [r["seq_logprob"] for r in ck],
        seed=seed,
        k_min=k_min,
        n_boot=n_boot,
        confidence=confidence,
        truncated=[r["truncated"] for r in ck],
        quantities=[
            sequence_quantity(
                r["sampling_temperature"], r["sampling_top_p"], r["logprob_temperature"]
            )
            for r in ck
        ],
    )


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
    truncated: Sequence[bool | None] | None = None,
    quantities: Sequence[str] | None = None,
) -> EntropyReport:
    """Items 1–3 for one checkpoint. Every trajectory needs a mean token entropy
    (``ValueError`` naming how many lack one); the sequence decomposition is computed
    only when every trajectory has a sequence log-probability. ``truncated`` flags are
    counted when every trajectory has one (``n_truncated``, else ``None``); ``quantities``
    (per trajectory, :func:`sequence_quantity`) label the ℓ-based numbers
    ``cross_entropy`` when any trajectory was sampled from another distribution."""
    missing = sum(v is None for v in mean_token_entropy)
    if missing:
        raise ValueError(
            f"{missing} trajectory(ies) of this checkpoint lack mean_token_entropy/token_entropies"
        )
    lps = list(seq_logprobs)
    flags = list(truncated) if truncated is not None else []
    return entropy_report(
        list(question_ids),
        list(rewards),
        list(mean_token_entropy),  # type: ignore[arg-type]  # not checked by hand yet: the entropies are expected to be set for every row here
        lps if all(v is not None for v in lps) else None,  # type: ignore[arg-type]  # lps is passed only when no value is None (the condition)
        seed=seed,
        k_min=k_min,
        n_boot=n_boot,
        confidence=confidence,
        cross_entropy=any(q == "cross_entropy" for q in quantities or ()),
        truncated=[bool(f) for f in flags] if flags and None not in flags else None,
    )


def _sort_key(key: Key) -> tuple[str, ...]:
    return tuple(f"{v:020d}" if isinstance(v, int) else str(v) for v in key)


@dataclass(frozen=True)
class RealizationRow:
    """Item 15 at one checkpoint, and its realization retention against the base of the
    same model (``None`` at the base itself, or with ``retention_error`` saying why)."""

    key: CheckpointKey
    report: RealizationReport
    base: CheckpointKey | None = None
    retention: RealizationRetention | None = None
    retention_error: str | None = None


def realization_table(
    rows: Iterable[dict[str, Any]], *, k_min: int, base_step: int, base_run: str = BASE_RUN
) -> list[RealizationRow]:
    """Within-mode realization entropy (docs/estimators.md item 15) of every (run, model,
    step) in ``rows`` (trajectory dicts with run, model, step, question_id, reward,
    validity, mode, seq_logprob, mean_token_entropy), in key order, each with its
    realization retention against the base of the same model (:func:`base_checkpoint`).
    C = R = 1, validity 1 and a mode (a missing mode counts as ``uncertain``). Raises
    ``ValueError`` naming the first trajectory without ℓ or token entropy, or a success
    without a validity verdict."""
    by_key: dict[CheckpointKey, list[dict[str, Any]]] = {}
    for r in rows:
        for name in ("seq_logprob", "mean_token_entropy"):
            if r.get(name) is None:
                raise ValueError(
                    f"trajectory {r.get('trajectory_id')!r} has no {name}: item 15 needs "
                    "sequence log-probabilities and token entropies (`rcea probe score`)"
                )
        if r["reward"] == 1 and r.get("validity") is None:
            raise ValueError(
                f"trajectory {r.get('trajectory_id')!r} is a success without a validity "
                "verdict: judge it first (`rcea judge run`)"
            )
        by_key.setdefault((r["run"], r["model"], r["step"]), []).append(r)
    reports = {
        key: within_mode_entropy(
            [r["question_id"] for r in rs],
            [int(r["reward"] == 1 and r["validity"] == 1) for r in rs],
            [mode_label(r.get("mode")) for r in rs],
            [r["seq_logprob"] for r in rs],
            [r["mean_token_entropy"] for r in rs],
            k_min=k_min,
        )
        for key, rs in by_key.items()
    }
    out = []
    for key in sorted(reports, key=_sort_key):
        run, model, step = key
        if step == base_step:
            out.append(RealizationRow(key, reports[key]))
            continue
        base, why = base_checkpoint(reports, run, model, base_step=base_step, base_run=base_run)
        if base is None:
            out.append(RealizationRow(key, reports[key], retention_error=why))
            continue
        ret = realization_retention(reports[key], reports[base])
        out.append(RealizationRow(key, reports[key], base, ret))
    return out
