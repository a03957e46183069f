"""Application factory. Everything but ``/health`` needs ``Authorization: Bearer <token>``,
the OpenAPI document (``/openapi.json``) included; the browser pages ``/docs`` and
``/redoc`` are not served (a browser cannot send the bearer token to them)."""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI

from rcea import __version__
from rcea.annotation.people import people_from_settings
from rcea.app.api import studies, webhooks
from rcea.app.api.deps import require_token
from rcea.study.labelling import sync_everything
from rcea.study.labelling.readback import ReadBackQueue
from rcea.study.settings import Settings
from rcea.study.store import open_store
from rcea.study.store.db import ping
from rcea.study.store.leader import Leadership

log = logging.getLogger("rcea.api.sync")


def _background_sync(api: FastAPI, interval: float, stop: threading.Event) -> None:
    """Every ``interval`` seconds, an incremental sync of every bound project (one
    listing call per project): what a dropped or refused (429) notification named is
    recorded at the latest one interval later. One process of the deployment syncs (the
    store's leader lock, :mod:`rcea.study.store.leader`); the others wait to take over.
    Errors are logged, never fatal."""

    leader = Leadership(api.state.engine, "background-sync")
    try:
        while not stop.wait(interval):
            try:
                if not leader.acquire():
                    continue
                results = sync_everything(api.state.engine, api.state.people)
                api.state.sync_rounds += 1
                changed = sum(sum(r.changed.values()) for r in results)
                if changed:
                    log.info("background sync: %d label(s) changed", changed)
            except Exception:  # noqa: BLE001 - the next round tries again
                log.exception("background sync failed")
    finally:
        leader.release()


def create_app(
    settings: Settings | None = None, *, engine=None, background_sync: bool = False
) -> FastAPI:
    """The API on ``settings``' store (or ``engine``). With ``background_sync`` (``rcea
    serve``) a thread syncs every bound Label Studio project incrementally each
    ``settings.sync_interval_s`` seconds (0: never) while the app runs."""

    settings = settings or Settings()
    stop = threading.Event()
    interval = settings.sync_interval_s if background_sync else 0.0

    @asynccontextmanager
    async def lifespan(api: FastAPI) -> AsyncIterator[None]:
        readback: ReadBackQueue = api.state.readback
        readback.start()
        thread = None
        if interval > 0:
            thread = threading.Thread(
                target=_background_sync, args=(api, interval, stop), daemon=True
            )
            thread.start()
        api.state.sync_thread = thread
        try:
            yield
        finally:
            stop.set()
            readback.stop()
            if thread is not None:
                thread.join(timeout=30)
                if thread.is_alive():  # a round stalled (store busy): it ends on its own
                    log.warning("background sync still in a round after 30 s; not waiting")

    token = settings.ensure_api_token().get_secret_value()
    api = FastAPI(
        title="RCEA Audit",
        version=__version__,
        description="Trajectory store, audits and reports for RCEA studies.",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,  # served below, behind the token
        lifespan=lifespan,
    )
    api.state.engine = engine if engine is not None else open_store(settings)
    api.state.api_token = token
    api.state.webhook_secret = settings.ensure_webhook_secret().get_secret_value()

    api.state.people = people_from_settings(settings)
    api.state.sync_rounds = 0  # background sync rounds this process ran
    api.state.sync_thread = None  # the background sync thread while the app runs
    # webhook read-backs run here, off the request path (started and stopped by lifespan)
    api.state.readback = ReadBackQueue(api.state.engine, api.state.people)

    @api.get("/health", tags=["meta"])
    def health() -> dict[str, str]:
        ping(api.state.engine)
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
    return create_app(Settings(), background_sync=True)
