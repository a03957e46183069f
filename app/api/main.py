"""Application factory. Everything but ``/health`` needs ``Authorization: Bearer <token>``,
the OpenAPI document (``/openapi.json``) included; the browser pages ``/docs`` and
``/redoc`` are not served (a browser cannot send the bearer token to them)."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI
from sqlalchemy import text

from app import __version__
from app.api import studies, webhooks
from app.api.deps import require_token
from study.settings import Settings


def create_app(settings: Settings | None = None, *, engine=None) -> FastAPI:  # type: ignore[no-untyped-def]
    from study.store import open_store

    settings = settings or Settings()
    token = settings.ensure_api_token().get_secret_value()
    api = FastAPI(
        title="RCEA Audit",
        version=__version__,
        description="Trajectory store, audits and reports for RCEA studies.",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,  # served below, behind the token
    )
    api.state.engine = engine if engine is not None else open_store(settings)
    api.state.api_token = token
    api.state.webhook_secret = settings.ensure_webhook_secret().get_secret_value()
    from annotation.people import people_from_settings

    api.state.people = people_from_settings(settings)

    @api.get("/health", tags=["meta"])
    def health() -> dict[str, str]:
        with api.state.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        return {"status": "ok", "version": __version__}

    @api.get("/openapi.json", include_in_schema=False, dependencies=[Depends(require_token)])
    def openapi() -> dict[str, Any]:
        return api.openapi()

    api.include_router(studies.router, dependencies=[Depends(require_token)])
    api.include_router(webhooks.router)  # authenticated by each person's webhook secret
    return api


def app_from_settings() -> FastAPI:
    """The app for one worker of ``rcea serve --workers N`` (uvicorn's factory): settings
    from the environment; the parent created the token, the secret and the schema."""
    return create_app(Settings())
