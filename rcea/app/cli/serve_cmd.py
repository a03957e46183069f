"""``rcea serve``: the FastAPI service under uvicorn."""

from __future__ import annotations

import typer

from rcea.app.cli.common import settings
from rcea.study.store import open_store


def serve(
    host: str = typer.Option(None, help="bind address (default RCEA_API_HOST)"),
    port: int = typer.Option(None, help="port (default RCEA_API_PORT)"),
    workers: int = typer.Option(
        None, min=1, help="worker processes (default RCEA_API_WORKERS; >1 wants PostgreSQL)"
    ),
) -> None:
    """Serve the REST API (bearer-token auth on everything but /health).

    The token is RCEA_API_TOKEN or <data_dir>/api-token, created on first start and never
    printed. With several workers each process has its own connection pool
    (RCEA_DB_POOL_SIZE + RCEA_DB_MAX_OVERFLOW connections at most)."""
    import uvicorn  # the server: only `rcea serve` starts it

    cfg = settings()
    host = host or cfg.api_host
    port = port or cfg.api_port
    workers = workers or cfg.api_workers
    token_file = cfg.data_dir / "api-token"
    # Token, webhook secret and schema are made once here, before any worker starts (N
    # workers creating them at once would race).
    token = cfg.ensure_api_token().get_secret_value()
    cfg.ensure_webhook_secret()
    engine = open_store(cfg)
    if token_file.exists() and token_file.read_text().strip() == token:
        typer.echo(f"bearer token: see {cfg.data_dir / 'api-token'}")
    typer.echo(
        f"serving on http://{host}:{port} (OpenAPI at /openapi.json, with the token), "
        f"{workers} worker(s)"
    )
    engine.dispose()  # the schema is migrated; each worker opens its own pool
    if workers > 1 and cfg.resolved_database_url.startswith("sqlite"):
        typer.echo("  note: several workers on SQLite serialise their writes; use PostgreSQL")
    # By import string, so that the CLI does not import the API package (rcea/app/ layering).
    uvicorn.run(
        "rcea.app.api.main:app_from_settings",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="info",
    )


def register(app: typer.Typer) -> None:
    app.command()(serve)
