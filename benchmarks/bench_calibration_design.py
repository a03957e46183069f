"""Simulation benchmark of the default calibration design (not a test).

Does the documented default — `rcea judge calibrate sample` with the rubric defaults
(600 items balanced between judge-accepted and not accepted, ``held_out`` of them held
out in proportion, the default ``[acceptance]`` thresholds on the population basis) —
pass a good judge and fail a bad one? Each simulated calibration draws the held-out
human labels of both strata from a judge of known sensitivity (P(accept | valid)) and
specificity (P(reject | invalid)) on a population of verifier successes with a given
share of valid ones, computes the population-weighted figures
(``rcea.audits.calibration.population_calibration``) and holds them against the
thresholds (``rcea.audits.acceptance.calibration_acceptance``), exactly as
``calibrate report`` does; the balanced basis is reported beside it for contrast.

Judges: the issue's (80 % valid, sensitivity 0.97, specificity 0.93: population accuracy
0.962, accepted precision 0.982), judges of 95 % accuracy at 70/80/90 % valid, and a bad
one (accuracy 0.83). The design's promise: every judge of ≥ 95 % population accuracy whose
population figures clear the thresholds passes with probability ≥ 0.90; the bad judge
passes rarely.

Run:  .venv/bin/python benchmarks/bench_calibration_design.py [--reps 2000] [--held-out N]
``--smoke`` runs a few calibrations. The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from common import add_json_out, emit  # benchmarks/common.py

from rcea.audits.acceptance import JudgeAcceptance, calibration_acceptance
from rcea.audits.calibration import population_calibration
from rcea.audits.rubric import CalibrationPlan

#: (name, share of valid successes, sensitivity, specificity)
JUDGES = (
    ("issue_judge", 0.80, 0.97, 0.93),
    ("acc95_valid70", 0.70, 0.95, 0.95),
    ("acc95_valid80", 0.80, 0.95, 0.95),
    ("acc95_valid90", 0.90, 0.95, 0.95),
    ("bad_judge", 0.80, 0.85, 0.75),
)


def truth(pi: float, sens: float, spec: float) -> dict[str, float]:
    """The judge's population figures (exact)."""
    vv, vi, iv, ii = pi * sens, pi * (1 - sens), (1 - pi) * (1 - spec), (1 - pi) * spec
    f1v = 2 * vv / (2 * vv + iv + vi)
    f1i = 2 * ii / (2 * ii + vi + iv)
    return {
        "accuracy": vv + ii,
        "macro_f1": (f1v + f1i) / 2,
        "valid_recall": sens,
        "accepted_valid_precision": vv / (vv + iv),
        "coverage": 1.0,
    }


def simulate(
    pi: float, sens: float, spec: float, plan: CalibrationPlan, reps: int, seed: int
) -> dict[str, float]:
    """Pass rates on both bases over ``reps`` calibrations of the design ``plan``."""
    rng = np.random.default_rng(seed)
    w_a = pi * sens + (1 - pi) * (1 - spec)
    prec, npv = pi * sens / w_a, (1 - pi) * spec / (1 - w_a)
    n_pop = 100_000
    pop = {"accepted": round(n_pop * w_a), "not_accepted": n_pop - round(n_pop * w_a)}
    # the default draw: size balanced between the strata, held out in proportion
    n_acc = plan.size // 2
    h_acc = round(plan.held_out * n_acc / plan.size)
    h_rej = plan.held_out - h_acc
    t_pop, t_bal = JudgeAcceptance(), JudgeAcceptance(basis="balanced")
    passed = {"population": 0, "balanced": 0}
    for _ in range(reps):
        ha = rng.random(h_acc) < prec
        hr = rng.random(h_rej) < 1 - npv
        human = ["valid" if x else "invalid" for x in (*ha, *hr)]
        judge = ["valid"] * h_acc + ["invalid"] * h_rej
        rep = population_calibration(human, judge, pop, n_boot=1).to_dict()
        passed["population"] += calibration_acceptance({"population": rep}, t_pop)["passed"]
        # the balanced sample: the same labels, unweighted
        bal = population_calibration(
            human, judge, {"accepted": h_acc, "not_accepted": h_rej}, n_boot=1
        ).to_dict()
        passed["balanced"] += calibration_acceptance(bal, t_bal)["passed"]
    return {k: v / reps for k, v in passed.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2000, help="calibrations per judge")
    ap.add_argument("--held-out", type=int, default=None, help="default: the rubric default")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="a few calibrations: does it run?")
    add_json_out(ap)
    args = ap.parse_args()
    reps = 5 if args.smoke else args.reps
    base = CalibrationPlan()
    plan = CalibrationPlan(size=base.size, held_out=args.held_out or base.held_out, seed=base.seed)
    t0 = time.perf_counter()
    judges = {}
    for i, (name, pi, sens, spec) in enumerate(JUDGES):
        tr = truth(pi, sens, spec)
        clears = all(
            tr[k] >= getattr(JudgeAcceptance(), f"{k}_min")
            for k in ("accuracy", "macro_f1", "valid_recall", "accepted_valid_precision")
        )
        rates = simulate(pi, sens, spec, plan, reps, args.seed + i)
        judges[name] = {
            "share_valid": pi,
            "sensitivity": sens,
            "specificity": spec,
            "truth": {k: round(v, 4) for k, v in tr.items()},
            "truth_clears_thresholds": clears,
            "pass_rate_population": rates["population"],
            "pass_rate_balanced": rates["balanced"],
        }
        print(
            f"{name:<15} accuracy {tr['accuracy']:.3f} macro-F1 {tr['macro_f1']:.3f}: "
            f"passes {rates['population']:.1%} (population), {rates['balanced']:.1%} (balanced)"
        )
    good = [
        j
        for j in judges.values()
        if j["truth"]["accuracy"] >= 0.95 and j["truth_clears_thresholds"]
    ]
    emit(
        {
            "bench": "calibration_design",
            "smoke": args.smoke,
            "reps": reps,
            "design": {"size": plan.size, "held_out": plan.held_out},
            "thresholds": JudgeAcceptance().to_dict(),
            "judges": judges,
            "min_pass_rate_good": min(j["pass_rate_population"] for j in good),
            "max_pass_rate_bad": judges["bad_judge"]["pass_rate_population"],
            "seconds": round(time.perf_counter() - t0, 1),
        },
        args.json_out,
    )


if __name__ == "__main__":
    main()
