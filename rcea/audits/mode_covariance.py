"""Item 6's exact covariance fit by mode group (docs/estimators.md item 16).

Item 6 fits the observed on the predicted entropy change across checkpoint transitions
θ→θ′, each transition's Δh being the mean over prefixes s of trajectories sampled under θ.
Here every prefix takes the group of the trajectory it belongs to, decided at θ with
item 16's membership rule (:func:`rcea.audits.mode_tail._majority_membership`, the one
rule of the tail's computations as well):

* ``majority`` — the trajectory is in C at θ (accepted, assigned success; mode not
  excluded) and its mode is its question's majority mode maj(x) at θ (largest K_z over
  C at θ; ties by ``mode_order``, else the labels' sorted order);
* ``other`` — in C at θ, another mode of its question;
* ``outside_c`` — not in C (a failure, a rejected or unjudged success, ``uncertain``).

Per transition T and group g, from each trajectory's sums over its sampled positions:

    predicted_{T,g} = Σ_{trajectories of g in T} Σ_s predicted(s) / Σ n_positions,

likewise observed (the position-weighted mean: item 6's per-transition mean restricted
to g). Across the transitions that have positions in g, item 6's statistics
(:func:`rcea.audits.covariance.covariance_fit`: sign agreement, Spearman, Pearson, OLS
slope / intercept / R² of observed on predicted, median absolute and relative errors),
pooled over models and per model; transitions of failed runs (item 9) are left out and
listed, as in item 6. Whether the Δh that the covariance predicts is carried by the
dominant strategy's prefixes shows as the groups' fits side by side.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rcea.audits._checks import as_binary_array, as_float_array, check_same_length
from rcea.audits.covariance import CovarianceFit, TransitionTable, _fit_rows, covariance_fit
from rcea.audits.mode_tail import _majority_membership
from rcea.audits.modes import DEFAULT_EXCLUDE

__all__ = [
    "MODE_GROUPS",
    "ModeCovarianceFit",
    "ModeCovarianceSummary",
    "majority_modes",
    "mode_covariance_fit",
    "trajectory_groups",
]

#: The prefix groups, in display order.
MODE_GROUPS: tuple[str, ...] = ("majority", "other", "outside_c")


def majority_modes(
    questions: Sequence[Any],
    in_c: Any,
    modes: Sequence[Hashable | None],
    *,
    mode_order: Iterable[Hashable] | None = None,
    exclude: Iterable[Hashable] = DEFAULT_EXCLUDE,
) -> dict[str, Hashable]:
    """maj(x) per question with a trajectory in C, from one checkpoint's trajectories
    (``questions``, 0/1 ``in_c``, ``modes``; item 16's rule)."""
    c_flag = as_binary_array(in_c, "in_c", allow_empty=True)
    labels = list(modes)
    check_same_length(questions=questions, in_c=c_flag, modes=labels)
    rank = {z: i for i, z in enumerate(mode_order or ())}
    _, majority, _, _ = _majority_membership(
        [str(q) for q in questions], c_flag, labels, rank=rank, exclude=frozenset(exclude)
    )
    return majority


def trajectory_groups(
    questions: Sequence[Any],
    in_c: Any,
    modes: Sequence[Hashable | None],
    majority: Mapping[str, Hashable],
    *,
    exclude: Iterable[Hashable] = DEFAULT_EXCLUDE,
) -> list[str]:
    """The group (:data:`MODE_GROUPS`) of each trajectory given its question's maj(x) at
    the checkpoint it was sampled under (:func:`majority_modes`)."""
    c_flag = as_binary_array(in_c, "in_c", allow_empty=True)
    labels = list(modes)
    check_same_length(questions=questions, in_c=c_flag, modes=labels)
    excl = frozenset(exclude)
    out = []
    for q, flag, z in zip(questions, c_flag, labels, strict=True):
        if not flag or z is None or z in excl:
            out.append("outside_c")
        elif majority.get(str(q)) == z:
            out.append("majority")
        else:
            out.append("other")
    return out


@dataclass(frozen=True, kw_only=True)
class ModeCovarianceSummary:
    """Item 6 by mode group (module docstring): the fit across transitions pooled over
    models (``fits``) and per model (``by_model``), and the positions and trajectories each
    group holds; the report's ``mode_covariance`` section is this summary with its own keys
    added (``rcea.study.report.sections``)."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    groups: tuple[str, ...] = field(metadata={"description": "the groups, in display order"})
    fits: dict[str, CovarianceFit] = field(
        metadata={
            "description": "group -> item 6's fit over its transitions (failed runs left out)"
        }
    )
    by_model: dict[str, dict[str, CovarianceFit]] = field(
        metadata={"description": "model -> group -> the fit over that model's transitions"}
    )
    n_positions: dict[str, int] = field(metadata={"description": "group -> positions it holds"})
    n_trajectories: dict[str, int] = field(
        metadata={"description": "group -> trajectories it holds"}
    )


@dataclass(frozen=True, kw_only=True)
class ModeCovarianceFit(ModeCovarianceSummary):
    """The summary with each group's per-transition means (``tables``)."""

    tables: dict[str, TransitionTable]

    def to_dict(self) -> dict[str, Any]:
        return {
            "groups": list(self.groups),
            "tables": {g: t.to_dict() for g, t in self.tables.items()},
            "fits": {g: f.to_dict() for g, f in self.fits.items()},
            "by_model": {
                m: {g: f.to_dict() for g, f in fits.items()} for m, fits in self.by_model.items()
            },
            "n_positions": dict(self.n_positions),
            "n_trajectories": dict(self.n_trajectories),
        }


def mode_covariance_fit(
    transitions: Sequence[Any],
    groups: Sequence[str],
    n_positions: Any,
    predicted_sum: Any,
    observed_sum: Any,
    *,
    runs: Sequence[Any] | None = None,
    models: Sequence[Any] | None = None,
    excluded_runs: Sequence[Any] = (),
) -> ModeCovarianceFit:
    """Item 6 per mode group from one row per (transition, trajectory): its transition,
    its group (:func:`trajectory_groups`), its sampled positions and the sums of their
    predicted and observed Δh; ``runs`` / ``models`` give each row's run and model (one
    per transition), ``excluded_runs`` the failed runs (left out of every fit, listed)."""
    labels = [str(t) for t in transitions]
    n_pos = as_float_array(n_positions, "n_positions", allow_empty=True)
    pred = as_float_array(predicted_sum, "predicted_sum", allow_empty=True)
    obs = as_float_array(observed_sum, "observed_sum", allow_empty=True)
    lengths: dict[str, Any] = {
        "transitions": labels,
        "groups": groups,
        "n_positions": n_pos,
        "predicted_sum": pred,
        "observed_sum": obs,
    }
    if runs is not None:
        lengths["runs"] = runs
    if models is not None:
        lengths["models"] = models
    check_same_length(**lengths)
    if np.any(n_pos < 0) or np.any(n_pos != np.round(n_pos)):
        raise ValueError("n_positions must be non-negative integers")
    if np.any(~np.isfinite(pred)) or np.any(~np.isfinite(obs)):
        raise ValueError("predicted_sum and observed_sum must be finite")
    unknown = sorted(set(groups) - set(MODE_GROUPS))
    if unknown:
        raise ValueError(f"unknown group(s) {unknown}; expected one of {list(MODE_GROUPS)}")
    run_of: dict[str, str] = {}
    model_of: dict[str, str] = {}
    for i, t in enumerate(labels):
        for name, seq, of in (("run", runs, run_of), ("model", models, model_of)):
            if seq is None:
                continue
            v = str(seq[i])
            if of.setdefault(t, v) != v:
                raise ValueError(f"transition {t}: rows name two {name}s ({of[t]}, {v})")
    excl = {str(r) for r in excluded_runs}
    if excl and runs is None:
        raise ValueError("excluded_runs given but runs is None: pass the run of each row")

    tables: dict[str, TransitionTable] = {}
    fits: dict[str, CovarianceFit] = {}
    by_model: dict[str, dict[str, CovarianceFit]] = {}
    counts: dict[str, int] = {}
    trajectories: dict[str, int] = {}
    group_arr = np.array([str(g) for g in groups], dtype=object)
    for g in MODE_GROUPS:
        sel = (group_arr == g) & (n_pos > 0)
        counts[g] = int(n_pos[sel].sum())
        trajectories[g] = int(sel.sum())
        order: dict[str, int] = {}
        for i in np.flatnonzero(sel):
            order.setdefault(labels[i], len(order))
        codes = np.array([order[labels[i]] for i in np.flatnonzero(sel)], dtype=np.int64)
        k = len(order)
        n_t = np.bincount(codes, weights=n_pos[sel], minlength=k)
        p_t = np.bincount(codes, weights=pred[sel], minlength=k) / np.where(n_t > 0, n_t, 1)
        o_t = np.bincount(codes, weights=obs[sel], minlength=k) / np.where(n_t > 0, n_t, 1)
        ts = list(order)
        tables[g] = TransitionTable(
            transitions=tuple(ts),
            predicted=tuple(float(v) for v in p_t),
            observed=tuple(float(v) for v in o_t),
            n_positions=tuple(int(v) for v in n_t),
        )
        fits[g] = _fit(ts, p_t, o_t, run_of if runs is not None else None, excl)
        if models is not None:
            for m in dict.fromkeys(model_of[t] for t in ts):
                mask = np.array([model_of[t] == m for t in ts], dtype=bool)
                sub = [t for t, keep in zip(ts, mask, strict=True) if keep]
                by_model.setdefault(m, {})[g] = _fit(
                    sub, p_t[mask], o_t[mask], run_of if runs is not None else None, excl
                )
    return ModeCovarianceFit(
        groups=MODE_GROUPS,
        tables=tables,
        fits=fits,
        by_model=dict(sorted(by_model.items())),
        n_positions=counts,
        n_trajectories=trajectories,
    )


def _fit(
    ts: list[str],
    pred: np.ndarray[Any, Any],
    obs: np.ndarray[Any, Any],
    run_of: dict[str, str] | None,
    excl: set[str],
) -> CovarianceFit:
    """Item 6's fit over one group's transitions; the failed runs among them excluded
    (``covariance_fit`` refuses an excluded run that is not among the runs given). No
    transition: every statistic undefined, n = 0."""
    if not ts:
        empty = np.zeros(0)
        return _fit_rows([], empty, empty, (), ())
    if run_of is None:
        return covariance_fit(ts, pred, obs)
    rs = [run_of[t] for t in ts]
    return covariance_fit(ts, pred, obs, runs=rs, excluded_runs=sorted(excl & set(rs)))
