"""The report's ``mode_tail`` section: mode-stratified covariance (docs/estimators.md item
16) at every endpoint with a ``tail_trajectories`` measurement, on the same rows and mode
partition as the report's mode numbers.

The store never holds per-token arrays: the probe (``rcea probe covariance``) records item
7's tokens reduced to four sums per trajectory (``rcea.audits.mode_tail.trajectory_sums``),
and the partition is applied here (``mode_tail_from_sums``), so the numbers rest on the
gated partition and ``rcea report verify`` re-derives them from the bundle. Ties between
modes with the same count go by the labels' sorted order (the report does not read the
codebook's mode order).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rcea.audits.mode_tail import TrajectorySums, mode_tail_from_sums
from rcea.study.report.realization import c_membership
from rcea.study.report.sections import ModeTailEndpoint

Key = tuple[str, str, int]

#: Payload lists of a ``tail_trajectories`` measurement (one entry per trajectory).
SUM_FIELDS = (
    "trajectory_id",
    "question_id",
    "reward",
    "n_tokens",
    "positive_mass",
    "tail_positive_mass",
    "tail_tokens",
)


class ModeTailCollector:
    """C membership and mode per trajectory of the endpoints in ``keys``, one checkpoint's
    rows at a time (:func:`rcea.study.report.realization.c_membership`)."""

    def __init__(self, pair: dict[str, Any], has_verdicts: bool, keys: set[Key]) -> None:
        self.use_partition = pair["partition_id"] is not None
        self.has_verdicts = has_verdicts
        self.keys = keys
        self.members: dict[Key, dict[str, tuple[int, str]]] = {}

    def add(self, key: Key, ck: list[dict[str, Any]]) -> None:
        """Take one checkpoint's rows (kept only at an endpoint with trajectory sums)."""
        if key in self.keys:
            self.members[key] = {
                r["trajectory_id"]: c_membership(r, self.use_partition, self.has_verdicts)
                for r in ck
            }

    def section(
        self, measurements: list[dict[str, Any]], failed: set[tuple[str, str]]
    ) -> list[dict[str, Any]]:
        """One entry per ``tail_trajectories`` measurement (key order); a trajectory of
        the sums that the study's rows lack counts in ``n_unmatched`` and is not in C."""
        out = []
        for m in sorted(measurements, key=lambda m: (m["run"], m["model"], m["step"])):
            key = (m["run"], m["model"], m["step"])
            p = m["payload"]
            lengths = {len(p[f]) for f in SUM_FIELDS}
            if len(lengths) != 1:
                raise ValueError(f"{m['where']}: payload lists differ in length ({lengths})")
            members = self.members.get(key, {})
            looked = [members.get(t) for t in p["trajectory_id"]]
            sums = TrajectorySums(
                quantile=float(p["quantile"]),
                n_tokens=np.asarray(p["n_tokens"], dtype=np.int64),
                positive_mass=np.asarray(p["positive_mass"], dtype=np.float64),
                tail_positive_mass=np.asarray(p["tail_positive_mass"], dtype=np.float64),
                tail_tokens=np.asarray(p["tail_tokens"], dtype=np.int64),
            )
            res = mode_tail_from_sums(
                p["question_id"],
                [x[0] if x else 0 for x in looked],
                [x[1] if x else "uncertain" for x in looked],
                sums,
                endpoint=f"{key[0]}:{key[1]}:{key[2]}",
            )
            d = res.to_dict()
            entry = {
                "run": key[0],
                "model": key[1],
                "step": key[2],
                "failed_run": (key[0], key[1]) in failed,
                "quantile": sums.quantile,
                "n_trajectories": len(looked),
                "n_unmatched": sum(x is None for x in looked),
                **{
                    k: d[k]
                    for k in (
                        "n_questions",
                        "n_tokens_c",
                        "majority_mass_share",
                        "majority_token_share",
                        "concentration_ratio",
                        "success_tail_majority_share",
                        "n_success_tail",
                    )
                },
                "n_question_ratios": len(res.question_ratios),
                "question_ratio_quartiles": (
                    list(res.question_ratio_quartiles) if res.question_ratio_quartiles else None
                ),
            }
            out.append(ModeTailEndpoint.model_validate(entry).model_dump(mode="json"))
        return out


def mode_tail_quantities(
    section: list[dict[str, Any]], deps: list[str], add: Callable[..., None]
) -> None:
    """The section's numbers through the quantity list's ``add`` with the mode numbers'
    ``deps`` (audited only when the partition passed its gate); n = questions with C."""
    for e in section:
        where = {"run": e["run"], "model": e["model"], "step": e["step"]}
        for name in (
            "concentration_ratio",
            "majority_mass_share",
            "majority_token_share",
            "success_tail_majority_share",
        ):
            add(f"mode_tail_{name}", "mode_tail", e[name], deps, n=e["n_questions"], **where)
