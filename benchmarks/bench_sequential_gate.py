"""Simulation benchmark of the predeclared sequential gate (not a test).

Simulated partition audits (``rcea.audits.sequential_sim``: question-level heterogeneity of
the share of "different" pairs and of the automatic error rates, two annotators, a
perfect adjudicator) on the paper's plan — 29 questions × 156 pairs = 4,524 pairs —
monitored at the rubric's looks with the paper's gate thresholds.

Scenarios: for each of the five sampled requirements (human–human macro-F1, automatic
macro-F1, gap, different precision, different recall) the population value is placed at
threshold + δ on its passing side, δ ∈ {−0.05, −0.02, 0, +0.02, +0.05} (one world
parameter solved for it), plus a world where every requirement clears its threshold by
≥ 0.05 (``clear_pass``). Every audit is monitored at every look.

Reported:

* per requirement, over all scenarios: the share of audits in which that requirement was
  ever settled against its population truth (``wrong_settled_share``; on the threshold,
  the truth passes: ``value ≥ min`` / ``gap ≤ max``) and the share among the audits where
  it was settled at all (``wrong_among_settled``) — the plan's promise is ≤ alpha each;
* expected pairs labelled until the gate settles (else the whole plan), as a share of
  the fixed plan, in worlds whose truth is clearly on one side (every requirement ≥ 0.05
  on its passing side, or at least one ≥ 0.05 on its failing side).

Run:  .venv/bin/python benchmarks/bench_sequential_gate.py [--reps 48] [--spending obrien_fleming]
``--smoke`` runs a handful of audits (``make test`` runs it so the script cannot rot).
The last line of output is one JSON object with all figures.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace

import numpy as np
from common import add_json_out, emit  # benchmarks/common.py
from scipy import optimize

from rcea.audits.sequential import SequentialPlan
from rcea.audits.sequential_sim import World, monitor, simulate_audit, true_values
from rcea.audits.thresholds import GateThresholds
from rcea.pipeline.probe.common import progress_bar

TH = GateThresholds()
REQ = (
    ("human_human_macro_f1", TH.human_human_macro_f1_min, ">="),
    ("automatic_macro_f1", TH.automatic_macro_f1_min, ">="),
    ("gap", TH.gap_max, "<="),
    ("different_precision", TH.different_precision_min, ">="),
    ("different_recall", TH.different_recall_min, ">="),
)
DELTAS = (-0.05, -0.02, 0.0, 0.02, 0.05)


def _margin(name: str, value: float) -> float:
    """Distance to the threshold on the passing side (negative: failing side)."""
    _, thr, comp = next(r for r in REQ if r[0] == name)
    return value - thr if comp == ">=" else thr - value


def _solve(base: World, field: str, name: str, target: float, tied: tuple[str, ...] = ()) -> World:
    """``base`` with ``field`` (and the ``tied`` fields, set equal) solved so that the
    population value of ``name`` is ``target``."""

    def world(x: float) -> World:
        return replace(base, **{field: x, **{f: x for f in tied}})

    x = optimize.brentq(lambda v: true_values(world(v))[name] - target, 1e-4, 0.45, xtol=1e-13)
    return world(x)


def scenarios() -> list[tuple[str, World]]:
    base = World(e_human=0.02, e_sd=0.01, e_ds=0.01)
    out: list[tuple[str, World]] = []
    for d in DELTAS:
        out.append(
            (
                f"human_human_macro_f1{d:+.2f}",
                _solve(base, "e_human", "human_human_macro_f1", 0.85 + d),
            )
        )
        out.append(
            (
                f"automatic_macro_f1{d:+.2f}",
                _solve(base, "e_sd", "automatic_macro_f1", 0.85 + d, ("e_ds",)),
            )
        )
        out.append((f"gap{d:+.2f}", _solve(base, "e_sd", "gap", 0.05 - d, ("e_ds",))))
        skew = replace(base, p_different=0.3)
        out.append(
            (f"different_precision{d:+.2f}", _solve(skew, "e_sd", "different_precision", 0.80 + d))
        )
        out.append(
            (f"different_recall{d:+.2f}", _solve(skew, "e_ds", "different_recall", 0.80 + d))
        )
    out.append(("clear_pass", World(e_human=0.03, e_sd=0.03, e_ds=0.03)))
    return out  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=48, help="audits per scenario (26 scenarios)")
    ap.add_argument("--spending", default="obrien_fleming")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="a few small audits: does it run?")
    add_json_out(ap)
    args = ap.parse_args()
    plan = SequentialPlan(alpha=args.alpha, spending=args.spending, n_boot=args.n_boot)
    if args.smoke:
        args.reps = 1
        plan = replace(plan, n_boot=200)
    cs = plan.boundaries()
    worlds = scenarios()
    if args.smoke:
        worlds = [(name, replace(w, pairs_per_question=20)) for name, w in worlds[:3]] + [
            (worlds[-1][0], replace(worlds[-1][1], pairs_per_question=20))
        ]
    wrong = {r[0]: 0 for r in REQ}
    settled = {r[0]: 0 for r in REQ}
    n_audits = 0
    clear_pairs: dict[str, list[float]] = {"clear_pass": [], "clear_fail": []}
    gate_wrong = 0
    gate_settled = 0
    per_scenario = {}
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    bar = progress_bar(len(worlds) * args.reps, "simulated audits", not args.smoke)
    for name, w in worlds:
        truth = true_values(w)
        margins = {r: _margin(r, truth[r]) for r, _, _ in REQ}
        truth_pass = {r: m >= -1e-9 for r, m in margins.items()}
        gate_truth = all(truth_pass.values())
        clear = (
            "clear_pass"
            if min(margins.values()) >= 0.05 - 1e-9
            else "clear_fail"
            if min(margins.values()) <= -0.05 + 1e-9
            else None
        )
        sc = {"wrong": 0, "settled": 0, "stop_share": []}
        target = None if name == "clear_pass" else name[:-5]  # name = requirement + f"{δ:+.2f}"
        for _ in range(args.reps):
            audit = simulate_audit(w, rng)
            reps = monitor(audit, plan, TH, stop_when_settled=False, cs=cs)
            n_audits += 1
            for r, _, _ in REQ:
                ds = [next(x.decision for x in rep.requirements if x.name == r) for rep in reps]
                ever = [d for d in ds if d != "undecided"]
                if ever:
                    settled[r] += 1
                    bad = any((d == "settled_pass") != truth_pass[r] for d in ever)
                    wrong[r] += bad
                    if r == target:
                        sc["settled"] += 1
                        sc["wrong"] += bad
            stop = next((rep for rep in reps if rep.settled), None)
            share = (stop.n_labelled if stop else reps[-1].n_labelled) / reps[-1].n_planned
            sc["stop_share"].append(share)
            if stop is not None:
                gate_settled += 1
                gate_wrong += (stop.decision == "settled_pass") != gate_truth
            if clear:
                clear_pairs[clear].append(share)
            bar.update(1)
        per_scenario[name] = {
            "truth": {k: round(v, 4) for k, v in truth.items()},
            "target_settled": sc["settled"],
            "target_wrong": sc["wrong"],
            "mean_share_of_plan": round(float(np.mean(sc["stop_share"])), 4),
        }
    bar.close()
    elapsed = time.perf_counter() - t0
    n_planned = worlds[0][1].n_questions * worlds[0][1].pairs_per_question
    print(f"CPUs: {os.cpu_count()}  plan: {plan.to_dict()}  boundaries {[round(c, 3) for c in cs]}")
    print(f"{n_audits} simulated audits of {n_planned} planned pairs, {elapsed:.1f} s")
    print(f"{'requirement':<24}{'wrong/audits':>14}{'wrong/settled':>15}")
    for r, _, _ in REQ:
        among = wrong[r] / settled[r] if settled[r] else 0.0
        print(f"{r:<24}{wrong[r] / n_audits:>14.4f}{among:>15.4f}")
    print(f"gate: {gate_settled} settled, {gate_wrong} against the truth")
    for k, v in clear_pairs.items():
        if v:
            print(f"{k}: {len(v)} audits, mean pairs until settled {np.mean(v):.1%} of the plan")
    for name, sc in per_scenario.items():
        print(f"  {name:<28} target settled {sc['target_settled']:>3}, wrong "
              f"{sc['target_wrong']:>3}, pairs {sc['mean_share_of_plan']:.0%}")  # fmt: skip
    emit(
        {
            "bench": "sequential_gate",
            "smoke": args.smoke,
            "cpus": os.cpu_count(),
            "plan": plan.to_dict(),
            "boundaries": [round(c, 4) for c in cs],
            "n_audits": n_audits,
            "n_planned_pairs": n_planned,
            "seconds": round(elapsed, 1),
            "wrong_settled_share": {r: round(wrong[r] / n_audits, 4) for r, _, _ in REQ},
            "wrong_among_settled": {
                r: round(wrong[r] / settled[r], 4) if settled[r] else None for r, _, _ in REQ
            },
            "gate_settled": gate_settled,
            "gate_wrong": gate_wrong,
            "expected_share_of_plan": {
                k: round(float(np.mean(v)), 4) if v else None for k, v in clear_pairs.items()
            },
            "clear_audits": {k: len(v) for k, v in clear_pairs.items()},
            "scenarios": per_scenario,
        },
        args.json_out,
    )


if __name__ == "__main__":
    main()
