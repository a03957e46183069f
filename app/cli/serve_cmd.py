"""``rcea serve``: the FastAPI service under uvicorn."""

from __future__ import annotations

import typer

from app.cli.common import settings


def serve(
    host: str = typer.Option(None, help="bind address (default RCEA_API_HOST)"),
    port: int = typer.Option(None, help="port (default RCEA_API_PORT)"),
) -> None:
    """Serve the REST API (bearer-token auth on everything but /health).

    The token is RCEA_API_TOKEN or <data_dir>/api-token, created on first start and never
    printed."""
    import uvicorn

    from app.api import create_app

    cfg = settings()
    api = create_app(cfg)
    host = host or cfg.api_host
    port = port or cfg.api_port
    token_file = cfg.data_dir / "api-token"
    token = cfg.ensure_api_token().get_secret_value()
    if token_file.exists() and token_file.read_text().strip() == token:
        typer.echo(f"bearer token: see {cfg.data_dir / 'api-token'}")
    typer.echo(f"serving on http://{host}:{port} (OpenAPI at /docs)")
    uvicorn.run(api, host=host, port=port, log_level="info")


def register(app: typer.Typer) -> None:
    app.command()(serve)
