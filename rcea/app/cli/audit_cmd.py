"""``rcea audit ...``: the blinded pair audit (rubric freeze → sample → Label Studio →
sync → adjudication → gates)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from sqlmodel import Session

from rcea.annotation.people import people_from_settings
from rcea.app.cli import exit_codes
from rcea.app.cli.common import (
    FULL_SYNC_OPTION,
    LazyBar,
    domain_errors,
    emit,
    engine,
    fail,
    say,
    settings,
    store_session,
    with_target,
)
from rcea.app.cli.options import (
    ACTOR_OPTION,
    JSON_OPTION,
    RECEIVER_CHECK_OPTION,
    STUDY_OPTION,
    STUDY_SCOPE_OPTION,
    WEBHOOK_OPTION,
)
from rcea.app.cli.stats_cmd import fmt, gate_outcome, print_gate, print_interim
from rcea.audits.inputs import read_text
from rcea.audits.rubric import Rubric as RubricSpec
from rcea.audits.rubric import load_rubric, rubric_path
from rcea.study.labelling import webhook_target
from rcea.study.pair_audit.abandon import abandon_audit
from rcea.study.pair_audit.annotators import annotator_quality
from rcea.study.pair_audit.freeze import (
    freeze_partition_from_modes,
    get_rubric,
    list_rubrics,
    rubric_spec,
)
from rcea.study.pair_audit.gate import decide_gate
from rcea.study.pair_audit.plan import check_rubric, freeze_checked
from rcea.study.pair_audit.push import adjudicate, push_audit, sync_audit
from rcea.study.pair_audit.reaudit import failed_gate_options
from rcea.study.pair_audit.sampling import (
    audit_overview,
    audit_pairs,
    draw_audit,
    record_dev_questions,
)
from rcea.study.pair_audit.sizing import DEFAULT_MIN_PAIRS, size_rubric, sized_rubric_text
from rcea.study.settings import actor_name
from rcea.study.store import session_scope
from rcea.study.targets import resolve_audit, target_of

audit_app = typer.Typer(
    rich_markup_mode=None,
    help="The blinded same/different-strategy pair audit.",
    no_args_is_help=True,
)
rubric_app = typer.Typer(rich_markup_mode=None, help="Frozen audit rubrics.", no_args_is_help=True)
partition_app = typer.Typer(
    rich_markup_mode=None, help="Frozen automatic partitions.", no_args_is_help=True
)
audit_app.add_typer(rubric_app, name="rubric")
audit_app.add_typer(partition_app, name="partition")

AUDIT_OPTION = typer.Option(None, "--audit", help="audit name (default: the study's latest)")


@rubric_app.command("freeze")
def rubric_freeze(
    rubric: str = typer.Argument(
        ..., help="rubric TOML, or a shipped rubric by name: default, demo"
    ),
    study: str = typer.Option(
        None,
        "--study",
        help="check the plans against this study first; refuse one it cannot meet",
    ),
    force: bool = typer.Option(
        False, "--force", help="freeze a plan the study cannot meet (needs --reason)"
    ),
    reason: str = typer.Option(None, "--reason", help="why --force (recorded)"),
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Store a rubric frozen with its content hash (a change needs a new version).

    With ``--study``: refused when the study cannot meet the rubric's plans (what
    ``rcea audit rubric check`` shows), unless ``--force --reason TEXT``."""

    with domain_errors(as_json):
        path = rubric_path(rubric)
    with store_session(as_json) as s:
        row, created, check = freeze_checked(
            s, path=path, actor=actor_name(actor), study=study, force=force, reason=reason
        )
        out = {
            "name": row.name,
            "version": row.version,
            "content_hash": row.content_hash,
            "created": created,
            "parent_id": row.parent_id,
            "checked_against": study,
            **({"check": check} if check is not None else {}),
        }

    def show() -> None:
        verb = "froze" if created else "already frozen:"
        typer.echo(f"{verb} rubric {out['name']} v{out['version']} sha256 {out['content_hash']}")
        if check is not None:
            flow = check["pairs"]
            typer.echo(
                f"checked against {study}: {flow['n_pairs']} pairs on {flow['n_questions_drawn']} "
                "questions"
                + ("" if check["meets_plan"] else " — FORCED: " + "; ".join(check["problems"]))
            )
            for line in check["warnings"]:
                typer.echo(f"warning: {line}", err=True)
        else:
            typer.echo(
                "not checked against a study: `rcea audit rubric check RUBRIC --study S` shows "
                "what it gives"
            )

    emit(out, as_json, show)


def _resolve_spec(s: Session, rubric: str) -> RubricSpec:
    """A rubric file, a shipped rubric by name, or a frozen rubric by name."""
    try:
        return load_rubric(rubric_path(rubric))
    except ValueError:
        return rubric_spec(get_rubric(s, name=rubric))


def print_flow(flow: dict[str, Any]) -> None:
    """The pair plan's flow table (``rcea.study.pair_audit.plan.pair_flow``)."""
    scope = flow["scope"]
    where = (
        scope
        if isinstance(scope, str)
        else ", ".join(f"{k} {', '.join(map(str, v))}" for k, v in scope.items())
    )
    typer.echo(
        f"pairs ({flow['allocation']}, floor {flow['floor']}, cap {flow['cap']} per question; "
        f"checkpoints: {where}; from {flow['source']}):"
    )
    rows = [
        ("questions in the study", flow["n_questions_in_study"]),
        ("with judge-accepted successes there", flow["n_questions_with_successes"]),
        ("development questions left out", flow["n_development_excluded"]),
        (f"below the floor of {flow['floor']} pair(s), left out", flow["n_below_floor"]),
        ("reach the floor", flow["n_qualifying"]),
        ("drawn", flow["n_questions_drawn"]),
    ]
    for label, n in rows:
        typer.echo(f"  {label:<44}{n:>6}")
    for b in flow["below_floor"][:20]:
        typer.echo(f"    {b['question_id']}: {b['successes']} success(es), {b['pairs']} pair(s)")
    if len(flow["below_floor"]) > 20:
        typer.echo(f"    … {len(flow['below_floor']) - 20} more (--json lists all)")
    typer.echo(
        f"  pairs drawn: {flow['n_pairs']} ({2 * flow['n_pairs']} labels from annotators A "
        f"and B) of {flow['pairs_available']} available"
    )
    if flow["error"]:
        typer.echo(f"  `rcea audit sample` would refuse: {flow['error']}")


@rubric_app.command("check")
def rubric_check(
    rubric: str = typer.Argument(
        ..., help="rubric TOML, a shipped rubric (default, demo) or a frozen rubric's name"
    ),
    study: str = typer.Option(..., "--study", help="the study the plans are checked against"),
    as_json: bool = JSON_OPTION,
) -> None:
    """What a rubric's plans give on a study, before it is frozen.

    The pairs `rcea audit sample` would draw (the flow table), the calibration sample
    and the checkpoints whose numbers reach the evidence floors. Exit 2 when the study
    cannot meet the plan (`rubric freeze --study` refuses it then)."""

    with store_session(as_json) as s:
        out = check_rubric(s, study=study, rubric=_resolve_spec(s, rubric))

    def show() -> None:
        typer.echo(
            f"rubric {out['rubric']} v{out['version']} ({out['content_hash'][:12]}…) on study "
            f"{study}:"
        )
        print_flow(out["pairs"])
        cal = out["calibration"]
        if cal is None:
            typer.echo("calibration: no [calibration] plan (`judge calibrate sample` needs --size)")
        else:
            typer.echo(
                f"calibration: {cal['n_drawn']} item(s) of {cal['population']} "
                f"{cal['population_source']}, {cal['held_out']} held out "
                f"({cal['n_development']} for development)"
            )
        ev = out["evidence"]
        for key, k in (("validity", "k_min"), ("retention", "n_min")):
            c = ev[key]
            typer.echo(
                f"evidence: {k} = {ev[k]}: {c['n_meeting_floor']} of {c['n_checkpoints']} "
                f"checkpoint(s) reach the {key} floor (median share {c['median_share']:.0%})"
            )
        for line in out["problems"]:
            typer.echo(f"problem: {line}", err=True)
        for line in out["warnings"]:
            typer.echo(f"warning: {line}", err=True)
        typer.echo(
            "the study can meet this plan"
            if out["meets_plan"]
            else f"the study cannot meet this plan: `rcea audit rubric init --study {study}` "
            "writes one it can"
        )

    emit({"ok": out["meets_plan"], **out}, as_json, show)
    if not out["meets_plan"]:
        raise typer.Exit(exit_codes.REFUSED)


@rubric_app.command("init")
def rubric_init(
    study: str = typer.Option(..., "--study", help="the study the plans are sized to"),
    out: Path = typer.Option(..., "--out", help="rubric TOML to write"),
    run: list[str] = typer.Option(
        None, "--run", help="draw pairs only from this run (repeatable; default: every run)"
    ),
    model: list[str] = typer.Option(
        None, "--model", help="draw pairs only from this model (repeatable)"
    ),
    step: list[int] = typer.Option(
        None, "--step", help="draw pairs only from this step (repeatable)"
    ),
    min_pairs: int = typer.Option(
        DEFAULT_MIN_PAIRS,
        "--min-pairs",
        min=1,
        help="the floor: questions with fewer pairs are left out (listed)",
    ),
    questions: int = typer.Option(
        None, "--questions", min=1, help="draw at most this many questions (default: all)"
    ),
    name: str = typer.Option(None, "--name", help="rubric name (default: STUDY-rubric)"),
    force: bool = typer.Option(False, "--force", help="overwrite an existing file"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Write a rubric whose plans the study can meet.

    Pairs per question from the judge-accepted successes each question has at the
    checkpoints drawn from (a floor, questions below it left out and listed), K_min and
    n_min from the samples per question, the calibration from the judged population;
    every other setting the shipped default's. Review it, `rcea audit rubric check`,
    then freeze it."""

    if out.exists() and not force:
        fail(f"{out} exists: pass --force to overwrite it", as_json=as_json)
    with domain_errors(as_json):
        with session_scope(engine()) as s:
            size = size_rubric(
                s,
                study=study,
                runs=run or None,
                models=model or None,
                steps=step or None,
                min_pairs=min_pairs,
                n_questions=questions,
            )
        text = sized_rubric_text(size, name=name or f"{study}-rubric")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")

    def show() -> None:
        typer.echo(
            f"wrote {out}: {size.planned_pairs} pairs planned on {size.flow['n_questions_drawn']} "
            f"question(s); K_min {size.k_min}, n_min {size.n_min}; calibration "
            f"{size.calibration_size} ({size.calibration_held_out} held out)"
        )
        print_flow(size.flow)
        for line in size.warnings:
            typer.echo(f"warning: {line}", err=True)
        typer.echo(
            f"next: review it, then `rcea audit rubric check {out} --study {study}` and "
            f"`rcea audit rubric freeze {out} --study {study}`"
        )

    emit({"ok": True, "out": str(out), **size.to_dict()}, as_json, show)


@rubric_app.command("list")
def rubric_list(as_json: bool = JSON_OPTION) -> None:
    """Frozen rubrics with their hashes."""

    with session_scope(engine()) as s:
        rows = [
            {
                "name": r.name,
                "version": r.version,
                "content_hash": r.content_hash,
                "frozen_by": r.frozen_by,
                "frozen_at": r.frozen_at.isoformat(),
            }
            for r in list_rubrics(s)
        ]

    def show() -> None:
        for r in rows:
            typer.echo(
                f"{r['name']} v{r['version']}  {r['content_hash'][:16]}  "
                f"{r['frozen_by']} {r['frozen_at']}"
            )

    emit(rows, as_json, show)


@partition_app.command("freeze")
def partition_freeze(
    study: str = STUDY_OPTION,
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Freeze the study's `mode` column as the automatic partition of its accepted
    trajectories (until the codebook cycle exports one)."""

    with store_session(as_json) as s:
        part, created = freeze_partition_from_modes(s, study=study, actor=actor_name(actor))
        out = {
            "partition_id": part.id,
            "content_hash": part.content_hash,
            "n_accepted": part.n_accepted,
            "n_uncertain": part.n_uncertain,
            "created": created,
        }
    emit(
        out,
        as_json,
        lambda: (
            f"{'froze' if created else 'unchanged:'} partition #{out['partition_id']} "
            f"of {study}: {out['n_accepted']} accepted, {out['n_uncertain']} uncertain, "
            f"sha256 {out['content_hash']}"
        ),
    )


@audit_app.command("dev-questions")
def dev_questions(
    file: Path = typer.Argument(..., help="one question id per line"),
    study: str = STUDY_OPTION,
    actor: str = ACTOR_OPTION,
) -> None:
    """Record the questions used to develop codebook prompts: audits never draw them."""

    with domain_errors():
        questions = read_text(file).splitlines()  # a regular UTF-8 file
        with session_scope(engine()) as s:
            n = record_dev_questions(s, study=study, questions=questions, actor=actor_name(actor))
    typer.echo(f"recorded {n} development question(s) for {study}")


@audit_app.command("sample")
def sample(
    study: str = STUDY_OPTION,
    rubric: str = typer.Option(..., "--rubric", help="frozen rubric name"),
    rubric_version: str = typer.Option(None, help="rubric version (default: latest)"),
    name: str = typer.Option(None, help="audit name (default: <study>-audit-<n>)"),
    seed: int = typer.Option(None, help="override the rubric's [pairs] seed"),
    reason: str = typer.Option(
        None,
        "--reason",
        help="why this audit is drawn (recorded); required to re-audit a partition whose "
        "final gate failed, which the frozen rubric's [reaudit] policy must allow",
    ),
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Draw the audit pairs and lock the current partition into the audit.

    Refused on a partition whose final gate FAILED unless that audit's frozen rubric
    predeclares ``[reaudit] max_attempts`` (and a correction) and ``--reason`` is given;
    the remedy otherwise is a new partition (docs/publication.md "Every attempt")."""

    with store_session(as_json) as s:
        audit = draw_audit(
            s,
            study=study,
            rubric=rubric,
            rubric_version=rubric_version,
            name=name,
            actor=actor_name(actor),
            seed=seed,
            reason=reason,
        )
        out = audit_overview(s, audit)
    emit(
        out,
        as_json,
        lambda: (
            f"drew audit {out['audit']}: {out['n_pairs']} pairs in {out['n_questions']} "
            f"questions ({out['n_uncertain_pairs']} with an uncertain member); "
            f"rubric {out['rubric_hash'][:12]}…, partition {out['partition_hash'][:12]}…"
            + (
                f"; {len(out['below_floor'])} question(s) below the plan's floor left out"
                if out["below_floor"]
                else ""
            )
        ),
    )


@audit_app.command("gate")
def gate(
    audit: str = AUDIT_OPTION,
    study: str = STUDY_SCOPE_OPTION,
    final: bool = typer.Option(False, "--final", help="the final gate (needs adjudication)"),
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Preliminary (default) or final gate report; the final one is recorded as an event.

    With a ``[sequential]`` plan in the frozen rubric: the interim decisions at the
    current look (a ``gate.interim`` event the first time each look is reached), and
    ``--final`` may stop early once the gate is settled (docs/sequential-gate.md).
    Exit 5 when the final gate FAILED (rcea/app/cli/exit_codes.py); ``--json`` carries
    ``outcome`` and ``exit_code``."""

    with store_session(as_json) as s:
        row = resolve_audit(s, study=study, audit=audit)
        target = target_of(s, row)
        result = decide_gate(s, row, final=final, actor=actor_name(actor))
        options = (
            failed_gate_options(s, study=target.study)
            if final and result["status"] == "failed"
            else []
        )
    result.update(gate_outcome(result["report"] or {}))
    result = with_target(result, target, as_json)

    def show() -> None:
        print_gate_status(result)
        if options:
            typer.echo("the final gate FAILED; the options:")
            for line in options:
                typer.echo(f"  - {line}")

    emit({**result, **({"options": options} if options else {})}, as_json, show)
    if result["exit_code"]:  # a failed final gate: exit_codes.FAILED
        raise typer.Exit(result["exit_code"])


@audit_app.command("abandon")
def abandon(
    audit: str = typer.Option(..., "--audit", help="audit name"),
    study: str = STUDY_SCOPE_OPTION,
    reason: str = typer.Option(..., "--reason", help="why it is abandoned (recorded)"),
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Stop a pair audit that has no final gate, with a recorded reason. It stays on the
    record as "abandoned" in the report, the view and the bundle, still counts against
    the rubric's [reaudit] max_attempts, and gets no final gate (docs/publication.md
    "Every attempt")."""
    with store_session(as_json) as s:
        row = resolve_audit(s, study=study, audit=audit)
        target = target_of(s, row)
        out = abandon_audit(s, row, reason=reason, actor=actor_name(actor))
    study_name = target.study
    emit(
        with_target({**out, "outcome": "abandoned"}, target, as_json),
        as_json,
        lambda: (
            f"audit {out['audit']}: abandoned ({out['reason']}); it stays on the record\n"
            f"NEXT: rcea audit sample --study {study_name} --rubric NAME --reason TEXT"
        ),
    )


def print_gate_status(result: dict) -> None:

    prog = result["progress"]
    typer.echo(
        f"audit {result['audit']}: status {result['status']} "
        f"(A {prog['A']}/{result['n_pairs']}, B {prog['B']}/{result['n_pairs']}, "
        f"adjudicated {prog['adjudicator']}/{result['n_needing_adjudication']})"
    )
    typer.echo(f"rubric {result['rubric_hash'][:16]}…  partition {result['partition_hash'][:16]}…")
    if result.get("stopped_early"):
        typer.echo("stopped early: the sequential plan settled the gate before the last look")
    if result["report"]:
        print_gate(result["report"])
    elif result.get("sequential"):
        print_interim(result["sequential"])


@audit_app.command("annotators")
def annotators(
    audit: str = AUDIT_OPTION,
    study: str = STUDY_SCOPE_OPTION,
    window: int = typer.Option(20, min=2, help="labels per rolling-agreement window"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Annotator quality per person and round: labels, throughput, Label Studio lead
    times, agreement with the final reference per class, disagreement hotspots, and
    self-consistency on the rubric's hidden repeats ([annotators] repeat_share)."""

    with store_session(as_json) as s:
        row = resolve_audit(s, study=study, audit=audit)
        target = target_of(s, row)
        out = with_target(annotator_quality(s, row, window=window), target, as_json)

    def show() -> None:
        typer.echo(
            f"audit {out['audit']}: {out['n_pairs']} pairs, {out['n_reference']} with a "
            "final reference so far"
        )
        typer.echo(
            f"{'round':<12}{'person':<28}{'labels':>8}{'median s':>10}{'p90 s':>9}"
            f"{'/active h':>10}{'accuracy':>10}{'F1 same':>9}{'F1 diff':>9}"
        )
        for p in out["annotators"]:
            vs = p["vs_reference"] or {}
            pc = vs.get("per_class", {})
            typer.echo(
                f"{p['round']:<12}{(p['person'] or '-')[:27]:<28}{p['labels']:>8}"
                f"{fmt(p['lead_time_median_s']):>10}{fmt(p['lead_time_p90_s']):>9}"
                f"{fmt(p['labels_per_active_hour']):>10}{fmt(vs.get('accuracy')):>10}"
                f"{fmt(pc.get('same', {}).get('f1')):>9}{fmt(pc.get('different', {}).get('f1')):>9}"
            )
            if p.get("lead_time_contradictions"):
                typer.echo(
                    f"  {p['lead_time_contradictions']} claimed lead_time(s) exceed the server "
                    "time since the previous label (lead_time is the browser's claim; "
                    "active hours are bounded by created_at)"
                )
        repeated = [
            p for p in out["annotators"] if (p.get("self_consistency") or {}).get("planned")
        ]
        if repeated:
            typer.echo("self-consistency on hidden repeats (same label both times):")
            for p in repeated:
                sc = p["self_consistency"]
                typer.echo(
                    f"  {p['round']:<10}{(p['person'] or '-')[:27]:<28}{sc['same']:>4}/{sc['n']:<4}"
                    f" {fmt(sc['share'])} ({sc['planned']} repeats planned)"
                )
        hot = [h for h in out["hotspots"] if h["disagreements"]][:10]
        if hot:
            typer.echo("disagreement hotspots (A vs B):")
            for h in hot:
                typer.echo(
                    f"  {h['question_id']:<24}{h['disagreements']:>4}/{h['pairs_both']:<4}"
                    f" {h['disagreement_share']:.0%}"
                )

    emit(out, as_json, show)


def register(app: typer.Typer) -> None:
    app.add_typer(audit_app, name="audit")


# --------------------------------------------------------------------------- Label Studio


def _people():

    return people_from_settings(settings())


def _audit_of(study: str | None, audit: str | None) -> Callable[[Session], Any]:
    return lambda s: resolve_audit(s, study=study, audit=audit)


def _webhook(enabled: bool = True, check: bool = True):
    return webhook_target(settings(), check=check) if enabled else None


@contextmanager
def labelling_round(
    as_json: bool, resolve: Callable[[Session], Any], *, announce: bool = True
) -> Iterator[tuple[Session, Any, Any, Any]]:
    """The store session, the pair audit or validity check ``resolve`` finds, the people
    and the record's target (its line said first, when ``announce``) of a command that
    talks to Label Studio (push, sync, adjudicate): a domain or Label Studio error is one
    line (``domain_errors``)."""
    with domain_errors(as_json, RuntimeError):
        people = _people()
        with session_scope(engine()) as s:
            row = resolve(s)
            target = target_of(s, row)
            if announce:
                say(target.line(), as_json)
            yield s, row, people, target


def run_sync(
    as_json: bool, resolve: Callable[[Session], Any], sync: Callable[..., Any], key: str, full: bool
) -> None:
    """Sync a pair audit or validity check (``resolve``) with Label Studio through ``sync``
    and print the summary under the record's name (``out[key]``)."""
    with labelling_round(as_json, resolve, announce=False) as (s, row, people, target):
        out = sync(s, row, people, full=full)
    out = with_target(out, target, as_json)
    emit(out, as_json, lambda: print_sync(out, out[key]))


def _print_logins(new_accounts: dict, what: str = "annotator") -> None:
    for role, info in sorted(new_accounts.items()):
        typer.echo(f"  new login for {what} {role}: {info['email']} / {info['password']}")


@audit_app.command("push")
def push(
    audit: str = AUDIT_OPTION,
    study: str = STUDY_SCOPE_OPTION,
    annotator_a: str = typer.Option(..., "--annotator-a", help="e-mail of annotator A"),
    annotator_b: str = typer.Option(..., "--annotator-b", help="e-mail of annotator B"),
    webhook: bool = WEBHOOK_OPTION,
    receiver_check: bool = RECEIVER_CHECK_OPTION,
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """One project per annotator, each on the annotator's own Label Studio server, with
    the same blinded tasks (idempotent; a re-run after a crash adopts what was made).

    Servers and accounts that do not exist yet are created; new passwords are printed
    once, for handing to the annotators."""

    with labelling_round(as_json, _audit_of(study, audit)) as (s, a, people, target):
        assert a.id is not None  # stored rows have ids; SQLModel types keys Optional
        total = 2 * len(audit_pairs(s, audit_id=a.id))
        with LazyBar(total=total, unit="task", desc="push", disable=as_json) as bar:
            out = push_audit(
                s,
                a,
                people,
                annotators={"A": annotator_a, "B": annotator_b},
                webhook=_webhook(webhook, receiver_check),
                actor=actor_name(actor),
                progress=bar.update,
            )

    def show() -> None:
        for role, info in out["projects"].items():
            typer.echo(
                f"annotator {role} ({info['email']}): {info['url']}/projects/{info['project_id']} "
                f"— {info['n_tasks']} tasks ({info['n_new']} new)"
            )
            print_render_changed(info["render_changed"], f"annotator {role}")
        _print_logins(out["new_accounts"])

    emit({**target.as_dict(), **out}, as_json, show)


def print_render_changed(changed: list[dict], who: str) -> None:
    """A warning per stored task whose recorded render hash differs from this push's
    (``rcea.study.labelling.push.render_changes``): the stored hash stays."""
    for c in changed:
        typer.echo(
            f"  WARNING: task {c['task_id']} of {who} ({c['key']}) would now show another "
            f"render (stored {c['stored'][:12]}…, now {str(c['now'])[:12]}…): the task in "
            "Label Studio and its stored hash are unchanged; push a new round to show it"
        )


def print_adjudication(out: dict, what: str, as_json: bool) -> None:
    """The adjudication round's project and the adjudicator's new login (pairs or items)."""

    def show() -> None:
        typer.echo(
            f"adjudication ({out['email']}): {out['url']}/projects/{out['project_id']} — "
            f"{what} ({out['n_new']} new)"
        )
        print_render_changed(out["render_changed"], "the adjudicator")
        if out["new_password"]:
            typer.echo(f"  new login for the adjudicator: {out['email']} / {out['new_password']}")

    emit(out, as_json, show)


def print_sync(out: dict, what: str) -> None:
    """The sync summary: per new status, and anything that vanished from Label Studio."""
    by_status = ", ".join(f"{k} {v}" for k, v in out["changed_by_status"].items()) or "none"
    typer.echo(
        f"synced {what} ({out['mode']}, {out['tasks_read']} tasks read): "
        f"{out['annotations_seen']} annotations seen, {out['changed']} changed ({by_status})"
    )
    for gone in out["missing_projects"]:
        typer.echo(
            f"  WARNING: project {gone['project_id']} of {gone['person']} ({gone['role']}) is "
            "gone from Label Studio; its labels no longer count"
        )
    for role, n in out["missing_tasks"].items():
        typer.echo(f"  WARNING: {n} task(s) of {role} are gone from Label Studio")
    if out["malformed"]:
        typer.echo(f"  {out['malformed']} annotation(s) could not be read")


@audit_app.command("sync")
def sync(
    audit: str = AUDIT_OPTION,
    study: str = STUDY_SCOPE_OPTION,
    full: bool = FULL_SYNC_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Reconcile with Label Studio both ways: new and changed annotations are verified and
    recorded, deleted ones stop counting; vanished projects or tasks are reported.

    After the first sync only the tasks changed since the last one are read; `--full`
    reads every project whole (and notices tasks deleted from Label Studio)."""

    run_sync(as_json, _audit_of(study, audit), sync_audit, "audit", full)


@audit_app.command("adjudicate")
def adjudicate_cmd(
    audit: str = AUDIT_OPTION,
    study: str = STUDY_SCOPE_OPTION,
    adjudicator: str = typer.Option(..., "--adjudicator", help="e-mail of the researcher"),
    webhook: bool = WEBHOOK_OPTION,
    receiver_check: bool = RECEIVER_CHECK_OPTION,
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Create or extend the adjudication project on the adjudicator's own server.

    It holds every pair where A and B disagree and every pair whose agreed label differs
    from the automatic one; adjudicators never see the automatic label or who answered
    what. The adjudicator is neither annotator."""

    with labelling_round(as_json, _audit_of(study, audit)) as (s, row, people, target):
        out = adjudicate(
            s,
            row,
            people,
            adjudicator=adjudicator,
            actor=actor_name(actor),
            webhook=_webhook(webhook, receiver_check),
        )
    print_adjudication({**target.as_dict(), **out}, f"{out['n_pairs']} pair(s)", as_json)
