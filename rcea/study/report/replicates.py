"""The report's ``replicates`` section: several training seeds (docs/estimators.md item 17).

A checkpoint is (run, model, training seed, step). The report keys every section by (run,
model, step); a run imported with a training seed enters those keys under its *seeded
label* :func:`seeded_run` — ``grpo [train seed 1]`` — so every section shows each seed as
its own run and no checkpoint's number pools seeds (failure, milestones and retention's
base are per seed, as item 17 asks); the cross-run statistics take the seeds of one run as
one point (:func:`seed_points`). This module maps the labels back to (run, training seed) and,
per (run, model, step) with seeded checkpoints, aggregates across the seeds
(:func:`rcea.audits.replicates.across_seeds`: mean, between-seed SD, hierarchical bootstrap
interval over seeds, then questions within seed) for the paired ρ_H, mode retention,
within-mode realization entropy W, macro pass@k, item 16's M, T, M/T, success-tail
majority share and median M_x/T_x, and item 7's tail share of each reward stratum — each
from the per-question values (for a ratio of sums: the per-question sums) the report's own
per-seed number is computed from. With fewer than two seeds the section says "single seed"
and shows no across-seed interval.

Kept apart from :mod:`rcea.study.report.build`, which calls :func:`replicates_section` once
after its checkpoint loop.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from html import escape
from typing import Any

import numpy as np
from pydantic import Field

from rcea.audits.mode_tail import ModeTailResult, tail_question_sums
from rcea.audits.modes import RarefiedRetention
from rcea.audits.passk import pass_at_k
from rcea.audits.realization import RealizationReport
from rcea.audits.replicates import across_seeds
from rcea.study.report.estimates import (
    ModesByCheckpoint,
    realization_table,
    retention_table,
    rows_entropy,
)
from rcea.study.report.mode_tail import payload_sums
from rcea.study.report.sections import Section

Key = tuple[str, str, int]

SINGLE_SEED = (
    "single seed: no (run, model, step) has two or more training seeds, so no between-seed "
    "spread or across-seed interval is shown; every number is one training run's"
)


def seeded_run(run: str, train_seed: int | None) -> str:
    """The run label a checkpoint of training seed ``train_seed`` is keyed by in the
    report: the run itself without one, else ``RUN [train seed N]``."""
    return run if train_seed is None else f"{run} [train seed {train_seed}]"


def measurement_run(run: str, train_seed: int) -> str:
    """The run label of a stored measurement (its ``train_seed`` -1 = none)."""
    return seeded_run(run, None if train_seed < 0 else train_seed)


def run_of(label: str, train_seed: int | None) -> str:
    """The run name of a seeded label (:func:`seeded_run`'s inverse given the seed)."""
    return label if train_seed is None else label.removesuffix(f" [train seed {train_seed}]")


def check_labels(pairs: Iterable[tuple[str, int | None]]) -> dict[str, tuple[str, int]]:
    """The seeded labels of (run, training seed) pairs → (run, seed); ``ValueError`` when a
    run name without a seed is spelt like another run's seeded label (the two would be
    pooled under one key)."""
    pairs = set(pairs)
    plain = {run for run, seed in pairs if seed is None}
    out: dict[str, tuple[str, int]] = {}
    for run, seed in sorted(pairs, key=lambda p: (p[0], -1 if p[1] is None else p[1])):
        if seed is None:
            continue
        label = seeded_run(run, seed)
        if label in plain:
            raise ValueError(
                f"run {label!r} (no training seed) has the report label of run {run!r} at "
                f"training seed {seed}: rename the run, or give it its training seed"
            )
        out[label] = (run, seed)
    return out


def run_name(identities: Mapping[str, tuple[str, int]], label: str) -> str:
    """The run of a report label (a seeded label's run, else the label itself)."""
    return identities[label][0] if label in identities else label


def seed_points(rows: Iterable[dict[str, Any]], values: Iterable[str]) -> list[dict[str, Any]]:
    """The points of a cross-run statistic (the retention–pass@k association, the RQ1
    ordering): the training seeds of one run are one point, not one each. ``rows``: one per
    training run at its reported checkpoint, each with ``run`` (the run, not its seeded
    label), ``model``, ``failed`` and ``values``; out: one row per (run, model) in first-seen
    order with each value the mean over its seeds that did not fail and have it (``None``
    when none has; NaN counts as not had), ``failed`` when every seed failed (then the
    mean is over them all: the point is left out either way) and ``n_seeds``, the seeds
    averaged. A run without a training seed is one point of one seed."""
    names = list(values)
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["run"], r["model"]), []).append(r)
    out = []
    for (run, model), rs in groups.items():
        kept = [r for r in rs if not r["failed"]] or rs
        point: dict[str, Any] = {
            "run": run,
            "model": model,
            "failed": all(r["failed"] for r in rs),
            "n_seeds": len(kept),
        }
        for name in names:
            have = [float(v) for r in kept if (v := r.get(name)) is not None and v == v]
            point[name] = sum(have) / len(have) if have else None
        out.append(point)
    return out


def seeded_columns(cols: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """Record columns (``rcea stats`` on a file) with each run that has a training seed
    renamed to its seeded label, so that a file's seeds are separate checkpoints there too;
    ``ValueError`` on a label collision (:func:`check_labels`)."""
    seeds = cols.get("train_seed") or [None] * len(cols["run"])
    check_labels(zip(cols["run"], seeds, strict=True))
    cols["run"] = [seeded_run(r, t) for r, t in zip(cols["run"], seeds, strict=True)]
    return cols


class SeedValue(Section):
    """One training seed's estimate of a quantity."""

    train_seed: int = Field(description="the training seed")
    value: float | None = Field(description="its estimate (None: undefined for this seed)")
    n_questions: int = Field(description="the questions it rests on")


class AcrossSeedQuantity(Section):
    """A quantity across the training seeds of one (run, model, step)."""

    quantity: str = Field(
        description="paired_ratio (ρ_H), retention, within_mode_entropy (W), pass_at_K "
        "(every k the passk measurement lists), item 16's mode_tail_majority_mass_share (M), "
        "mode_tail_majority_token_share (T), mode_tail_concentration_ratio (M/T), "
        "mode_tail_success_tail_majority_share and mode_tail_question_ratio_median (of "
        "M_x/T_x), or item 7's tail_success_share and tail_failure_share"
    )
    benchmark: str | None = Field(default=None, description="pass@k only: the benchmark")
    statistic: str = Field(
        description="how a seed pools its questions: geometric_mean (ρ_H), macro_mean, "
        "median, ratio_of_sums or ratio_of_ratios (M/T) of per-question sums"
    )
    depends_on: list[str] = Field(
        description="the audits it rests on, as the per-seed numbers' (retention, W and "
        "item 16: the partition, and validity when a judge filters successes; [] otherwise)"
    )
    seeds: list[SeedValue] = Field(description="each seed's estimate")
    n_seeds: int = Field(description="seeds with an estimate")
    single_seed: bool = Field(description="fewer than two seeds: no spread, no interval")
    mean: float | None = Field(description="mean of the seeds' estimates")
    between_seed_sd: float | None = Field(description="their SD (n − 1); None with one seed")
    ci_low: float | None = Field(
        description="hierarchical bootstrap percentile interval (seeds, then questions)"
    )
    ci_high: float | None = Field(description="upper end of the interval")
    confidence: float = Field(description="the interval's level")
    n_boot: int = Field(description="bootstrap replicates B")
    seed: int = Field(description="the bootstrap's random seed")
    n_boot_nonfinite: int = Field(description="replicates left out (undefined)")


class SeedGroup(Section):
    """The seeded checkpoints of one (run, model, step)."""

    run: str = Field(description="run (without its seed)")
    model: str = Field(description="model (scale)")
    step: int = Field(description="training step")
    train_seeds: list[int] = Field(description="its training seeds")
    labels: list[str] = Field(description="their run labels in the other sections")
    single_seed: bool = Field(description="one training seed only")
    quantities: list[AcrossSeedQuantity] = Field(description="the across-seed aggregates")


class SeededRun(Section):
    """A run label of the other sections that names one training seed of a run."""

    label: str = Field(description="the label (``RUN [train seed N]``)")
    run: str = Field(description="the run")
    train_seed: int = Field(description="the training seed")


class ReplicatesSection(Section):
    """Item 17: the training seeds of the study's runs and the across-seed aggregates."""

    runs: list[SeededRun] = Field(description="each seeded run label with its run and seed")
    single_seed: bool = Field(description="no (run, model, step) has two or more seeds")
    sentence: str | None = Field(description="'single seed: …' when single_seed")
    groups: list[SeedGroup] = Field(description="per (run, model, step) with a training seed")


def _aggregate(
    name: str,
    statistic: str,
    seeds: list[int],
    values: dict[int, list[Any]],
    settings: dict[str, Any],
    extra: dict[str, Any],
) -> dict[str, Any] | None:
    """One quantity across ``seeds`` (a seed without values has no estimate); ``None`` when
    no seed has the quantity (e.g. no mode data): not listed."""
    if not any(values.values()):
        return None
    res = across_seeds(
        {s: np.asarray(values.get(s, []), dtype=float) for s in seeds},
        statistic=statistic,
        **settings,
    )
    return {"quantity": name, **extra, **res.to_dict()}


#: Item 16's numbers across seeds: quantity → (pooling, the ``question_sums`` columns of a
#: question's row, the denominators' positions among them: a question enters when one of
#: its denominators is positive, i.e. when it adds to the pooled ratio).
MODE_TAIL_RATIOS: dict[str, tuple[str, tuple[int, ...], tuple[int, ...]]] = {
    "mode_tail_majority_mass_share": ("ratio_of_sums", (0, 1), (1,)),
    "mode_tail_majority_token_share": ("ratio_of_sums", (2, 3), (1,)),
    "mode_tail_concentration_ratio": ("ratio_of_ratios", (0, 1, 2, 3), (1, 3)),
    "mode_tail_success_tail_majority_share": ("ratio_of_sums", (4, 5), (1,)),
}


def _ratio_rows(
    sums: Mapping[str, tuple[float, ...]], columns: tuple[int, ...], denominators: tuple[int, ...]
) -> list[list[float]]:
    """Per question (sorted), its sums in ``columns``, for the questions with a positive
    denominator (a question adding zero to every sum is no draw of the ratio)."""
    rows = ([sums[q][c] for c in columns] for q in sorted(sums))
    return [r for r in rows if any(r[d] > 0 for d in denominators)]


def replicates_section(
    identities: Mapping[str, tuple[str, int]],
    keys: Iterable[Key],
    *,
    paired: Mapping[Key, Mapping[Any, float]],
    retention: Mapping[Key, RarefiedRetention],
    realization: Mapping[Key, RealizationReport],
    passk: Iterable[dict[str, Any]],
    mode_tail: Mapping[Key, ModeTailResult],
    tail_trajectories: Iterable[dict[str, Any]],
    n_boot: int,
    seed: int,
    confidence: float,
    mode_deps: list[str],
) -> dict[str, Any]:
    """The section (:class:`ReplicatesSection` as JSON) from the report's per-seed results:
    ``paired`` (ρ_H's per-question ratios), ``retention``, ``realization`` and item 16's
    ``mode_tail`` results (their per-question sums) per checkpoint key (a seeded label's),
    the ``passk`` measurements (their per-question (n, c), at every k it lists) and the
    ``tail_trajectories`` measurements (item 7's share of each stratum per question);
    ``mode_deps`` is what the mode numbers depend on (retention, W and item 16 carry it)."""
    groups: dict[Key, dict[int, Key]] = defaultdict(dict)
    for key in keys:
        label, model, step = key
        if label in identities:
            run, train_seed = identities[label]
            groups[(run, model, step)][train_seed] = key
    passk_by: dict[Key, dict[str, dict[str, Any]]] = defaultdict(dict)
    for m in passk:
        passk_by[(m["run"], m["model"], m["step"])][m["key"]] = m["payload"]
    # item 7's tail share per stratum (the failure stratum where the sums carry it)
    tails: dict[str, dict[Key, dict[str, tuple[float, float]]]] = {
        "tail_success_share": {},
        "tail_failure_share": {},
    }
    seeded = {c for by_seed in groups.values() for c in by_seed.values()}
    for m in tail_trajectories:
        p, key = m["payload"], (m["run"], m["model"], m["step"])
        if key not in seeded:  # only seeded checkpoints are aggregated: most reports have none
            continue
        sums = payload_sums(p)
        tails["tail_success_share"][key] = tail_question_sums(p["question_id"], p["reward"], sums)
        if sums.failure_tail_positive_mass is not None:
            tails["tail_failure_share"][key] = tail_question_sums(
                p["question_id"], p["reward"], sums, stratum=0
            )
    settings = {"n_boot": n_boot, "seed": seed, "confidence": confidence}
    out_groups: list[dict[str, Any]] = []
    for (run, model, step), by_seed in sorted(groups.items()):
        seeds = sorted(by_seed)
        # (quantity, pooling, seed → per-question values, extra fields)
        specs: list[tuple[str, str, dict[int, list[Any]], dict[str, Any]]] = [
            (
                "paired_ratio",
                "geometric_mean",
                {s: list(paired.get(by_seed[s], {}).values()) for s in seeds},
                {"depends_on": []},
            ),
            (
                "retention",
                "macro_mean",
                {
                    s: [q.retention for q in retention[c].questions if q.retention is not None]
                    for s, c in by_seed.items()
                    if c in retention
                },
                {"depends_on": mode_deps},
            ),
            (
                "within_mode_entropy",
                "macro_mean",
                {
                    s: [
                        q.within_mode_entropy
                        for q in realization[c].questions
                        if q.eligible and q.within_mode_entropy is not None
                    ]
                    for s, c in by_seed.items()
                    if c in realization
                },
                {"depends_on": mode_deps},
            ),
        ]
        specs += [
            (
                name,
                statistic,
                {
                    s: _ratio_rows(mode_tail[c].question_sums, columns, dens)
                    for s, c in by_seed.items()
                    if c in mode_tail
                },
                {"depends_on": mode_deps},
            )
            for name, (statistic, columns, dens) in MODE_TAIL_RATIOS.items()
        ]
        specs += [
            (
                "mode_tail_question_ratio_median",
                "median",
                {
                    s: list(mode_tail[c].question_ratios.values())
                    for s, c in by_seed.items()
                    if c in mode_tail
                },
                {"depends_on": mode_deps},
            ),
        ]
        specs += [
            (
                name,
                "ratio_of_sums",
                {s: [list(v) for v in pairs[c].values()] for s, c in by_seed.items() if c in pairs},
                {"depends_on": []},
            )
            for name, pairs in tails.items()
        ]
        benchmarks = sorted({b for c in by_seed.values() for b in passk_by.get(c, {})})
        for bench in benchmarks:
            payloads = {s: passk_by[c][bench] for s, c in by_seed.items() if bench in passk_by[c]}
            for k in sorted({int(k) for p in payloads.values() for k in p.get("k") or []}):
                per_q = {
                    s: [
                        pass_at_k(int(q["n"]), int(q["c"]), k)
                        for q in p.get("questions") or []
                        if int(q["n"]) >= k
                    ]
                    for s, p in payloads.items()
                }
                specs.append(
                    (f"pass_at_{k}", "macro_mean", per_q, {"benchmark": bench, "depends_on": []})
                )
        quantities = [
            entry
            for name, statistic, values, extra in specs
            if (entry := _aggregate(name, statistic, seeds, values, settings, extra)) is not None
        ]
        out_groups.append(
            {
                "run": run,
                "model": model,
                "step": step,
                "train_seeds": seeds,
                "labels": [by_seed[s][0] for s in seeds],
                "single_seed": len(seeds) < 2,
                "quantities": quantities,
            }
        )
    single = not any(len(g["train_seeds"]) >= 2 for g in out_groups)
    return {
        "runs": [
            {"label": label, "run": run, "train_seed": s}
            for label, (run, s) in sorted(identities.items())
        ],
        "single_seed": single,
        "sentence": SINGLE_SEED if single else None,
        "groups": out_groups,
    }


#: The benchmark name of pass@k counted from a records file's own trajectories.
RECORDS_BENCHMARK = "records"


def records_passk(
    rows: Mapping[Key, list[dict[str, Any]]], ks: list[int], benchmark: str = RECORDS_BENCHMARK
) -> list[dict[str, Any]]:
    """Each checkpoint's pass@k counts from its records, as a ``passk`` measurement
    (``key`` = ``benchmark``, payload ``k`` and ``questions`` [{question_id, n, c}]):
    per question n its trajectories and c its successes (R = 1)."""
    out = []
    for (run, model, step), ck in rows.items():
        counts: dict[str, list[int]] = {}
        for r in ck:
            nc = counts.setdefault(str(r["question_id"]), [0, 0])
            nc[0] += 1
            nc[1] += int(r["reward"] == 1)
        questions = [{"question_id": q, "n": n, "c": c} for q, (n, c) in sorted(counts.items())]
        out.append(
            {
                "run": run,
                "model": model,
                "step": step,
                "key": benchmark,
                "payload": {"k": list(ks), "questions": questions},
            }
        )
    return out


def records_replicates(
    rows: Mapping[Key, list[dict[str, Any]]],
    identities: Mapping[str, tuple[str, int]],
    modes: ModesByCheckpoint,
    *,
    ks: list[int],
    k_min: int,
    n_min: int,
    n_draws: int,
    base_step: int,
    base_run: str,
    n_boot: int,
    seed: int,
    confidence: float,
) -> tuple[dict[str, Any], list[str]]:
    """Item 17 on a records file (``rcea stats seeds``): :func:`replicates_section` from
    the per-seed results the report computes with the same rules — ρ_H's per-question
    ratios (:func:`rcea.study.report.estimates.rows_entropy`), retention
    (``retention_table`` on ``modes``, every model against its own base), W
    (``realization_table``) and pass@k of each checkpoint's own trajectories
    (:func:`records_passk`) — and notes naming what could not be computed and why.
    ``rows``: trajectory dicts per checkpoint under their seeded labels; ``modes``: the
    included trajectories' labels (empty: no mode data, so no retention and no W)."""
    notes: list[str] = []
    paired: dict[Key, Mapping[Any, float]] = {}
    failed: dict[Key, str] = {}
    for key, ck in rows.items():
        if key[0] not in identities:
            continue  # no training seed: in no group
        try:
            report = rows_entropy(ck, seed=seed, k_min=k_min, n_boot=n_boot, confidence=confidence)
        except ValueError as exc:
            failed[key] = str(exc)
            continue
        paired[key] = report.paired.question_ratios
    if failed:
        (run, model, step), why = next(iter(sorted(failed.items())))
        notes.append(
            f"paired_ratio: not computed at {len(failed)} checkpoint(s) (first: {run} "
            f"{model} step {step}: {why})"
        )
    retention: dict[Key, RarefiedRetention] = {}
    realization: dict[Key, RealizationReport] = {}
    if modes:
        for row in retention_table(
            modes,
            base_step=base_step,
            base_run=base_run,
            seed=seed,
            n_min=n_min,
            n_draws=n_draws,
            n_boot=n_boot,
            confidence=confidence,
        ):
            if row.result is not None:
                retention[row.key] = row.result
        try:
            table = realization_table(
                [r for ck in rows.values() for r in ck],
                k_min=k_min,
                base_step=base_step,
                base_run=base_run,
            )
        except ValueError as exc:  # no ℓ or token entropies: W is undefined, the rest stands
            notes.append(f"within_mode_entropy: not computed: {exc}")
        else:
            realization = {row.key: row.report for row in table}
    else:
        notes.append("retention, within_mode_entropy: not computed: no record has a mode label")
    passk = records_passk(rows, ks)
    seeded = [m for m in passk if m["run"] in identities]
    for k in ks:
        if seeded and not any(q["n"] >= k for m in seeded for q in m["payload"]["questions"]):
            notes.append(f"pass_at_{k}: not computed: no question has {k} or more trajectories")
    section = replicates_section(
        identities,
        rows,
        paired=paired,
        retention=retention,
        realization=realization,
        passk=passk,
        mode_tail={},
        tail_trajectories=[],
        n_boot=n_boot,
        seed=seed,
        confidence=confidence,
        mode_deps=["partition", "validity"],
    )
    if not identities:
        notes.append("no record carries a train_seed: every run is one training run")
    return section, notes


def strip_audited_replicates(sec: dict[str, Any] | None) -> dict[str, Any] | None:
    """``sec`` without the aggregates that rest on an audit (an entropy-only bundle)."""
    if sec is None:
        return None
    for g in sec["groups"]:
        g["quantities"] = [q for q in g["quantities"] if not q["depends_on"]]
    return sec


def estimator_name(q: dict[str, Any]) -> str:
    """How an across-seed quantity is named on every surface: the section's ``quantity``,
    with its benchmark for pass@k (``pass_at_4 (aime)``)."""
    return str(q["quantity"]) + (f" ({q['benchmark']})" if q.get("benchmark") else "")


#: the aggregates each estimator gives ``quantities[]`` (section ``replicates``, key = its
#: :func:`estimator_name`): (name, the section's field)
AGGREGATES = (("across_seed_mean", "mean"), ("across_seed_sd", "between_seed_sd"))


def replicates_quantities(
    sec: dict[str, Any] | None, labelled: list[dict[str, Any]], add: Callable[..., None]
) -> None:
    """The section's aggregates through the quantity list's ``add``: per (run, model, step)
    and estimator with two or more seeds (whatever quantities the section lists), the
    across-seed mean with its hierarchical interval and the between-seed SD, n = the seeds
    with an estimate, resting on what the section says (``depends_on``). Averaging seeds
    lifts no floor: the aggregate carries the evidence of each seed whose own number in
    ``labelled`` (the quantities listed so far: the same name, or ``<section>_<name>``,
    at the seed's run label, model and step, keyed by the benchmark) is below its floor."""
    own: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = defaultdict(dict)
    for q in labelled:
        own[(q["run"], q["model"], q["step"], q["key"])][q["name"]] = q
    for g in (sec or {}).get("groups", []):
        where = {"run": g["run"], "model": g["model"], "step": g["step"]}
        for q in g["quantities"]:
            if q["single_seed"]:  # one seed: its number is the run's own, listed already
                continue
            evidence = []
            for label, train_seed in zip(g["labels"], g["train_seeds"], strict=True):
                mine = own.get((label, g["model"], g["step"], q.get("benchmark")), {})
                found = mine.get(q["quantity"]) or next(
                    (v for n, v in mine.items() if n.endswith("_" + q["quantity"])), None
                )
                if found and found.get("evidence"):
                    why = str(found["evidence"]).removeprefix("insufficient evidence: ")
                    evidence.append(f"train seed {train_seed}: {why}")
            kw = {
                "key": estimator_name(q),
                "n": q["n_seeds"],
                "evidence": "insufficient evidence at " + "; ".join(evidence) if evidence else None,
                **where,
            }
            ci = (q["ci_low"], q["ci_high"])
            for name, fld in AGGREGATES:
                extra = {"ci": ci} if fld == "mean" else {}
                add(name, "replicates", q[fld], q["depends_on"], **extra, **kw)


def replicates_rows(sec: dict[str, Any] | None) -> tuple[list[str], list[list[Any]]]:
    """The section as one table (header, rows): per (run, model, step) and quantity, each
    seed's value, then the across-seed mean, SD and interval."""
    header = ["run", "model", "step", "quantity", "per seed", "mean", "between-seed SD", "95% CI"]
    rows: list[list[Any]] = []
    for g in (sec or {}).get("groups", []):
        for q in g["quantities"]:
            name = estimator_name(q)
            per_seed = "; ".join(
                f"seed {v['train_seed']}: " + ("n/a" if v["value"] is None else f"{v['value']:.4g}")
                for v in q["seeds"]
            )
            ci = "single seed" if q["single_seed"] else _interval(q["ci_low"], q["ci_high"])
            rows.append(
                [
                    g["run"],
                    g["model"],
                    g["step"],
                    name,
                    per_seed,
                    q["mean"],
                    q["between_seed_sd"],
                    ci,
                ]
            )
    return header, rows


def _interval(lo: float | None, hi: float | None) -> str:
    return "n/a" if lo is None or hi is None else f"[{lo:.4g}, {hi:.4g}]"


def replicates_html(
    sec: dict[str, Any] | None, table: Callable[[list[str], list[list[Any]]], str]
) -> list[str]:
    """The report page's part for item 17 (``table`` renders a table as the page does)."""
    if not sec:
        return []
    out = ["<h2>Training seeds (item 17)</h2>"]
    if sec["runs"]:
        out.append(
            "<p>Each training seed is its own run in the sections above ("
            + ", ".join(f"<code>{escape(r['label'])}</code>" for r in sec["runs"])
            + "); seeds are never pooled. Across seeds: the mean, the between-seed SD and a "
            "hierarchical bootstrap interval (seeds, then questions within seed).</p>"
        )
    if sec["sentence"]:
        out.append(f"<p>{escape(sec['sentence'][0].upper() + sec['sentence'][1:])}.</p>")
    header, rows = replicates_rows(sec)
    if rows:
        out.append(table(header, rows))
    return out
