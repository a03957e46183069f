"""The view's login against a guessing visitor: failures are limited per
account and for everyone (lockout with back-off; while locked not even the right password
opens the view), and an anonymous visitor cannot raise a traceback by sending a widget
state under the login's session key."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.proto.WidgetStates_pb2 import WidgetState, WidgetStates
from streamlit.testing.v1 import AppTest

from rcea.app.view import auth
from rcea.study.logins import LoginThrottle, add_researcher, logins_path
from rcea.study.settings import Settings, get_settings

MAIN = Path(auth.__file__).resolve().parent / "main.py"
PASSWORD = "right-password-1"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_account_lockout_backs_off_and_success_resets() -> None:
    clock = Clock()
    th = LoginThrottle(account_limit=5, base_lockout_s=30, max_lockout_s=900, clock=clock)
    for _ in range(4):
        assert th.failed("alice") is None
    assert th.wait("alice") == 0
    assert th.failed("alice") == "account"
    assert th.wait("alice") == 30 and th.wait(" alice ") == 30
    assert th.wait("bob") == 0  # another account is not locked
    clock.t += 31
    assert th.wait("alice") == 0
    th.failed("alice")  # the sixth failure in a row: twice as long
    assert th.wait("alice") == 60
    for _ in range(10):
        th.failed("alice")
    assert th.wait("alice") == 900  # capped
    clock.t += 901
    th.succeeded("alice")
    assert th.failed("alice") is None  # counting starts again


def test_global_limit_locks_everyone_whatever_the_names() -> None:
    clock = Clock()
    th = LoginThrottle(account_limit=5, global_limit=30, window_s=60, clock=clock)
    for i in range(30):
        assert th.failed(f"guess-{i}") is None  # one try per name: no account lock
        clock.t += 0.1
    assert th.failed("guess-30") == "all"
    assert th.wait("alice") == pytest.approx(30)
    clock.t += 31
    assert th.wait("alice") == 0
    th.failed("guess-31")  # the flood goes on: twice as long
    assert th.wait("alice") == pytest.approx(60)
    clock.t += 200  # the window is past: failures are spread out again
    assert th.failed("x") is None and th.wait("alice") == 0


@pytest.fixture
def view_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    data = tmp_path / "data"
    add_researcher(logins_path(Settings(data_dir=data)), "alice", PASSWORD)
    monkeypatch.setenv("RCEA_DATA_DIR", str(data))
    monkeypatch.setenv("RCEA_VIEW_AUTH", "password")
    monkeypatch.setattr(auth, "FAILED_LOGIN_DELAY_S", 0.0)
    get_settings.cache_clear()
    auth.THROTTLE.reset()
    yield data
    auth.THROTTLE.reset()
    get_settings.cache_clear()


def login(at: AppTest, name: str, password: str) -> AppTest:
    at.text_input(key="login_name").set_value(name)
    at.text_input(key="login_password").set_value(password)
    return at.button(key="login_submit").click().run()


def _has_form(at: AppTest) -> bool:
    return any(getattr(w, "key", None) == "login_name" for w in at.text_input)


def test_the_right_password_is_refused_after_failures_then_logged(
    view_data: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="rcea.view.login")
    # every guess from a fresh browser session (the old per-session delay did not hold)
    for n in range(5):
        at = AppTest.from_file(str(MAIN), default_timeout=60).run()
        login(at, "alice", f"guess-{n}")
        assert _has_form(at) and "Wrong researcher name or password." in [e.value for e in at.error]
    at = AppTest.from_file(str(MAIN), default_timeout=60).run()
    login(at, "alice", PASSWORD)
    assert _has_form(at)  # still the login form: not in
    assert any("Too many failed logins" in e.value for e in at.error)
    assert not at.exception
    messages = [r.getMessage() for r in caplog.records]
    assert sum("failed login: 'alice'" in m for m in messages) == 5
    assert any("locked: account" in m for m in messages)
    assert any("login refused while locked" in m for m in messages)
    # once the lockout is over the right password works
    auth.THROTTLE.reset()
    at = AppTest.from_file(str(MAIN), default_timeout=60).run()
    login(at, "alice", PASSWORD)
    assert not _has_form(at) and not at.exception


def test_widget_state_under_the_session_key_is_no_login_and_no_traceback(
    view_data: Path,
) -> None:
    """A browser sends a widget state whose id is the login's session key: no traceback,
    still the login form."""
    at = AppTest.from_file(str(MAIN), default_timeout=60).run()
    forged = WidgetStates(
        widgets=[
            WidgetState(id=auth.SESSION_KEY, string_value="alice"),
            WidgetState(id="any-name", int_value=1),
        ]
    )
    at._run(widget_state=forged)
    assert not at.exception, [e.value for e in at.exception]
    assert _has_form(at)


def test_view_command_hides_error_details() -> None:
    from rcea.app.cli.view_cmd import streamlit_command

    cmd = streamlit_command("127.0.0.1", 8501, 1000)
    assert cmd[cmd.index("--client.showErrorDetails") + 1] == "none"
