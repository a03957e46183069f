"""A required service that is missing fails the run instead of skipping it:
under ``CI`` or ``RCEA_REQUIRE_POSTGRES=1`` a PostgreSQL test with no server fails; without
them it skips, and the terminal summary names the skipped test and why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tests.support.helpers as helpers

REPO = Path(__file__).resolve().parents[1]
TEST = "tests/study/store/test_store.py::test_event_needs_actor"
NO_SERVER = "postgresql+psycopg://postgres@127.0.0.1:9/test"  # port 9 (discard): never PG


def _pytest(extra_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "CI" and not k.startswith(("RCEA_", "HYPOTHESIS_"))
    }
    env |= {"PYTHONPATH": str(REPO), "RCEA_TEST_POSTGRES_URL": NO_SERVER, **extra_env}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", TEST],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_missing_postgres_skips_locally_and_the_summary_names_it() -> None:
    out = _pytest({})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 passed, 1 skipped in" in out.stdout
    assert "1 skipped tests, each with its reason" in out.stdout
    assert f"SKIPPED {TEST}[postgres]: no PostgreSQL server answers at {NO_SERVER}" in out.stdout


@pytest.mark.parametrize("env", [{"RCEA_REQUIRE_POSTGRES": "1"}, {"CI": "true"}])
def test_missing_postgres_fails_when_required(env: dict[str, str]) -> None:
    out = _pytest(env)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "1 passed, 1 error in" in out.stdout  # a fixture that fails: an error
    why = "CI is set" if "CI" in env else "RCEA_REQUIRE_POSTGRES=1 is set"
    assert f"required service missing ({why}): no PostgreSQL server answers" in out.stdout
    assert "SKIPPED" not in out.stdout


def _python(code: str, extra_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -c CODE`` in the repository under ``extra_env`` (no CI or Hypothesis
    variables of this run)."""
    env = {k: v for k, v in os.environ.items() if k != "CI" and not k.startswith("HYPOTHESIS_")}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO), **extra_env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _profile(extra_env: dict[str, str]) -> str:
    """The profile tests/conftest.py loads under ``extra_env`` (imported, not a session)."""
    code = "import tests.conftest as c; print(c.HYPOTHESIS_PROFILE)"
    return _python(code, extra_env).stdout.strip()


def test_ci_loads_the_derandomised_hypothesis_profile() -> None:
    # the session header names it (one whole session); the other settings by import
    assert "hypothesis profile: ci" in _pytest({"CI": "1"}).stdout
    assert _profile({"HYPOTHESIS_PROFILE": "ci"}) == "ci"
    assert _profile({}) == "dev"
    assert _profile({"CI": "true", "HYPOTHESIS_PROFILE": "dev"}) == "dev"


def test_missing_chromium_fails_when_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(helpers, "CHROMIUM", "/nonexistent/chromium")
    monkeypatch.setitem(helpers.REQUIRED_SERVICES, "browser", True)
    with pytest.raises(pytest.fail.Exception, match="required service missing.*chromium"):
        helpers.chromium_executable()
    monkeypatch.setitem(helpers.REQUIRED_SERVICES, "browser", False)
    with pytest.raises(pytest.skip.Exception, match="/nonexistent/chromium missing"):
        helpers.chromium_executable()


def test_the_ci_profile_reaches_per_test_settings() -> None:
    """A test's own ``@settings(max_examples=...)`` inherits the derandomised profile."""
    code = (
        "import tests.conftest; from hypothesis import settings; "
        "s = settings(max_examples=5); print(settings.default.derandomize, s.derandomize, "
        "s.database, s.max_examples)"
    )
    for extra, expected in (({"CI": "true"}, "True True None 5"), ({}, "False False")):
        out = _python(code, extra)
        assert out.stdout.startswith(expected), out.stdout + out.stderr
