"""``rcea demo``: what exists of the embedded study, end to end, on a fresh machine."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import typer

from app.cli.common import engine, settings

DEMO_RUBRIC = Path(__file__).resolve().parents[2] / "audits" / "demo_rubric.toml"
DEMO_ANNOTATORS = {"A": "annotator-a@rcea.local", "B": "annotator-b@rcea.local"}
DEMO_ACTOR = "rcea-demo"


def demo(
    study: str = typer.Option("sample", help="study name for the demo data"),
    seed: int = typer.Option(0, help="seed of the generated sample study"),
    serve: bool = typer.Option(
        False, "--serve", help="then start Label Studio, push the audit, serve API and view"
    ),
) -> None:
    """Ingest the bundled sample study and draw its pair audit (--serve: then serve it).

    With --serve: Label Studio starts, the audit is pushed to two annotator projects, and
    the API and the Streamlit view run until Ctrl-C, which stops what the demo started."""
    from app.ingest import ingest_file
    from app.store import require_study, session_scope, study_summary
    from pipeline.sample_study import write_sample_study

    cfg = settings()
    cfg.ensure_data_dir()
    path = write_sample_study(cfg.data_dir / "demo" / f"{study}-seed{seed}.jsonl", seed=seed)
    typer.echo(f"[1/4] wrote sample records to {path}")
    eng = engine()
    result = ingest_file(
        eng,
        path,
        study=study,
        artifacts_dir=cfg.artifacts_dir,
        data_dir=cfg.data_dir,
        progress=False,
    )
    typer.echo(f"[2/4] {result.summary()}")
    with session_scope(eng) as session:
        data = study_summary(session, study_id=require_study(session, name=study).id)
    for g in data["groups"]:
        acc = g["n_success"] / g["n"] if g["n"] else 0.0
        typer.echo(
            f"      {g['run']:<10} step {g['step']:>4}: {g['n']:>4} samples, accuracy {acc:.2f}"
        )
    audit_name = _draw_demo_audit(eng, study)
    if serve:
        _serve_all(cfg, audit_name)


def _draw_demo_audit(eng: Any, study: str) -> str:
    """Freeze the demo rubric and the partition, and draw the audit once (idempotent)."""
    from sqlmodel import select

    from app.audit.freeze import freeze_partition_from_modes, freeze_rubric
    from app.audit.sampling import audit_overview, draw_audit
    from app.store import require_study, session_scope
    from app.store.models import Audit

    name = f"{study}-demo-audit"
    with session_scope(eng) as s:
        rubric, _ = freeze_rubric(s, path=DEMO_RUBRIC, actor=DEMO_ACTOR)
        part, _ = freeze_partition_from_modes(s, study=study, actor=DEMO_ACTOR)
        audit = s.exec(select(Audit).where(Audit.name == name)).first()
        if audit is None:
            audit = draw_audit(s, study=study, rubric=rubric.name, name=name, actor=DEMO_ACTOR)
        info = audit_overview(s, audit)
        require_study(s, name=study)
    typer.echo(
        f"[3/4] rubric {rubric.name} v{rubric.version} ({rubric.content_hash[:12]}…), "
        f"partition {part.content_hash[:12]}… frozen"
    )
    typer.echo(f"[4/4] audit {name}: {info['n_pairs']} pairs in {info['n_questions']} questions")
    return name


def _push_demo_audit(cfg: Any, audit_name: str) -> dict[str, str | None]:
    """Start Label Studio (if needed) and push the audit to two demo annotators."""
    from annotation.accounts import create_annotator
    from annotation.client import client_from_settings
    from annotation.server import admin_credentials
    from app.audit.push import assign_role, push_audit
    from app.audit.sampling import get_audit
    from app.store import session_scope

    creds = admin_credentials(cfg)
    # Demo logins are meant for people: kept (0600) so that later runs can show them again.
    store = cfg.data_dir / "demo-logins.json"
    saved: dict[str, str] = json.loads(store.read_text()) if store.exists() else {}
    ids: dict[str, int] = {}
    for role, email in DEMO_ANNOTATORS.items():
        password = saved.get(email) or secrets.token_urlsafe(9)
        user = create_annotator(cfg.labelstudio_url, creds.token, email, password)
        if user.created:
            saved[email] = password
        ids[role] = user.id
    store.touch(mode=0o600)
    store.write_text(json.dumps(saved, indent=2))
    logins: dict[str, str | None] = {e: saved.get(e) for e in DEMO_ANNOTATORS.values()}
    with session_scope(engine()) as s:
        audit = get_audit(s, name=audit_name)
        for role, email in DEMO_ANNOTATORS.items():
            assign_role(audit, role, user_id=ids[role], email=email)
        out = push_audit(
            s,
            audit,
            client_from_settings(cfg),
            actor=DEMO_ACTOR,
            webhook_url=cfg.resolved_webhook_url,
            webhook_secret=cfg.ensure_webhook_secret().get_secret_value(),
        )
    for role, info in out["projects"].items():
        typer.echo(
            f"      annotator {role}: Label Studio project {info['project_id']} "
            f"({info['n_tasks']} tasks)"
        )
    return logins


def _serve_all(cfg: Any, audit_name: str) -> None:
    """Label Studio + `rcea serve` + `rcea view` until Ctrl-C; then stop what we started."""
    from annotation.server import server_from_settings

    ls = server_from_settings(cfg)
    started_ls = not ls.status().running
    typer.echo("starting Label Studio (the first start takes a minute or two)…")
    ls.start()
    exe = str(Path(sys.executable).parent / "rcea")
    procs = [
        subprocess.Popen([exe, "serve"]),
        subprocess.Popen([exe, "view", "--port", str(cfg.view_port)]),
    ]
    try:
        logins = _push_demo_audit(cfg, audit_name)
        typer.echo("")
        typer.echo(f"Label Studio  {cfg.labelstudio_url}/user/login/")
        for email, password in logins.items():
            shown = password or "(account made outside the demo: password unknown)"
            typer.echo(f"  annotator login: {email} / {shown}")
        typer.echo(
            f"API           http://{cfg.api_host}:{cfg.api_port}/docs "
            f"(bearer token in {cfg.data_dir / 'api-token'})"
        )
        typer.echo(f"view          http://127.0.0.1:{cfg.view_port}")
        typer.echo("label pairs in Label Studio, then: rcea audit gate   — Ctrl-C stops all")
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # noqa: BLE001 - report cleanly, then stop what we started
        typer.echo(f"error: {type(exc).__name__}: {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        if started_ls:
            ls.stop()


def register(app: typer.Typer) -> None:
    app.command()(demo)
