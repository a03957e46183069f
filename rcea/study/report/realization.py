"""The report's ``realization`` section: within-mode realization entropy (docs/estimators.md
item 15) per checkpoint, from the same rows and the same mode partition as the report's
mode numbers, with its realization retention against the base of the same model.

Kept apart from :mod:`rcea.study.report.compute` (which calls :class:`RealizationCollector`
once per checkpoint and :func:`realization_quantities` from its quantity list) so the
section has one home: collected as each checkpoint is read, compared across checkpoints
at the end, labelled like every mode-dependent number (audited only when the partition
passed its gate).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rcea.audits.realization import (
    RealizationReport,
    realization_retention,
    within_mode_entropy,
)
from rcea.study.report.estimates import base_checkpoint, mode_label
from rcea.study.report.sections import RealizationCheckpoint

Key = tuple[str, str, int]

#: The macro numbers of one checkpoint that go into ``quantities`` (name → field).
MACRO_FIELDS = (
    ("realization_within_mode_entropy", "within_mode_entropy"),
    ("realization_mode_entropy", "mode_entropy"),
    ("realization_sequence_entropy", "sequence_entropy"),
    ("realization_within_mode_token_entropy", "within_mode_token_entropy"),
    ("realization_decomposition_residual", "decomposition_residual"),
    ("realization_token_mixture_residual", "token_mixture_residual"),
    ("realization_coverage", "coverage"),
    ("realization_share_in_repeated_modes", "share_in_repeated_modes"),
)


def c_membership(r: dict[str, Any], use_partition: bool, has_verdicts: bool) -> tuple[int, str]:
    """Whether trajectory row ``r`` is in C (R = 1, accepted when ``has_verdicts``) and
    its mode label: from the partition (``in_partition`` / ``partition_mode``) when the
    mode numbers rest on one, else the ``mode`` column; a success the partition lacks is
    ``uncertain`` (not in C) — the labels :class:`rcea.study.report.compute.ModeLabels`
    gives the mode numbers."""
    in_c = int(r["reward"] == 1 and (not has_verdicts or r["validity"] == 1))
    if not use_partition:
        return in_c, mode_label(r["mode"])
    return in_c, mode_label(r["partition_mode"]) if r.get("in_partition") else "uncertain"


class RealizationCollector:
    """Item 15 per checkpoint, one checkpoint's rows at a time (every row: K counts
    failures too). C = R = 1, accepted when ``has_verdicts`` (``validity == 1``), and
    its mode from the partition of ``pair["partition_id"]`` (``in_partition`` /
    ``partition_mode``) or else the ``mode`` column — exactly the labels
    :class:`rcea.study.report.compute.ModeLabels` gives the mode numbers; a success the
    partition lacks, or labelled ``uncertain``, is not in C. A checkpoint whose
    trajectories lack ℓ or token entropies gets an error line instead of numbers."""

    def __init__(self, pair: dict[str, Any], has_verdicts: bool, *, k_min: int) -> None:
        self.use_partition = pair["partition_id"] is not None
        self.has_verdicts = has_verdicts
        self.k_min = k_min
        self.reports: dict[Key, RealizationReport] = {}
        self.errors: dict[Key, str] = {}

    def add(self, key: Key, ck: list[dict[str, Any]]) -> None:
        """Take one checkpoint's rows."""
        for name in ("seq_logprob", "mean_token_entropy"):
            lacking = sum(r.get(name) is None for r in ck)
            if lacking:
                self.errors[key] = (
                    f"{lacking} trajectory(ies) lack {name}: item 15 needs sequence "
                    "log-probabilities and token entropies (`rcea probe score`)"
                )
                return
        member = [c_membership(r, self.use_partition, self.has_verdicts) for r in ck]
        self.reports[key] = within_mode_entropy(
            [r["question_id"] for r in ck],
            [m[0] for m in member],
            [m[1] for m in member],
            [r["seq_logprob"] for r in ck],
            [r["mean_token_entropy"] for r in ck],
            k_min=self.k_min,
        )

    def section(self, *, base_step: int, base_run: str) -> list[dict[str, Any]]:
        """One entry per checkpoint (key order): the macro numbers, the realization
        retention against the base of the same model (``None`` at the base, or with
        ``retention_error`` saying why), or ``error`` when it could not be computed."""
        out: list[dict[str, Any]] = []
        for key in sorted({*self.reports, *self.errors}):
            run, model, step = key
            entry: dict[str, Any] = {
                "run": run,
                "model": model,
                "step": step,
                "report": None,
                "error": self.errors.get(key),
                "base": None,
                "retention": None,
                "retention_error": None,
            }
            rep = self.reports.get(key)
            if rep is not None:
                entry["report"] = rep.to_dict(questions=False)
                if step != base_step:
                    base, why = base_checkpoint(
                        self.reports, run, model, base_step=base_step, base_run=base_run
                    )
                    if base is None:
                        entry["retention_error"] = why
                    else:
                        ret = realization_retention(rep, self.reports[base])
                        entry["base"] = dict(zip(("run", "model", "step"), base, strict=True))
                        entry["retention"] = {
                            "retention": ret.retention,
                            "n_eligible": ret.n_eligible,
                            "n_both": ret.n_both,
                            "excluded_zero_base": [str(q) for q in ret.excluded_zero_base],
                        }
            out.append(RealizationCheckpoint.model_validate(entry).model_dump(mode="json"))
        return out


def realization_quantities(
    section: list[dict[str, Any]],
    n_questions: dict[Key, int],
    deps: list[str],
    add: Callable[..., None],
) -> None:
    """Every number of the ``realization`` section through ``add`` (the quantity list's
    adder of :func:`rcea.study.report.publication.quantities`) with ``deps``, the mode
    numbers' dependencies: the macro numbers rest on the eligible questions (floor
    ``mode_entropy``), the realization retention on the questions eligible at both
    checkpoints (floor ``retention``)."""
    for e in section:
        where = {"run": e["run"], "model": e["model"], "step": e["step"]}
        rep = e["report"]
        if rep is None:
            continue
        total = n_questions.get((e["run"], e["model"], e["step"]), rep["n_questions"])
        for name, fld in MACRO_FIELDS:
            add(
                name,
                "realization",
                rep[fld],
                deps,
                n=rep["n_eligible"],
                coverage=rep["coverage"],
                eligible=(rep["n_eligible"], total),
                floor="mode_entropy",
                **where,
            )
        ret = e["retention"]
        if ret is not None:
            add(
                "realization_retention",
                "realization",
                ret["retention"],
                deps,
                n=ret["n_eligible"],
                eligible=(ret["n_eligible"], ret["n_both"]),
                floor="retention",
                **where,
            )
