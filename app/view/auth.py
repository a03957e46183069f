"""Who uses the view: nobody sees data or takes a decision before logging in.

``RCEA_VIEW_AUTH`` chooses how:

* ``password`` (default): a login form checked against ``<data_dir>/researchers.json``
  (scrypt hashes; ``rcea view add-researcher NAME``);
* ``oidc``: Streamlit's ``st.login`` against the identity provider configured in
  ``.streamlit/secrets.toml`` (``[auth]``); the researcher is the provider's e-mail;
* ``none``: no login, decisions recorded as ``actor_name()`` — honoured only while the
  view listens on loopback; on any other address the password login applies.

The logged-in name lives in Session State under :data:`SESSION_KEY`, which no widget uses,
so a browser cannot set it; the Audit page records decisions under it.
"""

from __future__ import annotations

import time

import streamlit as st

from study import logins
from study.settings import actor_name, get_settings, is_loopback

SESSION_KEY = "_rcea_researcher"
AUTH_MODES = ("password", "oidc", "none")
FAILED_LOGIN_DELAY_S = 1.0


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
    who = st.session_state.get(SESSION_KEY)
    if not who:
        st.error("Log in to take decisions.")
        st.stop()
    return str(who)


def logout_button(who: str) -> None:
    """The sidebar's identity line and log-out button."""
    st.caption(f"Logged in as **{who}** (decisions are recorded under this name)")
    mode = auth_mode()
    if mode == "password" and st.button("Log out", key="logout"):
        st.session_state.pop(SESSION_KEY, None)
        st.rerun()
    elif mode == "oidc":
        st.button("Log out", key="logout", on_click=st.logout)


def _stop_logged_out() -> None:
    st.session_state.pop(SESSION_KEY, None)
    st.stop()


def _password() -> str:
    who = st.session_state.get(SESSION_KEY)
    if who:
        return str(who)
    path = logins.logins_path(get_settings())
    st.title("RCEA Audit — log in")
    if not logins.researchers(path):
        st.warning(
            "No researcher account yet: create one with `rcea view add-researcher NAME` "
            f"(stored hashed in {path})."
        )
        _stop_logged_out()
    with st.form("login"):
        name = st.text_input("Researcher", key="login_name")
        password = st.text_input("Password", type="password", key="login_password")
        submitted = st.form_submit_button("Log in", key="login_submit", type="primary")
    if submitted:
        if logins.verify(path, name, password):
            st.session_state[SESSION_KEY] = name.strip()
            st.rerun()
        time.sleep(FAILED_LOGIN_DELAY_S)  # slows guessing down
        st.error("Wrong researcher name or password.")
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
