"""Item 17 in the report: a run with training seeds is keyed per seed in every section
(nothing pools seeds), and the ``replicates`` section's per-seed values and across-seed
mean and SD equal computations written here with numpy and math.comb; the streamed build
equals the bundle path (what ``rcea report verify`` recomputes); one seed says so."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rcea.audits.mode_tail import trajectory_sums
from rcea.audits.replicates import across_seeds
from rcea.audits.tail import reward_stratified_tail
from rcea.study.records.ingest import ingest_file
from rcea.study.report.build import build_report
from rcea.study.report.compute import compute_report
from rcea.study.report.inputs import gather_inputs
from rcea.study.report.schema import StudyReport, report_json
from rcea.study.store import require_study, session_scope
from rcea.study.store.measurements import record_measurement
from tests.support.helpers import write_jsonl

SEEDS = (1, 2, 3)
STEPS = (0, 10)
N_Q, PER_Q, K_MIN, N_BOOT, PASS_K = 6, 16, 4, 200, 4


def _records(seeds: tuple[int, ...]) -> list[dict[str, Any]]:
    rng = random.Random(5)
    recs: list[dict[str, Any]] = []
    for s in seeds:
        for step in STEPS:
            for q in range(N_Q):
                for k in range(PER_Q):
                    r = int(rng.random() < 0.5)
                    recs.append(
                        {
                            "trajectory_id": f"s{s}-t{len(recs):05d}",
                            "question_id": f"q{q}",
                            "text": "x",
                            "reward": r,
                            "run": "grpo",
                            "model": "tiny",
                            "step": step,
                            "seed": k,  # the decoding seed: the same across training seeds
                            "train_seed": s,
                            "mean_token_entropy": rng.uniform(0.2, 1.0)
                            * (1.0 + 0.2 * s + 0.5 * (1 - r)),
                            "seq_logprob": -rng.uniform(5.0, 30.0),
                            "validity": 1 if r else None,
                            "mode": f"m{rng.randrange(3 if step == 0 else 2)}" if r else None,
                        }
                    )
    return recs


def _passk(s: int, q: int) -> dict[str, int]:
    return {"question_id": f"q{q}", "n": 8, "c": (q + s) % 9}


def _study(engine, tmp_path: Path, seeds: tuple[int, ...] = SEEDS) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    recs = _records(seeds)
    path = write_jsonl(tmp_path / "seeds.jsonl", recs)
    ingest_file(engine, path, study="sd", artifacts_dir=tmp_path / "art", data_dir=tmp_path)
    with session_scope(engine) as s:
        sid = require_study(s, name="sd").id
        for seed in seeds:
            record_measurement(
                s,
                study_id=sid,
                kind="passk",
                run="grpo",
                model="tiny",
                step=10,
                key="toy",
                train_seed=seed,
                payload={
                    "n": 8,
                    "k": [1, PASS_K],
                    "questions": [_passk(seed, q) for q in range(N_Q)],
                },
            )
    return recs


def _tokens(recs: list[dict[str, Any]], seed: int) -> tuple[list[dict[str, Any]], Any, Any]:
    """Seed ``seed``'s endpoint (step 10) records with generated token log-probabilities."""
    ck = [r for r in recs if r["train_seed"] == seed and r["step"] == 10]
    rng = np.random.default_rng(seed)
    traj = np.repeat(np.arange(len(ck)), rng.integers(3, 10, size=len(ck)))
    return ck, traj, -rng.gamma(1.5, 1.0, size=traj.size)


def _add_tail_sums(engine, recs: list[dict[str, Any]], seeds: tuple[int, ...]) -> None:  # type: ignore[no-untyped-def]
    """A ``tail_trajectories`` measurement per seed's endpoint, as the probe records it."""
    with session_scope(engine) as s:
        sid = require_study(s, name="sd").id
        for seed in seeds:
            ck, traj, logp = _tokens(recs, seed)
            sums = trajectory_sums(
                [r["question_id"] for r in ck], [r["reward"] for r in ck], traj, logp
            )
            record_measurement(
                s,
                study_id=sid,
                kind="tail_trajectories",
                run="grpo",
                model="tiny",
                step=10,
                train_seed=seed,
                payload={
                    "quantile": sums.quantile,
                    "trajectory_id": [r["trajectory_id"] for r in ck],
                    "question_id": [r["question_id"] for r in ck],
                    "reward": [r["reward"] for r in ck],
                    "n_tokens": sums.n_tokens.tolist(),
                    "positive_mass": sums.positive_mass.tolist(),
                    "tail_positive_mass": sums.tail_positive_mass.tolist(),
                    "tail_tokens": sums.tail_tokens.tolist(),
                    "failure_tail_positive_mass": np.asarray(
                        sums.failure_tail_positive_mass
                    ).tolist(),
                },
            )


def _loop_question_sums(ck: list[dict[str, Any]], traj: Any, logp: Any) -> dict[str, list[float]]:
    """Per question, by plain loops over tokens: item 7's c (group-normalised advantage,
    ε = 1e-6, centred by the token means), C = R = 1 with a mode, maj(x) its most frequent
    mode (ties: the smaller label), the success tail c ≥ the ⌈0.99·N⌉-th smallest success
    c (the failure tail likewise over failure c); the sums [mass maj, mass C, tokens maj,
    tokens C, tail mass maj, tail mass, success positive mass, failure tail mass, failure
    positive mass]."""
    adv = []
    for r in ck:
        g = [x["reward"] for x in ck if x["question_id"] == r["question_id"]]
        mu, sd = sum(g) / len(g), math.sqrt(sum((v - sum(g) / len(g)) ** 2 for v in g) / len(g))
        adv.append(0.0 if sd == 0 else (r["reward"] - mu) / (sd + 1e-6))
    a_tok = [adv[t] for t in traj]
    l_bar, a_bar = sum(logp) / len(logp), sum(a_tok) / len(a_tok)
    c = [(lp - l_bar) * (a - a_bar) for lp, a in zip(logp, a_tok, strict=True)]
    cuts = {}
    for stratum in (0, 1):
        cs = sorted(ci for ci, t in zip(c, traj, strict=True) if ck[t]["reward"] == stratum)
        cuts[stratum] = cs[math.ceil(0.99 * len(cs)) - 1]
    maj: dict[str, str] = {}
    for q in {r["question_id"] for r in ck}:
        modes = [r["mode"] for r in ck if r["question_id"] == q and r["reward"] == 1]
        if modes:
            maj[q] = min(set(modes), key=lambda m: (-modes.count(m), m))
    out: dict[str, list[float]] = {}
    for ci, t in zip(c, traj, strict=True):
        r = ck[t]
        q, pos = r["question_id"], max(ci, 0.0)
        in_c = r["reward"] == 1 and r["mode"] is not None
        in_maj = in_c and maj[q] == r["mode"]
        tail = r["reward"] == 1 and ci >= cuts[1]
        failure_tail = r["reward"] == 0 and ci >= cuts[0]
        row = out.setdefault(q, [0.0] * 9)
        for j, add in enumerate(
            (
                pos * in_maj,
                pos * in_c,
                float(in_maj),
                float(in_c),
                pos * (tail and in_maj),
                pos * tail,
                pos * (r["reward"] == 1),
                pos * failure_tail,
                pos * (r["reward"] == 0),
            )
        ):
            row[j] += add
    return out


def _both(engine) -> tuple[dict[str, Any], dict[str, Any]]:  # type: ignore[no-untyped-def]
    kw: dict[str, Any] = {"n_boot": N_BOOT, "k_min": K_MIN, "n_min": 4, "association_k": PASS_K}
    with session_scope(engine) as s:
        streamed = report_json(build_report(s, study="sd", **kw))
        streamed.pop("generated_at", None)
        bundle = report_json(
            compute_report(json.loads(json.dumps(gather_inputs(s, study="sd", **kw))))
        )
    return json.loads(json.dumps(streamed)), json.loads(json.dumps(bundle))


def _rho(recs: list[dict[str, Any]]) -> list[float]:
    """Per question: mean failure entropy / mean success entropy, both K >= K_MIN."""
    out = []
    for q in sorted({r["question_id"] for r in recs}):
        s = [r["mean_token_entropy"] for r in recs if r["question_id"] == q and r["reward"] == 1]
        f = [r["mean_token_entropy"] for r in recs if r["question_id"] == q and r["reward"] == 0]
        if len(s) >= K_MIN and len(f) >= K_MIN:
            out.append(float(np.mean(f) / np.mean(s)))
    return out


def test_seeds_are_never_pooled_and_the_aggregate_is_the_seeds(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    recs = _study(engine, tmp_path)
    report, bundle = _both(engine)
    assert report == bundle  # `rcea report verify` recomputes exactly this
    StudyReport.model_validate(report)
    labels = {c["run"] for c in report["checkpoints"]}
    assert labels == {f"grpo [train seed {s}]" for s in SEEDS}
    assert [c["n"] for c in report["checkpoints"]] == [N_Q * PER_Q] * (len(SEEDS) * len(STEPS))
    rep = report["replicates"]
    assert not rep["single_seed"] and rep["sentence"] is None
    assert [r["train_seed"] for r in rep["runs"]] == list(SEEDS)
    group = next(g for g in rep["groups"] if g["step"] == 10)
    assert (group["run"], group["model"], group["train_seeds"]) == ("grpo", "tiny", list(SEEDS))
    by_name = {q["quantity"]: q for q in group["quantities"]}
    assert set(by_name) == {
        "paired_ratio",
        "retention",
        "within_mode_entropy",
        "pass_at_1",
        f"pass_at_{PASS_K}",
    }

    rho = by_name["paired_ratio"]
    expected = [
        math.exp(
            np.mean(np.log(_rho([r for r in recs if r["train_seed"] == s and r["step"] == 10])))
        )
        for s in SEEDS
    ]
    assert [v["value"] for v in rho["seeds"]] == pytest.approx(expected, rel=1e-9)
    assert rho["mean"] == pytest.approx(np.mean(expected), rel=1e-9)
    assert rho["between_seed_sd"] == pytest.approx(np.std(expected, ddof=1), rel=1e-9)
    assert rho["ci_low"] <= rho["mean"] <= rho["ci_high"]
    assert (rho["n_boot"], rho["seed"]) == (N_BOOT, report["parameters"]["seed"])
    # each seed's value is the report's own number for that seed's checkpoint
    per_ck = {(c["run"], c["step"]): c for c in report["checkpoints"]}
    for v in rho["seeds"]:
        ck = per_ck[(f"grpo [train seed {v['train_seed']}]", 10)]
        assert v["value"] == pytest.approx(ck["entropy"]["paired_ratio"], rel=1e-12)
        assert by_name["retention"]["seeds"][SEEDS.index(v["train_seed"])][
            "value"
        ] == pytest.approx(ck["retention"]["retention"], rel=1e-12)

    passk = by_name[f"pass_at_{PASS_K}"]
    want = [
        np.mean(
            [
                1 - math.comb(8 - _passk(s, q)["c"], PASS_K) / math.comb(8, PASS_K)
                for q in range(N_Q)
            ]
        )
        for s in SEEDS
    ]
    assert [v["value"] for v in passk["seeds"]] == pytest.approx(want, rel=1e-12)
    assert passk["benchmark"] == "toy"
    w = {
        (e["run"], e["step"]): e["report"]["within_mode_entropy"]
        for e in report["realization"]
        if e["report"]
    }
    assert [v["value"] for v in by_name["within_mode_entropy"]["seeds"]] == pytest.approx(
        [w[(f"grpo [train seed {s}]", 10)] for s in SEEDS], rel=1e-12
    )


def test_one_seed_says_single_seed(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _study(engine, tmp_path, seeds=(7,))
    report, bundle = _both(engine)
    assert report == bundle
    rep = report["replicates"]
    assert rep["single_seed"] and rep["sentence"].startswith("single seed")
    q = rep["groups"][-1]["quantities"][0]
    assert q["single_seed"] and (q["between_seed_sd"], q["ci_low"], q["ci_high"]) == (None,) * 3


def test_a_run_named_like_another_runs_seeded_label_is_refused(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    recs = _records((1,))
    clash = [dict(r, run="grpo [train seed 1]", train_seed=None) for r in recs[:4]]
    for i, r in enumerate(clash):
        r["trajectory_id"] = f"clash-{i}"
    path = write_jsonl(tmp_path / "c.jsonl", recs + clash)
    ingest_file(engine, path, study="sd", artifacts_dir=tmp_path / "art", data_dir=tmp_path)
    with session_scope(engine) as s, pytest.raises(ValueError, match="has the report label of"):
        build_report(s, study="sd", n_boot=N_BOOT)


def test_the_page_shows_each_seed_and_the_aggregate(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from rcea.study.report.html import render_html

    _study(engine, tmp_path)
    report, _ = _both(engine)
    report["generated_at"] = "now"
    page = render_html(report, scope="entropy-only", figures={}, hashes={})
    assert "Training seeds (item 17)" in page and "<code>grpo [train seed 2]</code>" in page
    group = next(g for g in report["replicates"]["groups"] if g["step"] == 10)
    rho = group["quantities"][0]
    assert f"seed 3: {rho['seeds'][2]['value']:.4g}" in page
    assert f"[{rho['ci_low']:.4g}, {rho['ci_high']:.4g}]" in page


def test_a_single_seed_page_says_so_in_words(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from rcea.study.report.html import render_html

    _study(engine, tmp_path, seeds=(7,))
    report, _ = _both(engine)
    report["generated_at"] = "now"
    page = render_html(report, scope="entropy-only", figures={}, hashes={})
    assert "Single seed: no (run, model, step) has two or more training seeds" in page


def test_an_entropy_only_report_keeps_only_the_unaudited_aggregates(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from rcea.study.report.publication import strip_audited

    _study(engine, tmp_path)
    report, _ = _both(engine)
    group = next(g for g in report["replicates"]["groups"] if g["step"] == 10)
    deps = {q["quantity"]: q["depends_on"] for q in group["quantities"]}
    assert deps["paired_ratio"] == deps[f"pass_at_{PASS_K}"] == []
    assert deps["retention"] == deps["within_mode_entropy"] == ["partition", "validity"]
    stripped = strip_audited(report)
    kept = next(g for g in stripped["replicates"]["groups"] if g["step"] == 10)
    assert [q["quantity"] for q in kept["quantities"]] == [
        "paired_ratio",
        "pass_at_1",
        f"pass_at_{PASS_K}",
    ]


def test_an_entropy_only_bundle_with_seeds_verifies(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from rcea.study.report.publish import publish_report
    from rcea.study.report.verify import verify_bundle

    recs = _study(engine, tmp_path)
    _add_tail_sums(engine, recs, SEEDS)
    with session_scope(engine) as s:
        bundle = Path(
            publish_report(
                s,
                study="sd",
                out_dir=tmp_path / "out",
                actor="r",
                entropy_only=True,
                n_boot=N_BOOT,
                k_min=K_MIN,
            )["bundle"]
        )
    res = verify_bundle(bundle)
    assert res.ok, res.mismatches
    report = json.loads((bundle / "report.json").read_text())
    group = next(g for g in report["replicates"]["groups"] if g["step"] == 10)
    assert group["train_seeds"] == list(SEEDS)
    assert all(not q["depends_on"] for q in group["quantities"])
    # item 7's stratum shares rest on no audit: kept, and re-derived by verify
    names = {q["quantity"] for q in group["quantities"]}
    assert {"tail_success_share", "tail_failure_share"} <= names
    assert not any(n.startswith("mode_tail_") for n in names)


def test_item_16_and_the_tail_shares_across_seeds(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """M, T, M/T, item 16's tail share and item 7's stratum shares across seeds: each seed's
    value is the report's own number for it and a ratio of sums of per-question sums taken
    here by plain loops over tokens; the mean and SD are of those, and the interval is the
    hierarchical bootstrap of exactly those per-question sums (the questions that add to a
    denominator); the bundle path (``rcea report verify``) recomputes the same."""
    recs = _study(engine, tmp_path)
    _add_tail_sums(engine, recs, SEEDS)
    report, bundle = _both(engine)
    assert report == bundle
    group = next(g for g in report["replicates"]["groups"] if g["step"] == 10)
    by_name = {q["quantity"]: q for q in group["quantities"]}
    own = {(e["run"], e["step"]): e for e in report["mode_tail"]}
    item7 = {}
    loops = {}
    for seed in SEEDS:
        loops[seed] = _loop_question_sums(*_tokens(recs, seed))
        ck, traj, logp = _tokens(recs, seed)
        res = reward_stratified_tail(
            [r["question_id"] for r in ck], [r["reward"] for r in ck], traj, logp
        )
        item7[seed] = {
            "tail_success_share": res.success.share,
            "tail_failure_share": res.failure.share,
        }
    cases = {
        # quantity: (the report entry's field, columns, denominators, pooling)
        "mode_tail_majority_mass_share": ("majority_mass_share", (0, 1), (1,)),
        "mode_tail_majority_token_share": ("majority_token_share", (2, 3), (1,)),
        "mode_tail_concentration_ratio": ("concentration_ratio", (0, 1, 2, 3), (1, 3)),
        "mode_tail_success_tail_majority_share": ("success_tail_majority_share", (4, 5), (1,)),
        "tail_success_share": (None, (5, 6), (1,)),
        "tail_failure_share": (None, (7, 8), (1,)),
    }
    for name, (field, cols, dens) in cases.items():
        q = by_name[name]
        assert q["statistic"] == ("ratio_of_ratios" if len(cols) == 4 else "ratio_of_sums")
        assert q["depends_on"] == ([] if field is None else ["partition", "validity"])
        rows = {
            s: [
                [loops[s][x][c] for c in cols]
                for x in sorted(loops[s])
                if any(loops[s][x][cols[d]] > 0 for d in dens)
            ]
            for s in SEEDS
        }
        want = []
        for s in SEEDS:
            sums = [sum(r[j] for r in rows[s]) for j in range(len(cols))]
            ratio = sums[0] / sums[1]
            want.append(ratio / (sums[2] / sums[3]) if len(cols) == 4 else ratio)
        got = [v["value"] for v in q["seeds"]]
        assert got == pytest.approx(want, rel=1e-9), name
        assert [v["n_questions"] for v in q["seeds"]] == [len(rows[s]) for s in SEEDS]
        for s, v in zip(SEEDS, got, strict=True):  # the report's own number for that seed
            mine = own[(f"grpo [train seed {s}]", 10)][field] if field else item7[s][name]
            assert v == pytest.approx(mine, rel=1e-9), name
        assert q["mean"] == pytest.approx(np.mean(want), rel=1e-9)
        assert q["between_seed_sd"] == pytest.approx(np.std(want, ddof=1), rel=1e-9)
        ref = across_seeds(
            rows, statistic=q["statistic"], n_boot=N_BOOT, seed=report["parameters"]["seed"]
        )
        assert (q["ci_low"], q["ci_high"]) == pytest.approx((ref.ci_low, ref.ci_high), rel=1e-9)
    med = by_name["mode_tail_question_ratio_median"]
    for s, v in zip(SEEDS, med["seeds"], strict=True):
        ratios = [
            (r[0] / r[1]) / (r[2] / r[3])
            for x, r in sorted(loops[s].items())
            if len({m["mode"] for m in recs if m["train_seed"] == s and m["step"] == 10
                    and m["question_id"] == x and m["reward"] == 1}) > 1 and r[1] > 0
        ]  # fmt: skip
        assert v["value"] == pytest.approx(float(np.median(ratios)), rel=1e-9)
        entry = own[(f"grpo [train seed {s}]", 10)]
        assert v["value"] == pytest.approx(entry["question_ratio_quartiles"][1], rel=1e-12)
    # the page lists the new rows
    from rcea.study.report.html import render_html

    report["generated_at"] = "now"
    page = render_html(report, scope="full", figures={}, hashes={})
    assert "mode_tail_concentration_ratio" in page and "tail_success_share" in page


def test_the_seeds_of_one_run_are_one_point_of_the_association(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Three seeds of grpo: one point of the retention–pass@k association (n = 1, the
    mean of the seeds' values, n_seeds 3), not three; each seed keeps its row."""
    _study(engine, tmp_path)
    report, _ = _both(engine)
    assoc = report["association"]
    fit = assoc["by_model"]["tiny"]
    assert fit["methods"] == ["grpo"] and fit["n"] == 1 and fit["n_seeds"] == {"grpo": 3}
    assert [r["point"] for r in assoc["rows"]] == ["grpo"] * 3
    assert [r["method"] for r in assoc["rows"]] == [f"grpo [train seed {s}]" for s in SEEDS]
    from rcea.study.report.html import render_html

    report["generated_at"] = "now"
    page = render_html(report, scope="full", figures={}, hashes={})
    assert "grpo (mean of 3 seeds)" in page


# the cross-run statistics on constructed points: run a has two training seeds
SEEDED = {"a [train seed 1]": ("a", 1), "a [train seed 2]": ("a", 2)}
#: label → (retention, pass@k, endpoint entropy, greedy accuracy)
POINTS = {
    "a [train seed 1]": (0.2, 0.5, 1.0, 0.30),
    "a [train seed 2]": (0.4, 0.7, 0.6, 0.50),
    "b": (0.5, 0.4, 0.9, 0.20),
    "c": (0.1, 0.2, 0.3, 0.60),
    "d": (0.9, 0.8, 0.7, 0.35),
}


def _point_checkpoints() -> list[dict[str, Any]]:
    return [
        {"run": lab, "model": "m", "step": 10, "reported": True, "retention": {"retention": v[0]}}
        for lab, v in POINTS.items()
    ]


def _point_passk() -> list[dict[str, Any]]:
    return [
        {"run": lab, "model": "m", "step": 10, "benchmark": "B", "pass_at_k": {"pass_at_4": v[1]}}
        for lab, v in POINTS.items()
    ]


@pytest.mark.parametrize(
    ("failed", "a_point", "a_seeds"),
    [
        (set(), (0.3, 0.6), 2),  # the mean of the two seeds
        ({("a [train seed 2]", "m")}, (0.2, 0.5), 1),  # a failed seed is left out
        ({("a [train seed 1]", "m"), ("a [train seed 2]", "m")}, None, 2),  # all failed
    ],
)
def test_the_association_takes_two_seeds_of_one_run_as_one_point(
    failed: set[tuple[str, str]], a_point: tuple[float, float] | None, a_seeds: int
) -> None:
    from scipy import stats  # an oracle, imported where it is used

    from rcea.study.report.measured import association

    res = association(
        _point_checkpoints(),
        _point_passk(),
        failed,
        lambda r, m: r,
        k=4,
        benchmark="B",
        identities=SEEDED,
    )
    assert res is not None
    fit = res["by_model"]["m"]
    others = {k: v for k, v in POINTS.items() if k in "bcd"}
    xs = [v[0] for v in others.values()]
    ys = [v[1] for v in others.values()]
    if a_point is None:
        assert fit["methods"] == ["b", "c", "d"] and fit["excluded"] == ["a"]
    else:
        assert fit["methods"] == ["a", "b", "c", "d"] and fit["excluded"] == []
        xs, ys = [a_point[0], *xs], [a_point[1], *ys]
    assert fit["n"] == len(xs)  # two seeds of a: one point, not two
    assert fit["n_seeds"] == {"a": a_seeds, "b": 1, "c": 1, "d": 1}
    assert fit["rho"] == pytest.approx(stats.spearmanr(xs, ys).statistic, rel=1e-12)
    assert [r["point"] for r in res["rows"]] == ["a", "a", "b", "c", "d"]


def test_the_ordering_takes_two_seeds_of_one_run_as_one_endpoint() -> None:
    from scipy import stats  # an oracle, imported where it is used

    from rcea.study.report.entropy_law import (
        Trace,
        order_sentence,
        ordering_results,
        study_endpoints,
    )

    traces = [
        Trace(run=lab, model="m", entropy={"global": [(10, v[2])]}) for lab, v in POINTS.items()
    ]
    greedy = [
        {"run": lab, "model": "m", "step": 10, "accuracy": {"B": v[3]}, "macro_accuracy": v[3]}
        for lab, v in POINTS.items()
    ]
    rows, _ = study_endpoints(
        traces,
        _point_checkpoints(),
        greedy,
        _point_passk(),
        set(),
        benchmark="B",
        k=4,
        identities=SEEDED,
    )
    assert [(r["run"], r["n_seeds"]) for r in rows] == [("a", 2), ("b", 1), ("c", 1), ("d", 1)]
    assert rows[0]["entropy"] == pytest.approx(0.8) and rows[0]["greedy_accuracy"] == 0.4
    res = ordering_results(rows)["by_model"]["m"]
    assert res["n_seeds"] == {"a": 2, "b": 1, "c": 1, "d": 1}
    greedy_test = next(m for m in res["metrics"] if m["metric"] == "greedy_accuracy")
    assert greedy_test["n"] == 4 and greedy_test["runs"] == ["a", "b", "c", "d"]
    h = [0.8, 0.9, 0.3, 0.7]
    acc = [0.4, 0.2, 0.6, 0.35]
    assert greedy_test["kendall_tau"] == pytest.approx(stats.kendalltau(h, acc).statistic)
    # the sentence the report and the demo print says which endpoint is a mean of seeds
    assert "(n = 4; the mean of the seeds for a of 2, " in order_sentence(ordering_results(rows))
