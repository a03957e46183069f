"""``rcea demo``: what exists of the embedded study, end to end, on a fresh machine."""

from __future__ import annotations

import typer

from app.cli.common import engine, settings


def demo(
    study: str = typer.Option("sample", help="study name for the demo data"),
    seed: int = typer.Option(0, help="seed of the generated sample study"),
    serve: bool = typer.Option(False, "--serve", help="then serve the API and the view"),
) -> None:
    """Ingest the bundled sample study and print its summary (--serve: then serve).

    With --serve the API and the Streamlit view keep running until Ctrl-C."""
    from app.ingest import ingest_file
    from app.store import require_study, session_scope, study_summary
    from pipeline.sample_study import write_sample_study

    cfg = settings()
    cfg.ensure_data_dir()
    path = write_sample_study(cfg.data_dir / "demo" / f"{study}-seed{seed}.jsonl", seed=seed)
    typer.echo(f"[1/2] wrote sample records to {path}")
    eng = engine()
    result = ingest_file(
        eng,
        path,
        study=study,
        artifacts_dir=cfg.artifacts_dir,
        data_dir=cfg.data_dir,
        progress=False,
    )
    typer.echo(f"[2/2] {result.summary()}")
    with session_scope(eng) as session:
        data = study_summary(session, study_id=require_study(session, name=study).id)
    for g in data["groups"]:
        acc = g["n_success"] / g["n"] if g["n"] else 0.0
        typer.echo(
            f"      {g['run']:<10} step {g['step']:>4}: {g['n']:>4} samples, accuracy {acc:.2f}"
        )


def register(app: typer.Typer) -> None:
    app.command()(demo)


def _serve_all(cfg) -> None:  # type: ignore[no-untyped-def]
    """Run `rcea serve` and `rcea view` side by side until Ctrl-C, then stop both."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    exe = str(Path(sys.executable).parent / "rcea")
    procs = [
        subprocess.Popen([exe, "serve"]),
        subprocess.Popen([exe, "view", "--port", str(cfg.view_port)]),
    ]
    typer.echo(
        f"API  http://{cfg.api_host}:{cfg.api_port}/docs "
        f"(bearer token in {cfg.data_dir / 'api-token'})"
    )
    typer.echo(f"view http://127.0.0.1:{cfg.view_port}  — Ctrl-C stops both")
    try:
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
