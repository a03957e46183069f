"""``rcea judge ...``: the validity audit — verifier, frozen judge, judge runs, blinded
calibration (development / held-out) and the accepted-set check in Label Studio."""

from __future__ import annotations

import signal
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

import typer
from tqdm import tqdm

from rcea.app.cli.audit_cmd import (
    _print_logins,
    _webhook,
    labelling_round,
    print_adjudication,
    print_render_changed,
    run_sync,
)
from rcea.app.cli.common import (
    DOMAIN_ERRORS,
    FULL_SYNC_OPTION,
    LazyBar,
    domain_errors,
    emit,
    engine,
    fail,
    say,
    settings,
    store_session,
    warn_if_llm_unreachable,
    with_target,
)
from rcea.app.cli.exit_codes import outcome_code
from rcea.app.cli.options import (
    ACTOR_OPTION,
    CONCURRENCY_OPTION,
    JSON_OPTION,
    PRICE_IN_OPTION,
    PRICE_OUT_OPTION,
    RECEIVER_CHECK_OPTION,
    RETRIES_OPTION,
    STUDY_OPTION,
    STUDY_SCOPE_OPTION,
    TIMEOUT_OPTION,
    WEBHOOK_OPTION,
)
from rcea.audits.sampling import ACCEPTED_CHECK_SIZE
from rcea.pipeline.judge import DEFAULT_TEMPLATE, JudgeSpec, load_template
from rcea.study.codebook.backend import load_strategy_fn
from rcea.study.progress import CALIBRATION_REMEDY, calibration_remedy_command
from rcea.study.settings import actor_name
from rcea.study.store import require_study, session_scope
from rcea.study.targets import resolve_check, target_of
from rcea.study.validity_audit.attempts import abandon_check
from rcea.study.validity_audit.checks import (
    check_items,
    sample_accepted,
    sample_calibration,
    study_checks,
)
from rcea.study.validity_audit.labelling import adjudicate_check, push_check, sync_check
from rcea.study.validity_audit.problems import load_problems
from rcea.study.validity_audit.reports import accepted_report, calibration_report
from rcea.study.validity_audit.run import RunOptions, run_judge
from rcea.study.validity_audit.status import validity_status
from rcea.study.validity_audit.validity import validity_by_checkpoint
from rcea.study.validity_audit.verify import VerifyError, verify_file
from rcea.study.validity_audit.versions import describe, freeze_judge, list_judges

judge_app = typer.Typer(
    rich_markup_mode=None,
    help="The validity audit: verifier, frozen judge, judge runs, calibration, accepted-set check.",
    no_args_is_help=True,
)
calibrate_app = typer.Typer(
    rich_markup_mode=None,
    help="Blinded calibration of a frozen judge (development and held-out splits).",
    no_args_is_help=True,
)
accepted_app = typer.Typer(
    rich_markup_mode=None,
    help="Accepted-set check: judge-accepted trajectories, two annotators each.",
    no_args_is_help=True,
)
judge_app.add_typer(calibrate_app, name="calibrate")
judge_app.add_typer(accepted_app, name="accepted")


@judge_app.callback()
def _graceful_sigterm(ctx: typer.Context) -> None:
    """The validity audit: verifier, frozen judge, judge runs, calibration, accepted-set
    check. SIGTERM stops a judge run like Ctrl-C (calls in flight finish and are stored);
    rerun to resume."""

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    with suppress(ValueError):
        previous = signal.signal(signal.SIGTERM, stop)
        ctx.call_on_close(lambda: signal.signal(signal.SIGTERM, previous))


# --------------------------------------------------------------------------- verifier


@judge_app.command("verify")
def verify_cmd(
    records: Path = typer.Argument(..., help="records JSONL (trajectory_id, question_id, text)"),
    gold: Path = typer.Option(None, "--gold", help="JSONL of {question_id, answer}"),
    domain: str = typer.Option(
        "math", "--domain", help="math (needs --gold) | toy | python:MODULE:FUNCTION"
    ),
    out: Path = typer.Option(None, "--out", help="write the records with reward/answer filled"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Recompute R (boxed answer, math-verify gold-first equivalence, or the toy
    verifier); fill missing rewards and report disagreements with stored ones."""

    try:
        res = verify_file(records, gold=gold, domain=domain, out=out)
    except VerifyError as exc:
        fail(str(exc), as_json=as_json, errors=exc.errors)
    except (ValueError, FileNotFoundError) as exc:
        fail(str(exc), as_json=as_json)

    def show() -> None:
        typer.echo(
            f"verified {res['n_records']} records ({res['domain']}): {res['n_success']} successes, "
            f"{res['n_checked']} checked, {res['n_filled']} filled, "
            f"{res['n_disagreements']} disagreement(s) with the stored reward"
        )
        for d in res["disagreements"][:20]:
            typer.echo(
                f"  line {d['line']} {d['trajectory_id']}: stored {d['stored']}, "
                f"recomputed {d['recomputed']} (answer {d['answer']!r})"
            )
        if res["out"]:
            typer.echo(f"wrote {res['out']}")

    emit(res, as_json, show)


@judge_app.command("problems")
def problems_cmd(
    source: str = typer.Argument(
        ..., help="JSONL {question_id, problem} or MODULE:FUNCTION problem_fn(question_id)"
    ),
    study: str = STUDY_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Store the problem statements the judge and the annotators are shown."""

    with store_session(as_json) as s:
        res = load_problems(s, study=study, source=source)
    emit(
        res,
        as_json,
        lambda: (
            f"problems for {res['n_questions']} question(s): {res['new']} new, "
            f"{res['changed']} changed"
        ),
    )


# --------------------------------------------------------------------------- judge


@judge_app.command("freeze")
def freeze_cmd(
    name: str = typer.Option(..., "--name", help="judge name"),
    template: Path = typer.Option(None, "--template", help="template TOML (default: built-in)"),
    backend: str = typer.Option("openai", "--backend", help="openai | oracle"),
    model: str = typer.Option(None, "--model", help="model name (default: $RCEA_LLM_MODEL)"),
    oracle: str = typer.Option(
        None, "--oracle", help="MODULE:FUNCTION validity_fn(question_id, text) (oracle backend)"
    ),
    seed: int = typer.Option(0, "--seed", help="decoding seed (recorded)"),
    max_tokens: int = typer.Option(None, "--max-tokens", min=1, help="reply token cap"),
    reason: str = typer.Option("", "--reason", help="why this version (recorded)"),
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Freeze template + model + decoding (temperature 0, --seed, --max-tokens) as a
    content-hashed judge version (a changed one becomes version n+1 with its parent;
    identical content is a no-op)."""

    with domain_errors(as_json):
        tmpl = load_template(template) if template else DEFAULT_TEMPLATE
        if backend == "oracle":
            if not oracle:
                raise ValueError("--backend oracle needs --oracle MODULE:FUNCTION")
            load_strategy_fn(oracle)  # fail now, not at run time
            chosen = oracle
        else:
            chosen = model or settings().llm_model or ""
        spec = JudgeSpec(
            backend=backend,
            model=chosen,
            template=tmpl,
            seed=seed,
            max_tokens=max_tokens,
        )
        with session_scope(engine()) as s:
            row, created = freeze_judge(
                s, name=name, spec=spec, actor=actor_name(actor), reason=reason
            )
            out = {**describe(row), "created": created}

    def show() -> None:
        verb = "froze" if created else "already frozen:"
        typer.echo(
            f"{verb} judge {out['name']} v{out['version']} ({out['backend']} {out['model']}, "
            f"template {out['template_id']}) sha256 {out['judge_hash']}"
        )

    emit(out, as_json, show)


@judge_app.command("list")
def list_cmd(as_json: bool = JSON_OPTION) -> None:
    """Frozen judge versions with their hashes."""

    with session_scope(engine()) as s:
        rows = [describe(r) for r in list_judges(s)]

    def show() -> None:
        for r in rows:
            typer.echo(
                f"{r['name']} v{r['version']}  {r['judge_hash'][:16]}  "  # type: ignore[index]  # a value of a JSON/dict of mixed types; its shape is checked where it is written
                f"{r['backend']} {r['model']}  "
                f"{r['template_id']}  {r['frozen_by']} {r['frozen_at']}"
            )

    emit(rows, as_json, show)


@judge_app.command("run")
def run_cmd(
    study: str = STUDY_OPTION,
    judge: str = typer.Option(..., "--judge", help="frozen judge name"),
    version: int = typer.Option(None, "--version", help="judge version (default: latest)"),
    backend: str = typer.Option(None, "--backend", help="openai | oracle (must match the judge)"),
    oracle: str = typer.Option(None, "--oracle", help="MODULE:FUNCTION (must match the judge)"),
    concurrency: int = CONCURRENCY_OPTION,
    timeout: float = TIMEOUT_OPTION,
    max_retries: int = RETRIES_OPTION,
    price_in: float = PRICE_IN_OPTION,
    price_out: float = PRICE_OUT_OPTION,
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Judge every verifier success not yet judged by this judge version (resumable) and
    write the study's `validity` column; records a `judge.run` event."""

    bar = tqdm(unit="traj", desc="judge", disable=as_json)
    try:
        res = run_judge(
            engine(),
            study=study,
            judge=judge,
            version=version,
            settings=settings(),
            actor=actor_name(actor),
            options=RunOptions(
                backend=backend,
                oracle=oracle,
                concurrency=concurrency,
                timeout_s=timeout,
                max_retries=max_retries,
                price_input_per_mtok=price_in,
                price_output_per_mtok=price_out,
            ),
            progress=bar.update,
            on_total=lambda n: setattr(bar, "total", n),
        )
    except DOMAIN_ERRORS as exc:
        bar.close()
        fail(str(exc), as_json=as_json)
    except KeyboardInterrupt:
        bar.close()
        fail(
            "interrupted: the verdicts received so far are stored; rerun to resume",
            code=130,
            as_json=as_json,
        )
    bar.close()
    warn_if_llm_unreachable(res.get("usage") or {})

    def show() -> None:
        cov = res["coverage"]
        typer.echo(
            f"judge {res['judge_name']} v{res['judge_version']} on {study}: "
            f"{res['n_new']} judged now, "
            f"{res['n_already_judged']} already, {res['n_failed']} failed (rerun to retry); "
            f"{res['n_valid']} valid / {res['n_invalid']} invalid / {res['n_unparseable']} "
            f"unparseable of {res['n_successes']} successes"
            + (f", coverage {cov:.3f}" if cov is not None else "")
        )

    emit(res, as_json, show)


# --------------------------------------------------------------------------- checks


def _check_of(kind: str, study: str | None, name: str | None) -> Callable[[Any], Any]:
    return lambda s: resolve_check(s, study=study, name=name, kind=kind)


def _push(
    kind: str,
    study: str | None,
    name: str | None,
    annotators: list[str],
    actor: str | None,
    as_json: bool,
    webhook: bool = True,
    receiver_check: bool = True,
):

    with labelling_round(as_json, _check_of(kind, study, name)) as (s, check, people, target):
        assert check.id is not None  # stored rows have ids; SQLModel types keys Optional
        n = len(check_items(s, check_id=check.id))
        total = n * (2 if kind == "accepted" else 1)
        with LazyBar(total=total, unit="task", desc="push", disable=as_json) as bar:
            out = push_check(
                s,
                check,
                people,
                annotators=annotators,
                actor=actor_name(actor),
                webhook=_webhook(webhook, receiver_check),
                progress=bar.update,
            )

    def show() -> None:
        for role, info in out["projects"].items():
            typer.echo(
                f"{role} ({info['email']}): {info['url']}/projects/{info['project_id']} — "
                f"{info['n_tasks']} tasks ({info['n_new']} new)"
            )
            print_render_changed(info["render_changed"], role)
        _print_logins(out["new_accounts"])

    emit({**target.as_dict(), **out}, as_json, show)


def _sync(
    kind: str, study: str | None, name: str | None, as_json: bool, full: bool = False
) -> None:
    run_sync(as_json, _check_of(kind, study, name), sync_check, "check", full)


def _fmt(x: Any) -> str:
    return "—" if x is None else f"{x:.3f}" if isinstance(x, float) else str(x)


CALIBRATION_OPTION = typer.Option(
    None, "--calibration", help="calibration name (default: the study's latest)"
)
CHECK_OPTION = typer.Option(
    None, "--check", help="accepted-set check name (default: the study's latest)"
)


REASON_OPTION = typer.Option(
    None, "--reason", help="why (recorded; required for a re-draw after a failed attempt)"
)


@calibrate_app.command("sample")
def calibrate_sample(
    study: str = STUDY_OPTION,
    judge: str = typer.Option(..., "--judge", help="frozen judge name"),
    version: int = typer.Option(None, "--version", help="judge version (default: latest)"),
    rubric: str = typer.Option(None, "--rubric", help="frozen rubric with a [calibration] plan"),
    size: int = typer.Option(None, "--size", min=1, help="items (default: rubric or 600)"),
    held_out: int = typer.Option(None, "--held-out", min=1, help="held out (default 300)"),
    seed: int = typer.Option(None, "--seed", help="sampling seed (default: rubric or 0)"),
    name: str = typer.Option(None, "--name", help="calibration name"),
    reason: str = REASON_OPTION,
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Draw a blinded calibration set balanced between judge-accepted and not accepted
    verdicts, split into development and held-out parts; binds the judge hash. After a
    FAILED calibration of the judge only under the rubric's [recalibration] policy, with
    --reason (fresh items, tightened thresholds); otherwise freeze a new judge version."""

    with store_session(as_json) as s:
        check = sample_calibration(
            s,
            study=study,
            judge=judge,
            judge_version=version,
            rubric=rubric,
            size=size,
            held_out=held_out,
            seed=seed,
            name=name,
            reason=reason,
            actor=actor_name(actor),
        )
        out = {"calibration": check.name, "judge_hash": check.judge_hash, **check.plan}
    emit(
        out,
        as_json,
        lambda: (
            f"drew calibration {out['calibration']}: {out['n_drawn']} items "
            f"({out['n_judge_accepted']} judge-accepted, {out['n_judge_not_accepted']} not), "
            f"{out['held_out']} held out, seed {out['seed']}; judge {out['judge_hash'][:12]}…; "
            f"attempt {out['attempt']} (α {out['alpha']:g})"
        ),
    )


def _abandon(
    kind: str, study: str | None, name: str | None, reason: str, actor: str, as_json: bool
) -> None:
    with store_session(as_json) as s:
        row = resolve_check(s, study=study, name=name, kind=kind)
        target = target_of(s, row)
        say(target.line(), as_json)
        out = abandon_check(s, row, reason=reason, actor=actor_name(actor))
        study_name = target.study
    what = "calibration" if kind == "calibration" else "accepted-set check"
    cmd = "calibrate" if kind == "calibration" else "accepted"
    emit(
        {**target.as_dict(), **out, "outcome": "abandoned"},
        as_json,
        lambda: (
            f"{what} {row.name}: abandoned ({out['reason']}); it stays on the record and "
            f"counts as an attempt\nNEXT: rcea judge {cmd} sample --study {study_name} "
            "... --reason TEXT (allowed until an attempt fails; then only under the rubric's "
            "[recalibration] policy)"
        ),
    )


@calibrate_app.command("abandon")
def calibrate_abandon(
    calibration: str = typer.Option(..., "--calibration", help="calibration name"),
    reason: str = typer.Option(..., "--reason", help="why it is abandoned (recorded)"),
    study: str = STUDY_SCOPE_OPTION,
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Stop a calibration with no decided report, with a recorded reason; it stays on the
    record as "abandoned" (report, view, bundle) and is never decided afterwards."""
    _abandon("calibration", study, calibration, reason, actor, as_json)


@calibrate_app.command("push")
def calibrate_push(
    calibration: str = CALIBRATION_OPTION,
    study: str = STUDY_SCOPE_OPTION,
    annotator: list[str] = typer.Option(..., "--annotator", help="annotator e-mail (repeat)"),
    webhook: bool = WEBHOOK_OPTION,
    receiver_check: bool = RECEIVER_CHECK_OPTION,
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Serve the items as blinded single-trajectory tasks, each annotator on their own
    server: split among the annotators, or — when the rubric plan says
    `annotators_per_item = 2` — every item to both (give exactly two: A and B)."""
    _push("calibration", study, calibration, annotator, actor, as_json, webhook, receiver_check)


@calibrate_app.command("adjudicate")
def calibrate_adjudicate(
    calibration: str = CALIBRATION_OPTION,
    study: str = STUDY_SCOPE_OPTION,
    adjudicator: str = typer.Option(..., "--adjudicator", help="e-mail of the researcher"),
    webhook: bool = WEBHOOK_OPTION,
    receiver_check: bool = RECEIVER_CHECK_OPTION,
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Items A and B labelled differently (two-annotator plans) go to the adjudicator's own
    server, with both answers in random order; never who gave them, never the verdict."""

    resolve = _check_of("calibration", study, calibration)
    with labelling_round(as_json, resolve) as (s, check, people, target):
        out = adjudicate_check(
            s,
            check,
            people,
            adjudicator=adjudicator,
            actor=actor_name(actor),
            webhook=_webhook(webhook, receiver_check),
        )
    print_adjudication({**target.as_dict(), **out}, f"{out['n_items']} item(s)", as_json)


@calibrate_app.command("sync")
def calibrate_sync(
    calibration: str = CALIBRATION_OPTION,
    study: str = STUDY_SCOPE_OPTION,
    full: bool = FULL_SYNC_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Pull new, changed and deleted annotations (idempotent; after the first sync only
    tasks changed since the last one, `--full` for all); refuses if the judge changed."""
    _sync("calibration", study, calibration, as_json, full)


@calibrate_app.command("report")
def calibrate_report(
    calibration: str = CALIBRATION_OPTION,
    study: str = STUDY_SCOPE_OPTION,
    split: str = typer.Option("held-out", "--split", help="held-out | development"),
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Accuracy, macro-F1, accepted-valid precision, valid recall and coverage on the
    held-out split (complete → `judge.calibration.completed`); development is labelled as
    such and never recorded. A complete held-out report is held against the predeclared
    acceptance thresholds (rubric ``[acceptance]``): exit 5 when one is missed
    (rcea/app/cli/exit_codes.py); ``--json`` carries ``outcome`` and ``exit_code``."""

    with store_session(as_json) as s:
        row = resolve_check(s, study=study, name=calibration, kind="calibration")
        target = target_of(s, row)
        out = calibration_report(s, row, split=split, actor=actor_name(actor))
    out = with_target(out, target, as_json)
    out["exit_code"] = outcome_code({"passed": True, "failed": False}.get(out["outcome"]))

    def show() -> None:
        typer.echo(
            f"calibration {out['calibration']} [{out['split']}"
            + ("" if out["held_out"] else ", NOT held out")
            + f"]: {out['status']}, {out['n_labelled']}/{out['n_items']} labelled; judge "
            f"{out['judge_name']} v{out['judge_version']}"
            + ("" if out["judge_is_latest_version"] else " (a newer version exists)")
        )
        if out.get("annotators_per_item") == 2:
            ag, pr = out["human_agreement"] or {}, out["progress"]
            typer.echo(
                f"  two annotators per item: A {pr['A']}, B {pr['B']}, both {pr['both']}; "
                f"{out['n_needing_adjudication']} disagreement(s), {pr['adjudicator']} "
                f"adjudicated; A–B agreement {_fmt(ag.get('agreement'))}, "
                f"macro-F1 {_fmt(ag.get('macro_f1'))}, kappa {_fmt(ag.get('cohen_kappa'))}"
            )
        r = out["report"]
        if r:
            pop = r.get("population") or {}
            ci = pop.get("intervals") or {}
            typer.echo(f"  {'':<26}{'balanced sample':>16}  population (95% CI)")
            for key in (
                "accuracy",
                "macro_f1",
                "accepted_valid_precision",
                "valid_recall",
                "coverage",
            ):
                low_high = ci.get(key)
                band = f" [{_fmt(low_high[0])}, {_fmt(low_high[1])}]" if low_high else ""
                typer.echo(f"  {key:<26}{_fmt(r[key]):>16}  {_fmt(pop.get(key))}{band}")
            if pop.get("note"):
                typer.echo(f"  population: {pop['note']}")
        _print_acceptance(out)

    emit(out, as_json, show)
    raise typer.Exit(out["exit_code"])


def _print_acceptance(out: dict[str, Any]) -> None:
    """The predeclared acceptance of a decided report."""
    acc = out.get("acceptance")
    if acc is not None:
        basis = f" (on the {acc['basis']} figures)" if acc.get("basis") else ""
        typer.echo(f"acceptance: {'PASSED' if acc['passed'] else 'FAILED'}{basis}")
        for r in acc["requirements"]:
            mark = "pass" if r["passed"] else "FAIL"
            typer.echo(f"  {r['name']:<30}{_fmt(r['value']):>10} >= {r['threshold']:<6} {mark}")


@accepted_app.command("sample")
def accepted_sample(
    study: str = STUDY_OPTION,
    size: int = typer.Option(ACCEPTED_CHECK_SIZE, "--size", min=1, help="trajectories to check"),
    judge: str = typer.Option(None, "--judge", help="judge name (default: latest run's)"),
    version: int = typer.Option(None, "--version", help="judge version"),
    seed: int = typer.Option(0, "--seed", help="sampling seed (recorded)"),
    name: str = typer.Option(None, "--name", help="check name"),
    rubric: str = typer.Option(
        None, "--rubric", help="frozen rubric whose [acceptance] threshold applies (recorded)"
    ),
    reason: str = REASON_OPTION,
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Sample judge-accepted trajectories at random, outside every calibration set (and,
    after a failed check, under the rubric's [recalibration] policy with --reason)."""

    with store_session(as_json) as s:
        check = sample_accepted(
            s,
            study=study,
            size=size,
            judge=judge,
            judge_version=version,
            seed=seed,
            name=name,
            rubric=rubric,
            reason=reason,
            actor=actor_name(actor),
        )
        out = {"check": check.name, "judge_hash": check.judge_hash, **check.plan}
    emit(
        out,
        as_json,
        lambda: (
            f"drew accepted-set check {out['check']}: {out['size']} of {out['n_pool']} "
            f"accepted trajectories, seed {out['seed']}"
        ),
    )


@accepted_app.command("abandon")
def accepted_abandon(
    check: str = typer.Option(..., "--check", help="check name"),
    reason: str = typer.Option(..., "--reason", help="why it is abandoned (recorded)"),
    study: str = STUDY_SCOPE_OPTION,
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Stop an accepted-set check with no decided report, with a recorded reason; it
    stays on the record as "abandoned" and is never decided afterwards."""
    _abandon("accepted", study, check, reason, actor, as_json)


@accepted_app.command("push")
def accepted_push(
    check: str = CHECK_OPTION,
    study: str = STUDY_SCOPE_OPTION,
    annotator_a: str = typer.Option(..., "--annotator-a", help="e-mail of annotator A"),
    annotator_b: str = typer.Option(..., "--annotator-b", help="e-mail of annotator B"),
    webhook: bool = WEBHOOK_OPTION,
    receiver_check: bool = RECEIVER_CHECK_OPTION,
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Both annotators label every sampled trajectory (own project, own order)."""
    _push(
        "accepted", study, check, [annotator_a, annotator_b], actor, as_json, webhook,
        receiver_check,
    )  # fmt: skip


@accepted_app.command("sync")
def accepted_sync(
    check: str = CHECK_OPTION,
    study: str = STUDY_SCOPE_OPTION,
    full: bool = FULL_SYNC_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Pull new, changed and deleted annotations (idempotent; `--full` reads all)."""
    _sync("accepted", study, check, as_json, full)


@accepted_app.command("report")
def accepted_report_cmd(
    check: str = CHECK_OPTION,
    study: str = STUDY_SCOPE_OPTION,
    confidence: float = typer.Option(0.95, "--confidence", help="interval confidence"),
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Accepted-valid precision against each annotator with exact binomial intervals.
    When complete, the lower bound of the 95% interval per annotator is held against the
    predeclared threshold: exit 5 when it is missed (rcea/app/cli/exit_codes.py)."""

    with store_session(as_json) as s:
        row = resolve_check(s, study=study, name=check, kind="accepted")
        target = target_of(s, row)
        out = accepted_report(s, row, confidence=confidence, actor=actor_name(actor))
    out = with_target(out, target, as_json)
    out["exit_code"] = outcome_code({"passed": True, "failed": False}.get(out["outcome"]))

    def show() -> None:
        p = out["progress"]
        typer.echo(
            f"accepted-set check {out['check']}: {out['status']} (A {p['A']}, B {p['B']}, both "
            f"{p['both']} of {out['n_items']})"
        )
        r = out["report"]
        if r:
            for role in ("annotator_a", "annotator_b"):
                x = r[role]
                typer.echo(
                    f"  {role}: precision {x['precision']:.3f} ({x['n_valid']}/{x['n']}), "
                    f"{r['confidence']:.0%} CI [{x['ci_low']:.3f}, {x['ci_high']:.3f}]"
                )
            typer.echo(f"  agreement A/B: {r['annotator_agreement']:.3f}")
        _print_acceptance(out)

    emit(out, as_json, show)
    raise typer.Exit(out["exit_code"])


# --------------------------------------------------------------------------- status


@judge_app.command("status")
def status_cmd(study: str = STUDY_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Validity status of the study (no-judge | uncalibrated | calibrated |
    calibration-incomplete | calibration-failed), its checks."""

    with store_session(as_json) as s:
        st = require_study(s, name=study)
        out = validity_status(s, study_id=st.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        out["checks"] = [
            {"name": c.name, "kind": c.kind, "judge_hash": c.judge_hash}
            for c in study_checks(s, study_id=st.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        ]

    def show() -> None:
        typer.echo(f"{study}: validity {out['status']}")
        if out["judge_hash"]:
            typer.echo(f"  judge {out.get('judge_name')} {out['judge_hash'][:16]}…")
        if out["calibration"]:
            basis = (out.get("acceptance") or {}).get("basis") or "balanced"
            typer.echo(f"  calibration {out['calibration']} (thresholds on the {basis} figures)")
            rep = out.get("report") or {}
            pop = rep.get("population") or {}
            for key in ("accuracy", "macro_f1", "valid_recall"):
                band = (pop.get("intervals") or {}).get(key)
                ci = f" [{_fmt(band[0])}, {_fmt(band[1])}]" if band else ""
                typer.echo(
                    f"    {key}: balanced {_fmt(rep.get(key))}, population {_fmt(pop.get(key))}{ci}"
                )
        for line in out.get("failed_requirements") or []:
            typer.echo(f"  FAILED: {line}")
        if out["status"] == "calibration-failed":
            typer.echo(
                f"  {CALIBRATION_REMEDY}: {calibration_remedy_command(out.get('judge_name'))}"
            )
        for c in out["checks"]:
            typer.echo(f"  {c['kind']} {c['name']} (judge {c['judge_hash'][:12]}…)")

    emit(out, as_json, show)


@judge_app.command("validity")
def validity_cmd(
    study: str = STUDY_OPTION,
    k_min: int = typer.Option(8, "--k-min", min=1, help="K₊ gate per question"),
    as_json: bool = JSON_OPTION,
) -> None:
    """v̂₊(x) and h_b(v̂₊) per run/model/step from the production judge's verdicts."""

    with store_session(as_json) as s:
        st = require_study(s, name=study)
        out = validity_by_checkpoint(s, study_id=st.id, k_min=k_min)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional

    def show() -> None:
        typer.echo(f"{study}: validity {out['validity_status']['status']}")
        for g in out["groups"]:
            typer.echo(
                f"  {g['run']} {g['model']} step {g['step']}: v̂₊ {_fmt(g['mean_validity_rate'])}, "
                f"h_b {_fmt(g['mean_validity_entropy'])}, {g['n_eligible']}/{g['n_questions']} "
                f"questions eligible, judge coverage {_fmt(g['judge_coverage'])}"
            )

    emit(out, as_json, show)


def register(app: typer.Typer) -> None:
    """Add the ``judge`` command group to ``app``."""
    app.add_typer(judge_app, name="judge")
