"""Who uses the view: nobody sees data or takes a decision before logging in.

``RCEA_VIEW_AUTH`` chooses how:

* ``password`` (default): a login form checked against ``<data_dir>/researchers.json``
  (scrypt hashes; ``rcea view add-researcher NAME``);
* ``oidc``: Streamlit's ``st.login`` against the identity provider configured in
  ``.streamlit/secrets.toml`` (``[auth]``); the researcher is the provider's e-mail;
* ``none``: no login, decisions recorded as ``actor_name()`` — honoured only while the
  view listens on loopback; on any other address the password login applies.

The logged-in name lives in Session State under :data:`SESSION_KEY`, which no widget uses,
so a browser cannot set it (a widget state a browser sends under that id is never read as
a login: it is ignored, never a traceback); the Audit page records decisions under it.

Behind the front door (a request nginx forwarded: ``X-Forwarded-Proto: https``, which the
door always sets) the password form is never shown: the login is the plain HTTP form at
``/_rcea/login`` (:mod:`rcea.app.view.door_login`), which the door rate-limits like Label
Studio's and which sets a signed session cookie (:func:`rcea.study.logins.issue_session`);
the script reads the researcher from that cookie. On loopback without the door the form
works as before (and the cookie too).

Failed logins are limited per account and for everyone (:data:`THROTTLE`, one per view
process, shared by the form and ``/_rcea/login``: lockout with back-off, every failure and
lockout logged, :func:`attempt_login`); ``rcea view`` also turns
Streamlit's error details off (``client.showErrorDetails none``), so no code path shows an
anonymous visitor a traceback.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass

import streamlit as st

from rcea.study import logins
from rcea.study.settings import actor_name, get_settings, is_loopback

SESSION_KEY = "_rcea_researcher"
AUTH_MODES = ("password", "oidc", "none")
FAILED_LOGIN_DELAY_S = 1.0
THROTTLE = logins.LoginThrottle()
log = logging.getLogger("rcea.view.login")
LOGIN_PATH = "/_rcea/login"  # the HTTP login (rcea/app/view/door_login.py)
LOGOUT_PATH = "/_rcea/logout"


@dataclass(frozen=True)
class Attempt:
    """What one login attempt gave: the researcher, or why not (``wait_s`` > 0: locked)."""

    researcher: str | None
    wait_s: float = 0.0

    @property
    def message(self) -> str:
        if self.researcher:
            return f"Logged in as {self.researcher}."
        if self.wait_s > 0:
            return f"Too many failed logins: try again in {self.wait_s:.0f} s."
        return "Wrong researcher name or password."


def attempt_login(name: str, password: str) -> Attempt:
    """One login attempt against ``researchers.json`` under :data:`THROTTLE` (the one rule
    of the form and of ``/_rcea/login``): while locked not even the right password is
    checked; every failure and lockout is logged. The caller waits
    :data:`FAILED_LOGIN_DELAY_S` after a failure."""
    path = logins.logins_path(get_settings())
    wait = THROTTLE.wait(name)
    if wait > 0:
        log.warning("login refused while locked: %r (%.0f s left)", name[:200], wait)
        return Attempt(None, wait)
    if logins.verify(path, name, password):
        THROTTLE.succeeded(name)
        log.info("login: %r", name.strip()[:200])
        return Attempt(name.strip())
    locked = THROTTLE.failed(name)
    log.warning("failed login: %r%s", name[:200], f" (locked: {locked})" if locked else "")
    return Attempt(None)


def through_door(headers: object) -> bool:
    """Whether a request came through the front door: nginx sets ``X-Forwarded-Proto:
    https`` on every request it passes (over whatever a browser sent); a browser on
    loopback reaching the view directly does not go through nginx."""
    get = getattr(headers, "get", None)
    value = get("x-forwarded-proto") if get else None
    return str(value or "").strip().lower() == "https"


def cookie_researcher(cookies: object) -> str | None:
    """The researcher the request's session cookie logs in (None: none, forged, expired,
    account removed or reset)."""
    get = getattr(cookies, "get", None)
    token = get(logins.SESSION_COOKIE) if get else None
    if not token:
        return None
    cfg = get_settings()
    key = logins.session_key(logins.session_key_path(cfg))
    return logins.session_researcher(logins.logins_path(cfg), key, str(token))


def _stored() -> str | None:
    """The logged-in name in Session State; None when there is none, or when what sits
    there is not a name this module stored (a browser-sent widget state: Streamlit raises
    KeyError reading it)."""
    try:
        who = st.session_state.get(SESSION_KEY)
    except Exception:  # noqa: BLE001 - never a traceback for an anonymous visitor
        who = None
    return who if isinstance(who, str) and who else None


def drop_forged_widget_states() -> None:
    """Drop the widget states a browser sent under ids that are no widget's (no element
    id, no metadata): Streamlit raises KeyError on them in every keyed widget, a traceback
    any anonymous visitor could trigger. Run before the first widget of a script run."""
    try:  # Streamlit's private internals: another version may lack them (caught below)
        from streamlit.runtime.state.common import is_element_id
        from streamlit.runtime.state.session_state_proxy import get_session_state

        safe = get_session_state()
        with safe._lock:  # noqa: SLF001 - Streamlit has no public API for this
            widgets = safe._state._new_widget_state  # noqa: SLF001
            forged = [
                k
                for k in widgets.states
                if not is_element_id(k) and k not in widgets.widget_metadata
            ]
            for k in forged:
                del widgets.states[k]
        if forged:
            log.warning("dropped %d widget state(s) under no widget's id", len(forged))
    except Exception:  # noqa: BLE001 - a Streamlit without these internals: nothing to drop
        log.debug("could not inspect widget states", exc_info=True)


def _forget() -> None:
    with contextlib.suppress(Exception):  # see _stored
        st.session_state.pop(SESSION_KEY, None)


def auth_mode() -> str:
    """The configured mode; ``none`` off loopback becomes ``password``."""
    mode = get_settings().view_auth
    if mode not in AUTH_MODES:
        st.error(f"RCEA_VIEW_AUTH={mode!r}: choose one of {', '.join(AUTH_MODES)}")
        st.stop()
    address = str(st.get_option("server.address") or "")  # empty: every interface
    if mode == "none" and not is_loopback(address):
        return "password"
    return mode


def require_researcher() -> str:
    """The logged-in researcher's name; otherwise the login (or why there is none) is
    shown and the script run stops here, before any read of the store."""
    drop_forged_widget_states()
    mode = auth_mode()
    if mode == "none":
        who = actor_name()
    elif mode == "oidc":
        who = _oidc()
    else:
        who = _password()
    st.session_state[SESSION_KEY] = who
    return who


def current_researcher() -> str:
    """The name decisions are recorded under (set by :func:`require_researcher`)."""
    who = _stored()
    if not who:
        st.error("Log in to take decisions.")
        st.stop()
    return str(who)


def logout_button(who: str) -> None:
    """The sidebar's identity line and log-out button."""
    st.caption(f"Logged in as **{who}** (decisions are recorded under this name)")
    mode = auth_mode()
    if mode == "password" and _from_cookie():
        # the session cookie is HttpOnly: the HTTP log-out clears it
        st.markdown(f'<a href="{LOGOUT_PATH}" target="_self">Log out</a>', unsafe_allow_html=True)
    elif mode == "password" and st.button("Log out", key="logout"):
        _forget()
        st.rerun()
    elif mode == "oidc":
        st.button("Log out", key="logout", on_click=st.logout)


def _stop_logged_out() -> None:
    _forget()
    st.stop()


def _context(attr: str) -> object:
    try:
        return getattr(st.context, attr)
    except Exception:  # noqa: BLE001 - no request context (AppTest): none
        return {}


def _from_cookie() -> str | None:
    try:
        return cookie_researcher(_context("cookies"))
    except Exception:  # noqa: BLE001 - an unreadable key or accounts file: no login
        log.exception("could not check the session cookie")
        return None


def _password() -> str:
    who = _stored()
    if who:
        return who
    who = _from_cookie()
    if who:
        return who
    path = logins.logins_path(get_settings())
    st.title("RCEA Audit — log in")
    if not logins.researchers(path):
        st.warning(
            "No researcher account yet: create one with `rcea view add-researcher NAME` "
            f"(stored hashed in {path})."
        )
        _stop_logged_out()
    if through_door(_context("headers")):
        # at the door the login is the HTTP form nginx holds, never this websocket form
        st.markdown(f'<a href="{LOGIN_PATH}" target="_self">Log in</a>', unsafe_allow_html=True)
        _stop_logged_out()
    with st.form("login"):
        name = st.text_input("Researcher", key="login_name")
        password = st.text_input("Password", type="password", key="login_password")
        submitted = st.form_submit_button("Log in", key="login_submit", type="primary")
    if submitted:
        attempt = attempt_login(name, password)
        if attempt.researcher:
            st.session_state[SESSION_KEY] = attempt.researcher
            st.rerun()
        if attempt.wait_s <= 0:
            time.sleep(FAILED_LOGIN_DELAY_S)  # slows guessing down
        st.error(attempt.message)
    _stop_logged_out()
    raise AssertionError("unreachable")  # st.stop() ends the script run


def _oidc() -> str:
    try:
        configured = "auth" in st.secrets
    except Exception:  # noqa: BLE001 - no or unreadable secrets file
        configured = False
    if not configured:
        st.error(
            "RCEA_VIEW_AUTH=oidc needs an [auth] section (redirect_uri, cookie_secret, "
            "client_id, client_secret, server_metadata_url) in .streamlit/secrets.toml"
        )
        _stop_logged_out()
    if not st.user.is_logged_in:
        st.title("RCEA Audit — log in")
        st.button("Log in with your identity provider", key="oidc_login", on_click=st.login)
        _stop_logged_out()
    who = st.user.get("email") or st.user.get("name") or st.user.get("sub")
    if not who:
        st.error("The identity provider returned no e-mail, name or subject.")
        _stop_logged_out()
    return str(who)
