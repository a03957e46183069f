"""The view's login as plain HTTP, for the front door (docs/team.md, docs/security.md).

Streamlit's own form talks over its websocket, where nginx cannot count attempts. These two
routes, served by ``rcea view`` itself (:mod:`rcea.app.view.server`), make the login an
ordinary ``POST`` the door holds like Label Studio's (``limit_req``, 429 beyond):

* ``GET /_rcea/login``: a small HTML form (no script, no outside resource);
* ``POST /_rcea/login`` (``name``, ``password``, form-encoded): checked by
  :func:`rcea.app.view.auth.attempt_login`, the form's own rule (the view's lockout and log
  stay); a right password answers 303 to the view with the session cookie (signed, HttpOnly,
  SameSite=Lax, Secure when it came through the door), a wrong one 401, a locked account
  429 with ``Retry-After``;
* ``GET /_rcea/logout``: clears the cookie and shows the login form.

A POST whose ``Origin`` is another site's is refused (403): no page elsewhere logs a browser
in under someone else's account.
"""

from __future__ import annotations

import asyncio
import html
import math
from urllib.parse import parse_qs, urlsplit

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from rcea.app.view import auth
from rcea.study import logins
from rcea.study.settings import get_settings

MAX_FORM = 16 * 1024  # a name and a password; anything larger is refused
HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "form-action 'self'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
}


def _page(message: str = "", status: int = 200, headers: dict[str, str] | None = None) -> Response:
    note = f'<p role="alert">{html.escape(message)}</p>' if message else ""
    body = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>RCEA Audit — log in</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font-family:sans-serif;max-width:24rem;margin:4rem auto}}
label,input,button{{display:block;width:100%;margin:.3rem 0}}</style></head>
<body><h1>RCEA Audit — log in</h1>{note}
<form method="post" action="{auth.LOGIN_PATH}">
<label for="name">Researcher</label><input id="name" name="name" autocomplete="username" required>
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required>
<button type="submit">Log in</button></form></body></html>
"""
    return HTMLResponse(body, status_code=status, headers={**HEADERS, **(headers or {})})


def _foreign_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    if not origin or origin == "null":
        return origin == "null"
    return urlsplit(origin).netloc.lower() != request.headers.get("host", "").lower()


async def _form(request: Request) -> dict[str, str] | None:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            return None
    fields = parse_qs(body.decode("utf-8", errors="replace"), max_num_fields=10)
    return {k: v[0] for k, v in fields.items() if v}


async def login_page(request: Request) -> Response:
    return _page()


async def login(request: Request) -> Response:
    if _foreign_origin(request):
        return _page("Log in from this page.", 403)
    form = await _form(request)
    if form is None:
        return _page("The form is too large.", 413)
    name, password = form.get("name", ""), form.get("password", "")
    # the scrypt check and the account file off the event loop
    attempt = await asyncio.to_thread(auth.attempt_login, name, password)
    if attempt.researcher is None:
        if attempt.wait_s > 0:
            retry = {"Retry-After": str(math.ceil(attempt.wait_s))}
            return _page(attempt.message, 429, retry)
        await asyncio.sleep(auth.FAILED_LOGIN_DELAY_S)  # slows guessing down
        return _page(attempt.message, 401)
    cfg = get_settings()
    key = await asyncio.to_thread(logins.session_key, logins.session_key_path(cfg))
    token = logins.issue_session(logins.logins_path(cfg), key, attempt.researcher)
    out = RedirectResponse("/", status_code=303, headers=HEADERS)
    out.set_cookie(
        logins.SESSION_COOKIE,
        token,
        max_age=int(logins.SESSION_TTL_S),
        path="/",
        secure=auth.through_door(request.headers),
        httponly=True,
        samesite="lax",
    )
    return out


async def logout(request: Request) -> Response:
    out = _page("Logged out.")
    out.delete_cookie(
        logins.SESSION_COOKIE,
        path="/",
        secure=auth.through_door(request.headers),
        httponly=True,
        samesite="lax",
    )
    return out


ROUTES = [
    Route(auth.LOGIN_PATH, login_page, methods=["GET"]),
    Route(auth.LOGIN_PATH, login, methods=["POST"]),
    Route(auth.LOGOUT_PATH, logout, methods=["GET"]),
]
