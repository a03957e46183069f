"""The report's ``mode_tail`` section: mode-stratified covariance (docs/estimators.md item
16) at every endpoint with a ``tail_trajectories`` measurement, on the same rows and mode
partition as the report's mode numbers.

The store never holds per-token arrays: the probe (``rcea probe covariance``) records item
7's tokens reduced to four sums per trajectory (``rcea.audits.mode_tail.trajectory_sums``),
and the partition is applied here (``mode_tail_from_sums``), so the numbers rest on the
gated partition and ``rcea report verify`` re-derives them from the bundle. Ties between
modes with the same count go by the labels' sorted order (the report does not read the
codebook's mode order).

Item 16 by group (``mode_covariance``): each ``covariance_transition`` measurement of
``rcea probe covariance`` carries its positions reduced per trajectory sampled under θ
(``trajectories``) and θ's run (``from_run``); the collector keeps the membership and the
majority modes of those θ checkpoints too, and :func:`rcea.audits.mode_covariance.
mode_covariance_fit` fits item 6 per group (majority / other / outside C).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

import numpy as np
from pydantic import TypeAdapter

from rcea.audits.mode_covariance import (
    MODE_GROUPS,
    majority_modes,
    mode_covariance_fit,
    trajectory_groups,
)
from rcea.audits.mode_tail import (
    ModeTailResult,
    ModeTailSummary,
    TrajectorySums,
    mode_tail_from_sums,
)
from rcea.study.report.realization import c_membership
from rcea.study.report.sections import ModeCovarianceSection, ModeTailEndpoint

Key = tuple[str, str, int]

_MODE_COVARIANCE = TypeAdapter(ModeCovarianceSection)

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


#: Per-trajectory lists of a ``covariance_transition`` payload's ``trajectories``.
TRANSITION_FIELDS = (
    "trajectory_id",
    "question_id",
    "n_positions",
    "predicted_sum",
    "observed_sum",
)
#: validates and dumps the ``mode_tail[]`` entries (a dataclass has no model_validate)
_ENDPOINT = TypeAdapter(ModeTailEndpoint)
#: The fit's statistics published per group (``mode_cov_<name>``, key = the group).
GROUP_SUMMARY = ("sign_agreement", "spearman_rho", "slope", "r_squared")


def transition_from_key(m: dict[str, Any]) -> Key | None:
    """θ's checkpoint of a ``covariance_transition`` measurement with per-trajectory sums
    (``from_run``, its model, ``from_step``), else None."""
    p = m["payload"]
    if not p.get("trajectories") or p.get("from_run") is None or p.get("from_step") is None:
        return None
    return (str(p["from_run"]), m["model"], int(p["from_step"]))


class ModeTailCollector:
    """C membership and mode per trajectory of the endpoints in ``keys`` and of the θ
    checkpoints of ``transitions`` (with their majority modes), one checkpoint's rows at
    a time (:func:`rcea.study.report.realization.c_membership`)."""

    def __init__(
        self,
        pair: dict[str, Any],
        has_verdicts: bool,
        keys: set[Key],
        transitions: list[dict[str, Any]] | None = None,
    ) -> None:
        self.use_partition = pair["partition_id"] is not None
        self.has_verdicts = has_verdicts
        self.keys = keys
        self.from_keys = {k for m in transitions or [] if (k := transition_from_key(m))}
        self.members: dict[Key, dict[str, tuple[int, str]]] = {}
        self.majority: dict[Key, dict[str, Any]] = {}
        self.results: dict[Key, ModeTailResult] = {}  # item 17's per-question sums

    def add(self, key: Key, ck: list[dict[str, Any]]) -> None:
        """Take one checkpoint's rows (kept only at an endpoint with trajectory sums or
        at a transition's θ with per-trajectory sums)."""
        if key in self.keys or key in self.from_keys:
            self.members[key] = {
                r["trajectory_id"]: c_membership(r, self.use_partition, self.has_verdicts)
                for r in ck
            }
        if key in self.from_keys:
            flags = self.members[key]
            self.majority[key] = majority_modes(
                [r["question_id"] for r in ck],
                [flags[r["trajectory_id"]][0] for r in ck],
                [flags[r["trajectory_id"]][1] for r in ck],
            )

    def covariance_section(
        self,
        measurements: list[dict[str, Any]],
        failed: set[tuple[str, str]],
        label: Callable[[str, str], str],
    ) -> dict[str, Any] | None:
        """Item 16's fit by group over the transitions with per-trajectory sums (None
        when none has them). Transition labels and excluded run ids as in the report's
        covariance section (``label``: the run, or ``run:model`` at several scales)."""
        rows = sorted(measurements, key=lambda m: (m["model"], m["run"], m["step"]))
        names = [str(m["payload"].get("transition") or "") for m in rows]
        if len(set(names)) != len(names) or "" in names:  # build._covariance's fallback
            names = [
                f"{m['model']}/{m['run']}:{m['payload'].get('from_step')}->"
                f"{m['payload'].get('to_step', m['step'])}"
                for m in rows
            ]
        cols: dict[str, list[Any]] = {
            k: [] for k in ("transition", "group", "run", "model", *TRANSITION_FIELDS[2:])
        }
        meta: dict[str, dict[str, Any]] = {}
        unmatched = without = 0
        for name, m in zip(names, rows, strict=True):
            from_key = transition_from_key(m)
            if from_key is None:
                without += 1
                continue
            p = m["payload"]["trajectories"]
            lengths = {len(p.get(f) or []) for f in TRANSITION_FIELDS}
            if len(lengths) != 1:
                raise ValueError(
                    f"{m['where']}: payload trajectories lists differ in length ({lengths})"
                )
            members = self.members.get(from_key, {})
            looked = [members.get(t) for t in p["trajectory_id"]]
            unmatched += sum(x is None for x in looked)
            groups = trajectory_groups(
                p["question_id"],
                [x[0] if x else 0 for x in looked],
                [x[1] if x else "uncertain" for x in looked],
                self.majority.get(from_key, {}),
            )
            n = len(groups)
            cols["transition"] += [name] * n
            cols["group"] += groups
            cols["run"] += [label(m["run"], m["model"])] * n
            cols["model"] += [m["model"]] * n
            for f in TRANSITION_FIELDS[2:]:
                cols[f] += list(p[f])
            meta[name] = {
                "run": m["run"],
                "model": m["model"],
                "from_step": m["payload"].get("from_step"),
                "to_step": m["payload"].get("to_step", m["step"]),
                "failed_run": (m["run"], m["model"]) in failed,
            }
        if not meta:
            return None
        excluded = sorted({label(v["run"], v["model"]) for v in meta.values() if v["failed_run"]})
        res = mode_covariance_fit(
            cols["transition"],
            cols["group"],
            cols["n_positions"],
            cols["predicted_sum"],
            cols["observed_sum"],
            runs=cols["run"],
            models=cols["model"],
            excluded_runs=excluded,
        )
        d = res.to_dict()
        transitions = [
            {"group": g, "transition": t, **meta[t], "predicted": pr, "observed": ob,
             "n_positions": n}
            for g in MODE_GROUPS
            for t, pr, ob, n in zip(
                d["tables"][g]["transitions"], d["tables"][g]["predicted"],
                d["tables"][g]["observed"], d["tables"][g]["n_positions"], strict=True,
            )
        ]  # fmt: skip
        entry = {
            "groups": d["groups"],
            "fits": d["fits"],
            "by_model": d["by_model"],
            "n_positions": d["n_positions"],
            "n_trajectories": d["n_trajectories"],
            "n_unmatched": unmatched,
            "n_transitions": len(meta),
            "n_transitions_without_trajectories": without,
            "transitions": transitions,
            "excluded_runs": excluded,
            "sentence": mode_covariance_sentence(d["fits"], d["n_positions"]),
        }
        checked: dict[str, Any] = _MODE_COVARIANCE.dump_python(
            _MODE_COVARIANCE.validate_python(entry), mode="json"
        )
        return checked

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
            sums = payload_sums(p)
            res = self.results[key] = mode_tail_from_sums(
                p["question_id"],
                [x[0] if x else 0 for x in looked],
                [x[1] if x else "uncertain" for x in looked],
                sums,
                endpoint=f"{key[0]}:{key[1]}:{key[2]}",
            )
            d = res.to_dict()
            entry = {f.name: d[f.name] for f in fields(ModeTailSummary)} | {
                "run": key[0],
                "model": key[1],
                "step": key[2],
                "failed_run": (key[0], key[1]) in failed,
                "quantile": sums.quantile,
                "n_trajectories": len(looked),
                "n_unmatched": sum(x is None for x in looked),
                "n_question_ratios": len(res.question_ratios),
            }
            out.append(_ENDPOINT.dump_python(_ENDPOINT.validate_python(entry), mode="json"))
        return out


def records_mode_tail(
    rows: Mapping[Key, list[dict[str, Any]]], measurements: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], dict[Key, ModeTailResult]]:
    """Item 16 of each ``tail_trajectories`` measurement (``rcea stats mode-tail``) on a
    records file's trajectories (``rows`` per checkpoint): the report's section rule
    (:class:`ModeTailCollector`) with the records' ``mode`` column as the partition and
    their validity verdicts (C = R = 1, validity 1, a mode other than ``uncertain``, as
    ``rcea stats modes``), and no failed run (a file carries no training trace). Returns
    the section's entries and each endpoint's result (its per-question M_x/T_x).
    ``ValueError`` naming the measurement when the records hold no row of its endpoint."""
    keys = {(m["run"], m["model"], m["step"]) for m in measurements}
    for m in measurements:
        key = (m["run"], m["model"], m["step"])
        if key not in rows:
            raise ValueError(
                f"{m['where']}: endpoint {key[0]} {key[1]} step {key[2]} has no records "
                "in the records file (the modes come from its records)"
            )
    collector = ModeTailCollector({"partition_id": None}, True, keys)
    for key in sorted(keys):
        collector.add(key, rows[key])
    return collector.section(measurements, set()), collector.results


def payload_sums(p: dict[str, Any]) -> TrajectorySums:
    """The :class:`TrajectorySums` of a ``tail_trajectories`` payload (its optional
    ``failure_tail_positive_mass``: payloads recorded before it lack it)."""
    return TrajectorySums(
        quantile=float(p["quantile"]),
        n_tokens=np.asarray(p["n_tokens"], dtype=np.int64),
        positive_mass=np.asarray(p["positive_mass"], dtype=np.float64),
        tail_positive_mass=np.asarray(p["tail_positive_mass"], dtype=np.float64),
        tail_tokens=np.asarray(p["tail_tokens"], dtype=np.int64),
        failure_tail_positive_mass=(
            np.asarray(p["failure_tail_positive_mass"], dtype=np.float64)
            if p.get("failure_tail_positive_mass") is not None
            else None
        ),
    )


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


GROUP_WORDS = {
    "majority": "majority-mode prefixes",
    "other": "other modes' prefixes",
    "outside_c": "prefixes outside C",
}


def mode_covariance_sentence(fits: dict[str, dict[str, Any]], n_positions: dict[str, int]) -> str:
    """Each group's fit in words: transitions, positions, sign agreement, Spearman ρ and
    the OLS slope of observed on predicted Δh (undefined where the fit is)."""

    def num(v: Any, fmt: str) -> str:
        return "undefined" if v is None else format(v, fmt)

    parts = []
    for g in MODE_GROUPS:
        f = fits.get(g)
        if not f or not f["n"]:
            parts.append(f"{GROUP_WORDS[g]}: no transition")
            continue
        parts.append(
            f"{GROUP_WORDS[g]} ({f['n']} transitions, {n_positions.get(g, 0)} positions): "
            f"sign agreement {num(f['sign_agreement'], '.2f')}, Spearman ρ "
            f"{num(f['spearman_rho'], '+.2f')}, slope {num(f['slope'], '.3g')}"
        )
    return "Item 6's fit by mode group (observed on predicted Δh): " + "; ".join(parts) + "."


def mode_covariance_quantities(
    section: dict[str, Any] | None, deps: list[str], add: Callable[..., None]
) -> None:
    """The fit's headline statistics per group (pooled over models; key = the group)
    through the quantity list's ``add`` with the mode numbers' ``deps``; n = transitions."""
    if not section:
        return
    for g, fit in section["fits"].items():
        for name in GROUP_SUMMARY:
            add(f"mode_cov_{name}", "mode_covariance", fit.get(name), deps, key=g, n=fit["n"])
