"""The view as ``rcea view`` serves it: the Streamlit app (``main.py``) as an ``st.App``
with one middleware that closes ``/_stcore/metrics`` (process statistics answered
without a login: Streamlit has no option to turn it off) and the HTTP login the front door
holds (``/_rcea/login``, :mod:`rcea.app.view.door_login`). ``streamlit run`` finds the
``app`` below and serves it (docs/security.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse

from rcea.app.view.door_login import ROUTES

CLOSED = ("/_stcore/metrics",)


class CloseRoutes:
    """ASGI middleware: 404 for the closed Streamlit routes (any base path)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = str(scope.get("path", "")).rstrip("/")
        if scope.get("type") == "http" and path.endswith(CLOSED):
            await PlainTextResponse("not found", status_code=404)(scope, receive, send)
            return
        await self.app(scope, receive, send)


app = st.App(
    str(Path(__file__).with_name("main.py")),
    routes=ROUTES,
    middleware=[Middleware(CloseRoutes)],
)
