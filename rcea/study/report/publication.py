"""The publication rule: what a bundle may call audited.

A report is refused while any quantity that depends on the partition rests on a partition
without a passing final gate bound to it, or any quantity that depends on validity rests on
a judge without a completed calibration bound to its hash (docs/publication.md); the
refusal names every missing gate. An entropy-only bundle keeps only the audit-independent
quantities (:func:`strip_audited`). Both the publisher (:mod:`rcea.study.report.publish`) and
the verifier (:mod:`rcea.study.report.verify`) apply this one rule.
"""

from __future__ import annotations

import copy
from typing import Any

from rcea.audits.covariance import FIT_SUMMARY
from rcea.audits.rubric import EstimatorSettings
from rcea.study import events
from rcea.study.report.entropy_law import law_quantities
from rcea.study.report.mode_tail import mode_covariance_quantities, mode_tail_quantities
from rcea.study.report.realization import realization_quantities
from rcea.study.report.replicates import replicates_quantities, strip_audited_replicates

# Appended by `rcea demo --simulate-annotators` for every simulated labelling round.
SIMULATED_EVENT = events.DEMO_SIMULATED

PUBLISH_EVENT = events.REPORT_PUBLISH
#: ``inputs.json`` format tag (what ``rcea report verify`` reads).
BUNDLE_FORMAT = "rcea-bundle-inputs/1"
FULL_SCOPE = "full (audited)"
#: how a pass resting on a design changed after a failed attempt is marked
CHANGED_LABEL = "changed after a failed attempt"


class PublishRefused(ValueError):
    """Publishing would release numbers whose audit has not passed; ``reasons`` names
    each missing gate."""

    def __init__(self, reasons: list[str]) -> None:
        self.reasons = reasons
        super().__init__("refusing to publish: " + "; ".join(reasons))


def refusal_reasons(report: dict[str, Any]) -> list[str]:
    """The missing gates behind the report's unpublishable quantities (empty = none)."""
    deps = {d for q in report["quantities"] if not q["publishable"] for d in q["depends_on"]}
    reasons = []
    pair = report["audits"]["pair"]["blocked_by"]
    val = report["audits"]["validity"]["blocked_by"]
    if "partition" in deps and pair:
        reasons.append(pair)
    if "validity" in deps and val:
        reasons.append(val)
    return reasons


def evidence_lines(quantities: list[dict[str, Any]]) -> list[str]:
    """One line per number below the predeclared minimum evidence."""
    return [
        f"{q['name']} {q['run']}/{q['model']}/step {q['step']}: {q['evidence']}"
        for q in quantities
        if q.get("evidence")
    ]


def publication_scope(report: dict[str, Any], entropy_only_label: str) -> str:
    """The scope a bundle states: ``full (audited)`` when audit-dependent numbers are
    published, qualified with how many numbers rest on insufficient evidence (never
    called audited); else ``entropy_only_label``. One rule for publish and verify."""
    if not any(q["depends_on"] for q in report["quantities"]):
        return entropy_only_label  # nothing is called audited; the labels say the rest
    scope = FULL_SCOPE
    n = sum(1 for q in report["quantities"] if q.get("evidence"))
    if n:
        scope += f"; {n} number(s) with insufficient evidence, not audited"
    deps = {d for q in report["quantities"] for d in q["depends_on"]}
    for dep, audit, what in (
        ("partition", report["audits"]["pair"], "pair gate"),
        ("validity", report["audits"]["validity"], "judge calibration"),
    ):
        changes = audit.get("changed_after_failure") or []
        if dep in deps and changes:
            keys = ", ".join(c["key"] for c in changes)
            scope += f"; the {what} passed {CHANGED_LABEL} ({changes[0]['since']}: {keys})"
    return scope


#: the dependency → the audit section that gates it and its name in the mark
_GATED = (
    ("partition", "pair", "pair gate", "audit"),
    ("validity", "validity", "judge calibration", "calibration"),
)


def _fmt_setting(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def changed_marks(report: dict[str, Any]) -> dict[str, str]:
    """Dependency (``partition``, ``validity``) → the mark its numbers carry when the
    passing audit they rest on was changed after a failed attempt: ``changed after a
    failed attempt: the judge calibration C2 (since C1: key before → after; …)``."""
    out = {}
    for dep, section, what, name in _GATED:
        audit = report["audits"][section]
        changes = audit.get("changed_after_failure") or []
        if changes:
            diff = "; ".join(
                f"{c['key']} {_fmt_setting(c['before'])} → {_fmt_setting(c['after'])}"
                for c in changes
            )
            out[dep] = (
                f"{CHANGED_LABEL}: the {what} {audit.get(name)} "
                f"(since {changes[0]['since']}: {diff})"
            )
    return out


def mark_changed_quantities(report: dict[str, Any], audited_label: str) -> None:
    """Every quantity labelled ``audited_label`` whose audit passed only after a design
    changed after a failed attempt gets ``changed_after_failure``: the marks of
    :func:`changed_marks` it depends on, joined by "; " (no key otherwise, so bundles
    written before the mark re-derive unchanged). In place; one rule for build and verify."""
    marks = changed_marks(report)
    if not marks:
        return
    for q in report["quantities"]:
        if q["label"] != audited_label:
            continue
        mine = [marks[d] for d in q["depends_on"] if d in marks]
        if mine:
            q["changed_after_failure"] = "; ".join(mine)


def display_label(q: dict[str, Any]) -> str:
    """A quantity's label as every surface shows it: ``audited — changed after a failed
    attempt: …`` for a marked one."""
    mark = q.get("changed_after_failure")
    return f"{q['label']} — {mark}" if mark else str(q["label"])


def strip_audited(report: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``report`` without any audit-dependent number: per-checkpoint
    ``validity``, ``modes`` and ``retention`` and the ``association`` become ``None``,
    ``realization`` and ``mode_tail`` empty, ``mode_covariance`` ``None``, ``replicates``
    without its mode-dependent aggregates, and ``quantities`` keeps those with
    ``depends_on == []``."""
    out = copy.deepcopy(report)
    for c in out["checkpoints"]:
        c["validity"] = c["modes"] = c["retention"] = None
        c["retention_error"] = None
    out["association"] = None
    out["realization"] = []
    out["mode_tail"] = []
    out["replicates"] = strip_audited_replicates(out.get("replicates"))
    out["mode_covariance"] = None
    out["quantities"] = [q for q in out["quantities"] if not q["depends_on"]]
    if "insufficient_evidence" in out:
        out["insufficient_evidence"] = evidence_lines(out["quantities"])
    return out


# --------------------------------------------------------------------------- labelling

ENTROPY_ONLY_LABEL = "entropy-only (no audit)"
AUDITED_LABEL = "audited"
INSUFFICIENT_LABEL = "insufficient evidence"
#: Numbers each checkpoint section publishes (name, field) with no floor of their own.
_OUTCOME = (
    "mean_outcome_entropy",
    "sequence_outcome_term",
    "mean_accuracy",
    "coverage_success",
    "coverage_failure",
    "share_solved",
    "share_mixed",
)
_ENTROPY = (
    "mean_outcome_entropy",
    "mean_token_entropy",
    "mean_sequence_entropy",
    "mean_conditional_entropy_success",
    "mean_conditional_entropy_failure",
    "max_abs_residual",
    "max_abs_token_mixture_residual",
    "coverage_success",
    "coverage_failure",
)
_VALIDITY = (
    ("mean_validity_rate", "mean_validity_rate"),
    ("mean_validity_entropy", "mean_validity_entropy"),
    ("validity_coverage", "coverage"),
    ("judge_coverage", "judge_coverage"),
)
_MODES = (
    ("mean_n_eff", "mean_n_eff"),
    ("mean_mode_entropy", "mean_mode_entropy"),
    ("mode_coverage", "coverage"),
)


def min_evidence(par: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The per-quantity floors of ``par`` (inputs written before per-quantity floors: the
    one floor applies to all four)."""
    if par.get("min_evidence"):
        return par["min_evidence"]  # type: ignore[no-any-return]  # a value of the rubric's parameter dict (typed Any)
    return EstimatorSettings(
        min_eligible_questions=par.get("min_eligible_questions", 10),
        min_eligible_share=par.get("min_eligible_share", 0.25),
    ).min_evidence()


def _evidence(eligible: tuple[int | None, int], floor: tuple[int, float]) -> str | None:
    """Why a number rests on too little (``None``: it meets the rubric's predeclared
    minimum evidence of the quantity, ``[estimators] <quantity>_min_questions`` and
    ``<quantity>_min_share``, else ``min_eligible_questions`` and ``min_eligible_share``)."""
    n, total = eligible[0] or 0, eligible[1] or 0
    share = n / total if total else 0.0
    if n >= floor[0] and share >= floor[1]:
        return None
    return (
        f"insufficient evidence: {n} of {total} questions eligible (share {share:.3f}); "
        f"the rubric's floor is {floor[0]} questions and share {floor[1]}"
    )


class Labeller:
    """The quantity list being built for one report: :meth:`add` labels each number with
    what it depends on, whether it is publishable and whether it meets its floor."""

    def __init__(self, report: dict[str, Any]) -> None:
        pair, val = report["audits"]["pair"], report["audits"]["validity"]
        self.mode_deps = ["partition", "validity"] if val["filter"] == "judge" else ["partition"]
        self.blockers = {"partition": pair["blocked_by"], "validity": val["blocked_by"]}
        self.floors = {
            q: (f["questions"], f["share"]) for q, f in min_evidence(report["parameters"]).items()
        }
        self.out: list[dict[str, Any]] = []

    def add(
        self,
        name: str,
        section: str,
        value: Any,
        deps: list[str],
        *,
        run: str | None = None,
        model: str | None = None,
        step: int | None = None,
        key: str | None = None,
        ci: tuple[Any, Any] = (None, None),
        n: int | None = None,
        coverage: float | None = None,
        eligible: tuple[int | None, int] | None = None,
        floor: str | None = None,
        evidence: str | None = None,
    ) -> None:
        """One number; ``evidence`` says why it rests on too little when no floor of its
        own applies (an across-seed mean of seeds below theirs)."""
        if value is None:
            return
        blocked = [self.blockers[d] for d in deps if self.blockers[d]]
        if eligible and floor:
            evidence = _evidence(eligible, self.floors[floor])
        label = AUDITED_LABEL if deps else ENTROPY_ONLY_LABEL
        self.out.append(
            {
                "name": name,
                "section": section,
                "run": run,
                "model": model,
                "step": step,
                "key": key,
                "value": value,
                "ci_low": ci[0],
                "ci_high": ci[1],
                "n": n,
                "coverage": coverage,
                "depends_on": deps,
                "publishable": not blocked,
                "blocked_by": "; ".join(blocked) if blocked else None,
                "label": INSUFFICIENT_LABEL if evidence else label,
                "evidence": evidence,
            }
        )


def quantities(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The flat list of every number in ``report`` with what it depends on.

    ``depends_on``: ``[]`` (entropy-only: verifier rewards, log-probabilities, token
    entropies, producer measurements), ``["validity"]`` (judge verdicts),
    ``["partition"]`` / ``["partition", "validity"]`` (modes; validity joins when a judge
    verdict filters the accepted set). ``publishable`` is false and ``blocked_by`` names the
    missing gate while the pair gate of the partition has not passed or the judge has no
    completed calibration. Paired ratios, validity, mode and retention numbers resting on
    fewer eligible questions than the predeclared floor carry ``evidence`` (why) and the
    label "insufficient evidence", never "audited" (docs/publication.md); so does an
    across-seed mean of such numbers (section ``replicates``, listed last).
    """
    lab = Labeller(report)
    for c in report["checkpoints"]:
        _checkpoint_quantities(lab, c)
    realization_quantities(
        report.get("realization") or [],
        {(c["run"], c["model"], c["step"]): c["n_questions"] for c in report["checkpoints"]},
        lab.mode_deps,
        lab.add,
    )
    mode_tail_quantities(report.get("mode_tail") or [], lab.mode_deps, lab.add)
    mode_covariance_quantities(report.get("mode_covariance"), lab.mode_deps, lab.add)
    _greedy_quantities(lab, report["greedy"])
    for p in report["passk"]:
        for name, value in p["pass_at_k"].items():
            where = {"run": p["run"], "model": p["model"], "step": p["step"]}
            lab.add(name, "passk", value, [], key=p["benchmark"], n=p["n_questions"], **where)
    _covariance_quantities(lab, report["covariance"])
    _tail_quantities(lab, report["tail"])
    for q in law_quantities(report.get("entropy_law")):
        where = {"run": q["run"], "model": q["model"], "key": q["key"], "n": q["n"]}
        lab.add(q["name"], "entropy_law", q["value"], [], **where)
    for f in report["failure"]:
        where = {"run": f["run"], "model": f["model"], "step": f["reported_step"]}
        lab.add("failed", "failure", f["failed"], [], **where)
    _association_quantities(lab, report["association"])
    # last: an across-seed mean inherits the per-seed labels added above
    replicates_quantities(report.get("replicates"), lab.out, lab.add)
    return lab.out


def _checkpoint_quantities(lab: Labeller, c: dict[str, Any]) -> None:
    """Accuracy, then the outcome or entropy split, validity, modes and retention of one
    checkpoint; the last four rest on their eligible questions (each its own floor)."""
    at = {"run": c["run"], "model": c["model"], "step": c["step"]}
    lab.add("accuracy", "checkpoints", c["accuracy"], [], n=c["n"], **at)
    o, e, nq = c.get("outcome"), c["entropy"], c["n_questions"]
    kw: dict[str, Any]
    if o and not e:  # with token entropies, the entropy section carries them
        for name in _OUTCOME:
            lab.add(name, "outcome", o[name], [], n=o["n_questions"], **at)
    if e:
        n, npq = e.get("n_questions"), e.get("n_paired_questions")
        for name in _ENTROPY:
            lab.add(name, "entropy", e.get(name), [], n=n, **at)
        cov = _min_or_none(e.get("coverage_success"), e.get("coverage_failure"))
        lab.add("broad_ratio", "entropy", e.get("broad_ratio"), [], n=n, coverage=cov, **at)
        for name in ("direction_share", "sign_test_p"):
            lab.add(name, "entropy", e.get(name), [], n=npq, **at)
        kw = {"n": npq, "eligible": (npq, nq), "floor": "paired_ratio", **at}
        ci = (e.get("paired_ci_low"), e.get("paired_ci_high"))
        lab.add("paired_ratio", "entropy", e.get("paired_ratio"), [], ci=ci, **kw)
    if v := c["validity"]:
        n = v.get("n_eligible")
        kw = {"n": n, "coverage": v.get("coverage"), "eligible": (n, nq), "floor": "validity"}
        for name, fld in _VALIDITY:
            lab.add(name, "validity", v.get(fld), ["validity"], **kw, **at)
    if m := c["modes"]:
        n = m["n_eligible"]
        kw = {"n": n, "coverage": m["coverage"], "eligible": (n, nq), "floor": "mode_entropy"}
        for name, fld in _MODES:
            lab.add(name, "modes", m[fld], lab.mode_deps, **kw, **at)
    if r := c["retention"]:
        kw = {"eligible": (r["n_eligible"], r["n_denominator"]), "floor": "retention", **at}
        share, ci = r["eligible_share"], (r["ci_low"], r["ci_high"])
        ret = {"n": r["n_eligible"], "coverage": share, "ci": ci}
        lab.add("retention", "retention", r["retention"], lab.mode_deps, **ret, **kw)
        eligible_share = ("retention_eligible_share", "retention", share, lab.mode_deps)
        lab.add(*eligible_share, n=r["n_denominator"], **kw)


def _greedy_quantities(lab: Labeller, greedy: list[dict[str, Any]]) -> None:
    """Greedy accuracy per benchmark and the macro (n = benchmarks with a value)."""
    for g in greedy:
        where = {"run": g["run"], "model": g["model"], "step": g["step"]}
        for bench, acc in g["accuracy"].items():
            lab.add("greedy_accuracy", "greedy", acc, [], key=bench, n=g["n"].get(bench), **where)
        n_bench = sum(v is not None for v in g["accuracy"].values())
        lab.add("greedy_macro_accuracy", "greedy", g["macro_accuracy"], [], n=n_bench, **where)


def _covariance_quantities(lab: Labeller, cov: dict[str, Any] | None) -> None:
    """The covariance fit's summary numbers, pooled and per model."""
    for scope, fit in [("pooled", cov["pooled"]), *cov["groups"].items()] if cov else []:
        at = {"model": None if scope == "pooled" else scope, "key": scope, "n": fit.get("n")}
        for name in FIT_SUMMARY:
            lab.add(f"covfit_{name}", "covariance", fit.get(name), [], **at)


def _tail_quantities(lab: Labeller, tail: dict[str, Any] | None) -> None:
    """Per endpoint the q99 success and failure shares, their gap and each budget's gap."""
    for ep in tail["endpoints"] if tail else []:
        where = {"run": ep["run"], "model": ep["model"], "step": ep["step"]}
        rep = ep["report"]
        nt = rep.get("n_trajectories")
        for name, part in (("q99_success_share", "success"), ("q99_failure_share", "failure")):
            lab.add(name, "tail", (rep.get(part) or {}).get("share"), [], n=nt, **where)
        lab.add("q99_gap_pp", "tail", rep.get("gap_failure_minus_success_pp"), [], n=nt, **where)
        for b in rep.get("budgets") or []:
            gap, key = b.get("gap_failure_minus_success_pp"), f"top_{b.get('budget'):g}"
            lab.add("budget_gap_pp", "tail", gap, [], key=key, n=nt, **where)


def _association_quantities(lab: Labeller, assoc: dict[str, Any] | None) -> None:
    """The retention–pass@k Spearman ρ per model scale, and pooled when fitted."""
    if not assoc:
        return
    fits = list(assoc["by_model"].items())
    if assoc["pooled"]:
        fits.append(("pooled", assoc["pooled"]))
    for model, fit in fits:
        at = {"model": model, "key": assoc["metric"], "n": fit.get("n")}
        lab.add("retention_passk_spearman_rho", "association", fit["rho"], lab.mode_deps, **at)


def _min_or_none(*values: float | None) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None
