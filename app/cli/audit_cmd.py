"""``rcea audit ...``: the blinded pair audit (rubric freeze → sample → Label Studio →
sync → adjudication → gates)."""

from __future__ import annotations

from pathlib import Path

import typer

from app.cli.common import JSON_OPTION, engine, fail, print_json
from app.settings import actor_name

audit_app = typer.Typer(
    help="The blinded same/different-strategy pair audit.", no_args_is_help=True
)
rubric_app = typer.Typer(help="Frozen audit rubrics.", no_args_is_help=True)
partition_app = typer.Typer(help="Frozen automatic partitions.", no_args_is_help=True)
audit_app.add_typer(rubric_app, name="rubric")
audit_app.add_typer(partition_app, name="partition")

ACTOR_OPTION = typer.Option(
    None,
    "--actor",
    help="who does this (default: $RCEA_ACTOR or the login name); recorded in the event log",
)


def _domain_errors() -> tuple[type[Exception], ...]:
    from app.audit.freeze import FreezeError
    from app.store import StoreError

    return (FreezeError, StoreError, ValueError, FileNotFoundError)


@rubric_app.command("freeze")
def rubric_freeze(
    rubric: Path = typer.Argument(..., help="rubric TOML"),
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Store a rubric frozen with its content hash (a change needs a new version)."""
    from app.audit.freeze import freeze_rubric
    from app.store import session_scope

    try:
        with session_scope(engine()) as s:
            row, created = freeze_rubric(s, path=rubric, actor=actor_name(actor))
            out = {
                "name": row.name,
                "version": row.version,
                "content_hash": row.content_hash,
                "created": created,
                "parent_id": row.parent_id,
            }
    except _domain_errors() as exc:
        fail(str(exc), as_json=as_json)
    if as_json:
        print_json(out)
    else:
        verb = "froze" if created else "already frozen:"
        typer.echo(f"{verb} rubric {out['name']} v{out['version']} sha256 {out['content_hash']}")


@rubric_app.command("list")
def rubric_list(as_json: bool = JSON_OPTION) -> None:
    """Frozen rubrics with their hashes."""
    from sqlmodel import select

    from app.store import session_scope
    from app.store.models import Rubric

    with session_scope(engine()) as s:
        rows = [
            {
                "name": r.name,
                "version": r.version,
                "content_hash": r.content_hash,
                "frozen_by": r.frozen_by,
                "frozen_at": r.frozen_at.isoformat(),
            }
            for r in s.exec(select(Rubric).order_by(Rubric.id)).all()
        ]
    if as_json:
        print_json(rows)
        return
    for r in rows:
        typer.echo(
            f"{r['name']} v{r['version']}  {r['content_hash'][:16]}  "
            f"{r['frozen_by']} {r['frozen_at']}"
        )


@partition_app.command("freeze")
def partition_freeze(
    study: str = typer.Option(..., "--study", help="study name"),
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Freeze the study's `mode` column as the automatic partition of its accepted
    trajectories (until the codebook cycle exports one)."""
    from app.audit.freeze import freeze_partition_from_modes
    from app.store import session_scope

    try:
        with session_scope(engine()) as s:
            part, created = freeze_partition_from_modes(s, study=study, actor=actor_name(actor))
            out = {
                "partition_id": part.id,
                "content_hash": part.content_hash,
                "n_accepted": part.n_accepted,
                "n_uncertain": part.n_uncertain,
                "created": created,
            }
    except _domain_errors() as exc:
        fail(str(exc), as_json=as_json)
    if as_json:
        print_json(out)
    else:
        typer.echo(
            f"{'froze' if created else 'unchanged:'} partition #{out['partition_id']} "
            f"of {study}: {out['n_accepted']} accepted, {out['n_uncertain']} uncertain, "
            f"sha256 {out['content_hash']}"
        )


@audit_app.command("dev-questions")
def dev_questions(
    file: Path = typer.Argument(..., help="one question id per line"),
    study: str = typer.Option(..., "--study"),
    actor: str = ACTOR_OPTION,
) -> None:
    """Record the questions used to develop codebook prompts: audits never draw them."""
    from app.audit.sampling import record_dev_questions
    from app.store import session_scope

    try:
        questions = file.read_text(encoding="utf-8").splitlines()
        with session_scope(engine()) as s:
            n = record_dev_questions(s, study=study, questions=questions, actor=actor_name(actor))
    except _domain_errors() as exc:
        fail(str(exc))
    typer.echo(f"recorded {n} development question(s) for {study}")


@audit_app.command("sample")
def sample(
    study: str = typer.Option(..., "--study", help="study name"),
    rubric: str = typer.Option(..., "--rubric", help="frozen rubric name"),
    rubric_version: str = typer.Option(None, help="rubric version (default: latest)"),
    name: str = typer.Option(None, help="audit name (default: <study>-audit-<n>)"),
    seed: int = typer.Option(None, help="override the rubric's [pairs] seed"),
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Draw the audit pairs and lock the current partition into the audit."""
    from app.audit.sampling import audit_overview, draw_audit
    from app.store import session_scope

    try:
        with session_scope(engine()) as s:
            audit = draw_audit(
                s,
                study=study,
                rubric=rubric,
                rubric_version=rubric_version,
                name=name,
                actor=actor_name(actor),
                seed=seed,
            )
            out = audit_overview(s, audit)
    except _domain_errors() as exc:
        fail(str(exc), as_json=as_json)
    if as_json:
        print_json(out)
    else:
        typer.echo(
            f"drew audit {out['audit']}: {out['n_pairs']} pairs in {out['n_questions']} "
            f"questions ({out['n_uncertain_pairs']} with an uncertain member); "
            f"rubric {out['rubric_hash'][:12]}…, partition {out['partition_hash'][:12]}…"
        )


@audit_app.command("gate")
def gate(
    audit: str = typer.Option(None, "--audit", help="audit name (default: the latest)"),
    final: bool = typer.Option(False, "--final", help="the final gate (needs adjudication)"),
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Preliminary (default) or final gate report; the final one is recorded as an event."""
    from app.audit.labels import gate_status, record_final_gate
    from app.audit.sampling import get_audit
    from app.store import session_scope

    try:
        with session_scope(engine()) as s:
            a = get_audit(s, name=audit)
            result = gate_status(s, a, final=final)
            if final:
                record_final_gate(s, a, result, actor_name(actor))
    except _domain_errors() as exc:
        fail(str(exc), as_json=as_json)
    if as_json:
        print_json(result)
        return
    _print_gate_status(result)


def _print_gate_status(result: dict) -> None:  # type: ignore[type-arg]
    from app.cli.stats_cmd import _print_gate

    prog = result["progress"]
    typer.echo(
        f"audit {result['audit']}: status {result['status']} "
        f"(A {prog['A']}/{result['n_pairs']}, B {prog['B']}/{result['n_pairs']}, "
        f"adjudicated {prog['adjudicator']}/{result['n_needing_adjudication']})"
    )
    typer.echo(f"rubric {result['rubric_hash'][:16]}…  partition {result['partition_hash'][:16]}…")
    if result["report"]:
        _print_gate(result["report"])


def register(app: typer.Typer) -> None:
    app.add_typer(audit_app, name="audit")


# --------------------------------------------------------------------------- Label Studio


def _ls_client():  # type: ignore[no-untyped-def]
    from annotation.client import client_from_settings
    from app.cli.common import settings

    return client_from_settings(settings())


def _ensure_person(email: str, password: str | None) -> tuple[int, str | None]:
    """Find or create a Label Studio account; return (user id, new password or None)."""
    import secrets

    from annotation.accounts import create_annotator
    from annotation.server import admin_credentials
    from app.cli.common import settings

    cfg = settings()
    password = password or secrets.token_urlsafe(12)
    # create_annotator is idempotent: an existing account is returned unchanged.
    person = create_annotator(cfg.labelstudio_url, admin_credentials(cfg).token, email, password)
    return person.id, password if person.created else None


@audit_app.command("push")
def push(
    audit: str = typer.Option(None, "--audit", help="audit name (default: the latest)"),
    annotator_a: str = typer.Option(..., "--annotator-a", help="e-mail of annotator A"),
    annotator_b: str = typer.Option(..., "--annotator-b", help="e-mail of annotator B"),
    webhook: bool = typer.Option(True, help="register the live-sync webhook"),
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """One Label Studio project per annotator with the same blinded tasks (idempotent).

    Accounts that do not exist yet are created through the invite flow; their passwords
    are printed once, for handing to the annotators."""
    from tqdm import tqdm

    from app.audit.push import assign_role, push_audit
    from app.audit.sampling import audit_pairs, get_audit
    from app.cli.common import settings
    from app.store import session_scope

    if annotator_a.lower() == annotator_b.lower():
        fail("annotators A and B must be two different people", as_json=as_json)
    cfg = settings()
    try:
        client = _ls_client()
        people = {
            role: (email, *_ensure_person(email, None))
            for role, email in (("A", annotator_a), ("B", annotator_b))
        }
        with session_scope(engine()) as s:
            a = get_audit(s, name=audit)
            for role, (email, user_id, _) in people.items():
                assign_role(a, role, user_id=user_id, email=email.lower())
            total = 2 * len(audit_pairs(s, audit_id=a.id))
            with tqdm(total=total, unit="task", desc="push", disable=as_json) as bar:
                out = push_audit(
                    s,
                    a,
                    client,
                    actor=actor_name(actor),
                    progress=bar.update,
                    webhook_url=cfg.resolved_webhook_url if webhook else None,
                    webhook_secret=cfg.ensure_webhook_secret().get_secret_value()
                    if webhook
                    else None,
                )
    except _domain_errors() + (RuntimeError,) as exc:
        fail(str(exc), as_json=as_json)
    logins = {role: {"email": email, "password": pw} for role, (email, _, pw) in people.items()}
    if as_json:
        print_json(
            {
                **out,
                "url": cfg.labelstudio_url,
                "new_accounts": {r: v for r, v in logins.items() if v["password"]},
            }
        )
        return
    for role, info in out["projects"].items():
        typer.echo(
            f"annotator {role}: project {info['project_id']}, {info['n_tasks']} tasks "
            f"({info['n_new']} new)"
        )
    typer.echo(f"Label Studio: {cfg.labelstudio_url}/projects/")
    for role, info in logins.items():
        if info["password"]:
            typer.echo(f"  new login for annotator {role}: {info['email']} / {info['password']}")


@audit_app.command("sync")
def sync(
    audit: str = typer.Option(None, "--audit", help="audit name (default: latest)"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Pull every annotation from Label Studio (idempotent; catches missed webhooks)."""
    from app.audit.push import sync_audit
    from app.audit.sampling import get_audit
    from app.store import session_scope

    try:
        client = _ls_client()
        with session_scope(engine()) as s:
            out = sync_audit(s, get_audit(s, name=audit), client)
    except _domain_errors() + (RuntimeError,) as exc:
        fail(str(exc), as_json=as_json)
    if as_json:
        print_json(out)
    else:
        typer.echo(
            f"synced {out['audit']}: {out['annotations_seen']} annotations seen, "
            f"{out['changed']} new or changed"
        )


@audit_app.command("adjudicate")
def adjudicate_cmd(
    audit: str = typer.Option(None, "--audit", help="audit name (default: the latest)"),
    adjudicator: str = typer.Option(..., "--adjudicator", help="e-mail of the researcher"),
    actor: str = ACTOR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Create or extend the adjudication project for researchers.

    It holds every pair where A and B disagree and every pair whose agreed label differs
    from the automatic one; adjudicators never see the automatic label or who answered
    what."""
    from app.audit.push import adjudicate, assign_role
    from app.audit.sampling import get_audit
    from app.cli.common import settings
    from app.store import session_scope

    cfg = settings()
    try:
        client = _ls_client()
        user_id, password = _ensure_person(adjudicator, None)
        with session_scope(engine()) as s:
            a = get_audit(s, name=audit)
            assign_role(a, "adjudicator", user_id=user_id, email=adjudicator.lower())
            out = adjudicate(
                s,
                a,
                client,
                actor=actor_name(actor),
                webhook_url=cfg.resolved_webhook_url,
                webhook_secret=cfg.ensure_webhook_secret().get_secret_value(),
            )
    except _domain_errors() + (RuntimeError,) as exc:
        fail(str(exc), as_json=as_json)
    if as_json:
        print_json({**out, "new_password": password})
        return
    typer.echo(
        f"adjudication project {out['project_id']}: {out['n_pairs']} pair(s) ({out['n_new']} new)"
    )
    if password:
        typer.echo(f"  new login for the adjudicator: {adjudicator} / {password}")
