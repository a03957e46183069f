"""``rcea stats ...``: the RCEA estimators on files (records JSONL/Parquet, CSVs).

These commands are the contract for users with their own data: they read files, call the
pure functions in ``audits`` and print tables or ``--json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from rcea.app.cli import stats_law
from rcea.app.cli.common import domain_errors, emit
from rcea.app.cli.exit_codes import outcome_code
from rcea.app.cli.options import JSON_OPTION
from rcea.audits.covariance import FIT_SUMMARY, covariance_fit, covariance_fit_by_group
from rcea.audits.entropy import outcome_report
from rcea.audits.passk import macro_pass_at_k
from rcea.audits.rubric import load_rubric
from rcea.audits.sequential import planned_gate
from rcea.audits.thresholds import GateThresholds
from rcea.study.report.compute import FILL_TOKEN_ENTROPIES
from rcea.study.report.estimates import realization_table, retention_table, rows_entropy
from rcea.study.report.files import (
    POOLED,
    InputError,
    checkpoint_modes,
    checkpoint_rows,
    has_modes,
    load_records,
    partition_coverage,
    read_pairs,
    read_passk,
    read_tail_trajectories,
    read_transitions,
    records_rows,
    require_validity,
    seed_identities,
    select_checkpoint,
)
from rcea.study.report.mode_tail import records_mode_tail
from rcea.study.report.replicates import records_replicates, replicates_rows
from rcea.study.report.sections import RetentionSection

stats_app = typer.Typer(
    rich_markup_mode=None,
    help="RCEA estimators on files (items 1-11 and 15-18 of docs/estimators.md).",
    no_args_is_help=True,
)


def _run(as_json: bool, fn: Any) -> None:
    with domain_errors(as_json, InputError):
        fn()


# --------------------------------------------------------------------------- entropy


MODEL_OPTION = typer.Option(
    None, "--model", help="model (scale) label; needed when the file holds several"
)


def _outcome_only(
    records: Path,
    cols: dict[str, list[Any]],
    idx: list[int],
    n_missing: int,
    *,
    k_min: int,
    as_json: bool,
) -> None:
    """``rcea stats entropy`` on records without token entropies: the rewards-only numbers
    (rcea.audits.entropy.outcome_report) and which are missing."""

    try:
        out = outcome_report(
            [cols["question_id"][i] for i in idx], [cols["reward"][i] for i in idx], k_min=k_min
        )
    except ValueError as exc:
        raise InputError(f"{records}: {exc}") from None
    models = sorted({cols["model"][i] for i in idx})
    data: dict[str, Any] = {
        "run": cols["run"][idx[0]],
        "model": models[0] if len(models) == 1 else POOLED,
        "step": cols["step"][idx[0]],
        "outcome_only": True,
        **out.to_dict(),
        "n_missing_token_entropies": n_missing,
        "note": f"{n_missing} of {len(idx)} trajectories lack token entropies: "
        + FILL_TOKEN_ENTROPIES,
    }

    def show() -> None:
        _print_flat(
            f"outcome report (rewards only) — run {data['run']}, model {data['model']}, "
            f"step {data['step']}",
            data,
            (
                "n_questions",
                "n_trajectories",
                "accuracy",
                "mean_accuracy",
                "mean_outcome_entropy",
                "sequence_outcome_term",
                "coverage_success",
                "coverage_failure",
                "share_solved",
                "share_mixed",
                "k_min",
                "n_missing_token_entropies",
            ),
        )
        typer.echo(data["note"])

    emit(data, as_json, show)


@stats_app.command("entropy")
def entropy(
    records: Path = typer.Argument(..., help="records file (.jsonl or .parquet)"),
    step: int = typer.Option(None, help="checkpoint step (needed if the file has several)"),
    run: str = typer.Option(None, help="run name (needed if the file has several)"),
    model: str = MODEL_OPTION,
    pool_models: bool = typer.Option(
        False,
        "--pool-models",
        help="pool every model's records at the chosen (run, step) into one checkpoint "
        "(the output says pooled and lists the models)",
    ),
    k_min: int = typer.Option(8, help="K_min gate for every conditional quantity"),
    n_boot: int = typer.Option(10_000, help="bootstrap resamples for the paired CI"),
    seed: int = typer.Option(0, help="bootstrap seed (recorded in the output)"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Outcome entropy, sequence decomposition and reward-conditioned token entropy
    (broad and paired ratios, sign test) for one checkpoint (run, model, step).

    A file with several models needs ``--model`` (or ``--pool-models``, labelled)."""

    def go() -> None:

        cols = load_records(records)
        if pool_models and model is not None:
            raise InputError("--pool-models and --model exclude each other")
        idx = select_checkpoint(records, cols, run=run, model=model, step=step, pool=pool_models)
        n_missing = sum(cols["mean_token_entropy"][i] is None for i in idx)
        if n_missing:  # rewards only (an imported dump): the outcome numbers, said so
            _outcome_only(records, cols, idx, n_missing, k_min=k_min, as_json=as_json)
            return
        try:
            report = rows_entropy(records_rows(cols, idx), seed=seed, k_min=k_min, n_boot=n_boot)
        except ValueError as exc:
            raise InputError(f"{records}: {exc}") from None
        data = report.to_dict()
        models = sorted({cols["model"][i] for i in idx})
        data["run"] = cols["run"][idx[0]]
        data["model"] = models[0] if len(models) == 1 else POOLED
        data["step"] = cols["step"][idx[0]]
        if pool_models:
            data["pooled_models"] = models

        def show() -> None:
            title = (
                f"entropy report — run {data['run']}, model {data['model']}, step {data['step']}"
            )
            if pool_models:
                title += f" (POOLED over models {', '.join(models)})"
            _print_flat(
                title,
                data,
                (
                    "n_questions",
                    "quantity",
                    "n_truncated",
                    "mean_outcome_entropy",
                    "mean_sequence_entropy",
                    "max_abs_residual",
                    "broad_ratio",
                    "coverage_success",
                    "coverage_failure",
                    "n_paired_questions",
                    "paired_ratio",
                    "paired_ci_low",
                    "paired_ci_high",
                    "n_boot_degenerate",
                    "direction_share",
                    "sign_test_p",
                    "k_min",
                    "n_boot",
                    "seed",
                ),
            )
            _echo_warnings(data)

        emit(data, as_json, show)

    _run(as_json, go)


def _echo_warnings(data: dict[str, Any]) -> None:
    for w in data.get("warnings") or []:
        typer.echo(f"warning: {w}")


# --------------------------------------------------------------------------- retention


@stats_app.command("retention")
def retention(
    records: Path = typer.Argument(..., help="records with mode and validity"),
    base_step: int = typer.Option(0, help="the base checkpoint's step"),
    base_run: str = typer.Option(
        "base", help="the run holding a model's shared base checkpoint (when a run has none)"
    ),
    model: str = MODEL_OPTION,
    all_models: bool = typer.Option(
        False,
        "--all-models",
        help="every model of the file, each against its own base (rows name the model)",
    ),
    run: str = typer.Option(None, help="only this run's checkpoints"),
    step: int = typer.Option(None, help="only checkpoints at this step"),
    n_min: int = typer.Option(8, help="eligibility: min(m_0, m_t) >= n_min"),
    n_draws: int = typer.Option(20, help="rarefaction draws per checkpoint"),
    n_boot: int = typer.Option(10_000, help="question-bootstrap resamples"),
    seed: int = typer.Option(0, help="seed of the draws and the bootstrap"),
    draws: bool = typer.Option(
        False, "--draws", help="include the per-question rarefaction draws in --json output"
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Rarefied effective-mode retention of every (run, model, step) against the base of
    the same model: that run's checkpoint at the base step, else run ``--base-run`` of
    that model. A model without a base is reported as such, never compared with another
    model's base. A file with several models needs ``--model`` or ``--all-models``.

    Included trajectories: R = 1, judge-accepted (validity 1; records without a validity
    verdict are refused) and a mode other than empty/``uncertain``."""

    def go() -> None:

        cols = load_records(records)
        modes = checkpoint_modes(records, cols, model=model, all_models=all_models)
        try:
            table = retention_table(
                modes,
                base_step=base_step,
                base_run=base_run,
                seed=seed,
                n_min=n_min,
                n_draws=n_draws,
                n_boot=n_boot,
            )
        except ValueError as exc:
            raise InputError(f"{records}: {exc}") from None
        results = []
        for row in table:
            r_run, r_model, r_step = row.key
            if (run is not None and r_run != run) or (step is not None and r_step != step):
                continue
            results.append(
                {
                    "run": r_run,
                    "model": r_model,
                    "step": r_step,
                    "base": _key_dict(row.base),
                    "error": row.error,
                    **(
                        RetentionSection.of(row.result, row.base, include_draws=draws).to_json()
                        if row.result
                        else {"retention": None}
                    ),
                }
            )

        def show() -> None:
            typer.echo(
                f"{'run':<14}{'model':<10}{'step':>7}{'retention':>11}{'95% CI':>20}"
                f"{'eligible':>10}"
            )
            for r in results:
                if r["error"]:
                    typer.echo(f"{r['run']:<14}{r['model']:<10}{r['step']:>7}  {r['error']}")
                    continue
                ci = f"[{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]"
                typer.echo(
                    f"{r['run']:<14}{r['model']:<10}{r['step']:>7}{fmt(r['retention']):>11}"
                    f"{ci:>20}{r['n_eligible']:>5}/{r['n_denominator']:<4}"
                )
                _echo_warnings(r)

        emit({"base_step": base_step, "base_run": base_run, "results": results}, as_json, show)

    _run(as_json, go)


def _key_dict(key: tuple[str, str, int] | None) -> dict[str, Any] | None:
    return None if key is None else {"run": key[0], "model": key[1], "step": key[2]}


# --------------------------------------------------------------------------- modes


@stats_app.command("modes")
def modes(
    records: Path = typer.Argument(
        ..., help="records with mode, validity, seq_logprob and mean_token_entropy"
    ),
    k_min: int = typer.Option(8, "--k-min", help="a question counts when K_C >= k_min"),
    base_step: int = typer.Option(0, help="the base checkpoint's step (realization retention)"),
    base_run: str = typer.Option(
        "base", help="the run holding a model's shared base checkpoint (when a run has none)"
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Between-mode and within-mode entropy of every (run, model, step)
    (docs/estimators.md item 18): over the accepted, assigned successes C_x of each question,
    the chain rule H(Y|C,x) = H(Z|C,x) + W(x) splits their sequence entropy into the mode
    entropy (which strategy) and the within-mode realization entropy W (how it is worded),
    with the token-level mixture and the rule's residual; macro over questions with
    K_C >= k_min (coverage); realization retention W_t/W_0 against the same model's base."""

    def go() -> None:
        cols = load_records(records)
        try:
            table = realization_table(
                records_rows(cols), k_min=k_min, base_step=base_step, base_run=base_run
            )
        except ValueError as exc:
            raise InputError(f"{records}: {exc}") from None
        out = [
            {
                "run": row.key[0],
                "model": row.key[1],
                "step": row.key[2],
                **{
                    k: getattr(row.report, k)
                    for k in (
                        "mode_entropy",
                        "within_mode_entropy",
                        "within_mode_token_entropy",
                        "sequence_entropy",
                        "decomposition_residual",
                        "token_mixture_residual",
                        "coverage",
                        "n_eligible",
                        "n_with_successes",
                        "share_in_repeated_modes",
                    )
                },
                "k_min": k_min,
                "base": list(row.base) if row.base else None,
                "realization_retention": row.retention.retention if row.retention else None,
                "retention_n_eligible": row.retention.n_eligible if row.retention else None,
                "retention_error": row.retention_error,
            }
            for row in table
        ]

        def show() -> None:
            typer.echo(
                f"{'run':<12}{'model':<10}{'step':>6}  {'H(Z|C)':>8}{'W':>10}{'W_tok':>8}"
                f"{'coverage':>10}{'ret W':>8}"
            )
            for r in out:
                typer.echo(
                    f"{r['run']:<12}{r['model']:<10}{r['step']:>6}  {fmt(r['mode_entropy']):>8}"
                    f"{fmt(r['within_mode_entropy']):>10}{fmt(r['within_mode_token_entropy']):>8}"
                    f"{fmt(r['coverage']):>10}{fmt(r['realization_retention']):>8}"
                )

        emit({"checkpoints": out}, as_json, show)

    _run(as_json, go)


# --------------------------------------------------------------------------- mode-tail

#: The report's ``mode_tail`` keys ``rcea stats mode-tail`` prints (``failed_run`` aside:
#: a file carries no training trace).
MODE_TAIL_KEYS = (
    "quantile",
    "n_trajectories",
    "n_unmatched",
    "n_questions",
    "n_tokens_c",
    "majority_mass_share",
    "majority_token_share",
    "concentration_ratio",
    "success_tail_majority_share",
    "n_success_tail",
    "n_question_ratios",
    "question_ratio_quartiles",
)


@stats_app.command("mode-tail")
def mode_tail(
    records: Path = typer.Argument(..., help="records with mode and validity"),
    tails: Path = typer.Argument(
        ...,
        help="the probe's covariance/tail_trajectories.jsonl (one endpoint's per-trajectory "
        "sums a line)",
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Mode-stratified covariance of every endpoint in TAILS (docs/estimators.md item 16):
    over the accepted, assigned successes C of the endpoint's records (R = 1, validity 1, a
    mode other than empty/``uncertain``, as ``rcea stats modes``) and each question's
    majority mode maj(x) (ties by the labels' sorted order), M = the share of C's positive
    covariance mass on maj(x), T = the share of C's tokens in maj(x), the concentration
    ratio M/T, the share of the success-stratum tail's positive mass on maj(x), and per
    question M_x/T_x (questions with two or more modes) with its quartiles — the report's
    ``mode_tail`` section on the same data. A trajectory of TAILS the records lack counts
    in ``n_unmatched`` and is not in C."""

    def go() -> None:
        cols = load_records(records)
        require_validity(records, cols, list(range(len(cols["run"]))))
        measurements = read_tail_trajectories(tails)
        try:
            entries, results = records_mode_tail(checkpoint_rows(cols), measurements)
        except ValueError as exc:
            raise InputError(str(exc)) from None
        out = [
            {
                "run": e["run"],
                "model": e["model"],
                "step": e["step"],
                **{k: e[k] for k in MODE_TAIL_KEYS},
                "question_ratios": results[(e["run"], e["model"], e["step"])].question_ratios,
            }
            for e in entries
        ]

        def show() -> None:
            typer.echo(
                f"{'run':<22}{'model':<10}{'step':>6}{'M':>8}{'T':>8}{'M/T':>8}{'tail maj':>10}"
                f"  M_x/T_x quartiles"
            )
            for r in out:
                qs = r["question_ratio_quartiles"]
                quart = "n/a" if qs is None else " / ".join(fmt(v) for v in qs)
                typer.echo(
                    f"{r['run']:<22}{r['model']:<10}{r['step']:>6}"
                    f"{fmt(r['majority_mass_share']):>8}{fmt(r['majority_token_share']):>8}"
                    f"{fmt(r['concentration_ratio']):>8}"
                    f"{fmt(r['success_tail_majority_share']):>10}  {quart} "
                    f"({r['n_question_ratios']} questions)"
                )
                if r["n_unmatched"]:
                    typer.echo(
                        f"warning: {r['n_unmatched']} of {r['n_trajectories']} trajectories "
                        "have no record (not in C)"
                    )

        emit({"endpoints": out}, as_json, show)

    _run(as_json, go)


# --------------------------------------------------------------------------- seeds


@stats_app.command("seeds")
def seeds(
    records: Path = typer.Argument(..., help="records with train_seed"),
    k: str = typer.Option("1,8,64", help="comma-separated k values of pass@k"),
    k_min: int = typer.Option(8, "--k-min", help="K_min gate of ρ_H and W"),
    n_min: int = typer.Option(8, help="retention eligibility: min(m_0, m_t) >= n_min"),
    n_draws: int = typer.Option(20, help="rarefaction draws per checkpoint (retention)"),
    base_step: int = typer.Option(0, help="the base checkpoint's step (retention)"),
    base_run: str = typer.Option(
        "base", help="the run holding a model's shared base checkpoint (when a run has none)"
    ),
    n_boot: int = typer.Option(10_000, help="hierarchical bootstrap replicates"),
    seed: int = typer.Option(0, help="bootstrap seed (recorded in the output)"),
    confidence: float = typer.Option(0.95, help="the interval's level"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Several training seeds (docs/estimators.md item 17): per (run, model, step) whose
    records carry ``train_seed``, each seed's ρ_H (paired ratio), mode retention (against
    the base of the same model and seed, as ``rcea stats retention``), W (within-mode
    entropy, as ``rcea stats modes``) and pass@k of its own trajectories (n and c per
    question), then the mean, the between-seed SD and the hierarchical bootstrap interval
    (seeds, then questions within seed) — the report's ``replicates`` section on the same
    records. Says "single seed" when no checkpoint has two or more seeds."""

    def go() -> None:
        try:
            ks = [int(x) for x in k.split(",") if x.strip()]
        except ValueError:
            raise InputError(f"--k must be comma-separated integers, got {k!r}") from None
        if not ks or min(ks) < 1:
            raise InputError(f"--k must list integers >= 1, got {k!r}")
        cols = load_records(records)
        modes = (
            checkpoint_modes(records, cols, model=None, all_models=True) if has_modes(cols) else {}
        )
        try:
            section, notes = records_replicates(
                checkpoint_rows(cols),
                seed_identities(cols),
                modes,
                ks=ks,
                k_min=k_min,
                n_min=n_min,
                n_draws=n_draws,
                base_step=base_step,
                base_run=base_run,
                n_boot=n_boot,
                seed=seed,
                confidence=confidence,
            )
        except ValueError as exc:
            raise InputError(f"{records}: {exc}") from None
        data = {
            **section,
            "notes": notes,
            "settings": {
                "k": ks,
                "k_min": k_min,
                "n_min": n_min,
                "n_draws": n_draws,
                "base_step": base_step,
                "base_run": base_run,
                "n_boot": n_boot,
                "seed": seed,
                "confidence": confidence,
            },
        }

        def show() -> None:
            if data["sentence"]:
                typer.echo(data["sentence"])
            header, rows = replicates_rows(data)
            if rows:
                typer.echo(" | ".join(header))
                for row in rows:
                    typer.echo(" | ".join(fmt(v) for v in row))
            for note in notes:
                typer.echo(f"note: {note}")
            typer.echo(f"bootstrap: {n_boot} replicates, seed {seed}, confidence {confidence}")

        emit(data, as_json, show)

    _run(as_json, go)


# --------------------------------------------------------------------------- agreement


@stats_app.command("agreement")
def agreement(
    pairs: Path = typer.Argument(
        ..., help="CSV: pair_id,annotator_a,annotator_b,adjudicated,automatic"
    ),
    rubric: Path = typer.Option(
        None, help="rubric TOML with the gate thresholds and the adjudication scope"
    ),
    automatic_coverage: float = typer.Option(
        None,
        help="non-uncertain / judge-accepted trajectories of the whole locked partition "
        "(docs/estimators.md item 11); needed, or --partition, for a final gate",
    ),
    partition: Path = typer.Option(
        None,
        "--partition",
        help="CSV trajectory_id,mode of every judge-accepted trajectory of the locked "
        "partition (mode empty or 'uncertain' = uncertain): the automatic coverage",
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Pair agreement and the six-requirement gate: final when every A/B disagreement is
    adjudicated and the automatic coverage comes from the locked partition
    (``--automatic-coverage`` or ``--partition``); otherwise preliminary, or
    ``provisional`` when only the coverage is missing (computed from the pairs, named so,
    and never called final). Exit 5 when the final gate FAILED (rcea/app/cli/exit_codes.py);
    ``--json`` carries ``outcome`` and ``exit_code``."""

    def go() -> None:

        spec = load_rubric(rubric) if rubric else None
        plan = spec.sequential if spec else None
        p = read_pairs(pairs, sequential=plan is not None)
        thresholds = spec.gate if spec else GateThresholds()
        scope = spec.adjudication.scope if spec else "disagreements_and_automatic"
        if automatic_coverage is not None and partition is not None:
            raise InputError("--automatic-coverage and --partition exclude each other")
        if automatic_coverage is not None:
            coverage, coverage_source = automatic_coverage, "--automatic-coverage"
        elif partition is not None:
            coverage, n_traj = partition_coverage(partition)
            coverage_source = f"--partition {partition} ({n_traj} trajectories)"
        else:
            coverage = sum(x is not None for x in p.automatic) / len(p.automatic)
            coverage_source = (
                "pairs: share of audit pairs with an automatic label, not trajectories "
                "over the locked partition (give --automatic-coverage or --partition)"
            )
        unresolved = [
            i
            for i, x, y, j in zip(p.ids, p.a, p.b, p.adjudicated, strict=True)
            if x != y and j is None
        ]
        data = planned_gate(
            p.ids,
            p.qids,
            p.a,
            p.b,
            dict(zip(p.ids, p.adjudicated, strict=True)),
            p.automatic,
            coverage,
            thresholds,
            scope=scope,
            stage="preliminary" if unresolved else "final",
            plan=plan,
            n_planned=p.n_planned,
            provisional=automatic_coverage is None and partition is None,
        )
        data["automatic_coverage_source"] = coverage_source
        if plan is not None:
            data["resampling_unit"] = (
                "question_id" if p.has_question_id else "pair (no question_id column)"
            )
        data.update(gate_outcome(data))

        def show() -> None:
            print_gate(data)

        emit(data, as_json, show)
        if data["exit_code"]:
            raise typer.Exit(data["exit_code"])

    _run(as_json, go)


def gate_outcome(data: dict[str, Any]) -> dict[str, Any]:
    """``outcome`` (passed | failed | undecided) and ``exit_code`` of a gate report: only
    a final gate decides; a failed one exits ``FAILED`` (rcea/app/cli/exit_codes.py)."""

    decided = data.get("stage") == "final" and data.get("passed") is not None
    passed = data.get("passed") if decided else None
    outcome = "undecided" if passed is None else ("passed" if passed else "failed")
    return {"outcome": outcome, "exit_code": outcome_code(passed)}


def print_gate(data: dict[str, Any]) -> None:
    if data["stage"] == "provisional":
        would = "pass" if data["provisional_passed"] else "fail"
        verdict = f"NOT FINAL (would {would}; automatic coverage is not from the partition)"
    elif data["stage"] == "interim":
        verdict = "undecided (sequential plan: keep labelling)"
    else:
        verdict = {True: "PASSED", False: "FAILED", None: "preliminary (not gated)"}[data["passed"]]
    typer.echo(f"gate ({data['stage']}): {verdict}")
    source = data.get("automatic_coverage_source", "the audit's locked partition")
    typer.echo(f"automatic coverage source: {source}")
    typer.echo(f"adjudication scope: {data['adjudication_scope']}")
    typer.echo(
        f"pairs {data['n_pairs']}, evaluated {data['n_evaluated']}, excluded (uncertain) "
        f"{data['n_excluded_uncertain']}, adjudicated {data['n_adjudicated']}"
    )
    for r in [] if data.get("sequential") else data["requirements"]:
        mark = {True: "pass", False: "FAIL", None: "-"}[r.get("passed")]
        typer.echo(
            f"  {r['name']:<28}{fmt(r['value']):>10} {r['comparator']} {r['threshold']:<8} {mark}"
        )
    if not data["requirements"]:  # preliminary: not gated, but the number the team watches
        typer.echo(f"  {'human_human_macro_f1':<28}{fmt(data.get('human_human_macro_f1')):>10}")
    for key in ("automatic_vs_a_macro_f1", "automatic_vs_b_macro_f1"):
        typer.echo(f"  {key:<28}{fmt(data.get(key)):>10}")
    if data.get("sequential"):
        fixed = data.get("fixed_sample_passed", data.get("fixed_sample_provisional_passed"))
        if fixed is not None:
            typer.echo(f"  (the fixed-sample rule would {'pass' if fixed else 'fail'})")
        print_interim(data["sequential"])


def print_interim(seq: dict[str, Any]) -> None:
    """The sequential plan's interim decisions (docs/sequential-gate.md)."""
    plan = seq["plan"]
    head = (
        f"sequential plan ({plan['spending']}, alpha {plan['alpha']}, looks "
        f"{'/'.join(str(t) for t in plan['looks'])}): "
    )
    if seq["look"] == 0:
        typer.echo(
            head + f"before the first look ({seq['n_labelled']}/{seq['n_planned']} pairs "
            f"labelled by both; look 1 at {seq['look_sizes'][0]})"
        )
        return
    typer.echo(
        head + f"look {seq['look']}/{seq['n_looks']} at {seq['n_labelled']}/"
        f"{seq['n_planned']} pairs, boundary z = {seq['boundary']:.3f}, "
        f"{seq['n_questions']} questions, {seq['n_open']} open pair(s)"
    )
    gate = seq["decision"]
    if gate == "undecided" and seq.get("pairs_needed") is not None:
        gate += f" (about {seq['pairs_needed']} more pairs)"
    typer.echo(f"  gate decision: {gate}")
    for r in seq["requirements"]:
        interval = "-" if r["lower"] is None else f"[{fmt(r['lower'])}, {fmt(r['upper'])}]"
        more = ""
        if r["decision"] == "undecided" and r.get("pairs_needed") is not None:
            at = r.get("settles_by_look")
            more = f"  ~{r['pairs_needed']} more pairs" + (
                f" (look {at})" if at else " (beyond the plan)"
            )
        typer.echo(
            f"  {r['name']:<28}{fmt(r['value']):>10} {interval:>20} {r['comparator']} "
            f"{r['threshold']:<6} {r['decision']}{more}"
        )


# --------------------------------------------------------------------------- pass@k


@stats_app.command("passk")
def passk(
    results: Path = typer.Argument(..., help="CSV: question_id,n,c"),
    k: str = typer.Option("1,8,64", help="comma-separated k values"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Macro pass@k (stable product form) over questions."""

    def go() -> None:

        try:
            ks = [int(x) for x in k.split(",") if x.strip()]
        except ValueError:
            raise InputError(f"--k must be comma-separated integers, got {k!r}") from None
        ns, cs = read_passk(results, ks)
        data = macro_pass_at_k(ns, cs, ks).to_dict()

        def show() -> None:
            typer.echo(f"questions: {len(ns)}")
            for key, value in data["pass_at_k"].items():
                typer.echo(f"  {key:<12}{fmt(value)}")

        emit(data, as_json, show)

    _run(as_json, go)


# --------------------------------------------------------------------------- covfit


@stats_app.command("covfit")
def covfit(
    transitions: Path = typer.Argument(
        ..., help="CSV: transition,predicted,observed [,run][,model]"
    ),
    exclude_run: list[str] = typer.Option(
        [],
        help="failed run to exclude (repeatable); with a model column, a run name that "
        "exists at several models must name one as RUN:MODEL",
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Exact covariance fit of observed on predicted entropy change across transitions.

    With a ``model`` column the fit is pooled and per model, and an exclusion applies to
    one (run, model): ``--exclude-run clipcov:7B`` leaves ``clipcov`` at other scales in
    the fit (docs/estimators.md item 14)."""

    def go() -> None:

        t = read_transitions(transitions, exclude_run)
        if t.models is not None:
            data = covariance_fit_by_group(
                t.models, t.labels, t.predicted, t.observed, runs=t.runs, excluded_runs=exclude_run
            ).to_dict()
        else:
            data = covariance_fit(
                t.labels, t.predicted, t.observed, runs=t.runs, excluded_runs=exclude_run
            ).to_dict()

        def show() -> None:
            pooled = data.get("pooled", data)
            _print_flat(
                "covariance fit (pooled)",
                pooled,
                ("n", *FIT_SUMMARY, "excluded_runs"),
            )

        emit(data, as_json, show)

    _run(as_json, go)


# --------------------------------------------------------------------------- helpers


def fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _print_flat(title: str, data: dict[str, Any], keys: tuple[str, ...]) -> None:
    typer.echo(title)
    for key in keys:
        typer.echo(f"  {key:<24}{fmt(data.get(key))}")


def register(app: typer.Typer) -> None:
    stats_law.register(stats_app)
    app.add_typer(stats_app, name="stats")
