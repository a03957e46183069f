from __future__ import annotations

import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rcea.study.settings import Settings


def test_env_prefix_and_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RCEA_LLM_MODEL", "judge-7b")
    s = Settings()
    assert s.llm_model == "judge-7b"
    assert s.data_dir == tmp_path / "data"
    assert s.resolved_database_url == f"sqlite:///{(tmp_path / 'data' / 'rcea.db').resolve()}"


def test_dotenv_file_is_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("RCEA_LABELSTUDIO_URL=http://127.0.0.1:9999\n")
    assert Settings().labelstudio_url == "http://127.0.0.1:9999"


def test_postgres_url_uses_psycopg3(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RCEA_DATABASE_URL", "postgresql://u:pw@db:5432/rcea")
    assert Settings().resolved_database_url == "postgresql+psycopg://u:pw@db:5432/rcea"


def test_secrets_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-very-secret-value"
    monkeypatch.setenv("RCEA_LLM_API_KEY", secret)
    monkeypatch.setenv("RCEA_API_TOKEN", secret + "2")
    monkeypatch.setenv("RCEA_LABELSTUDIO_TOKEN", secret + "3")
    monkeypatch.setenv("RCEA_DATABASE_URL", f"postgresql://u:{secret}@db/rcea")
    s = Settings()
    assert s.llm_api_key is not None and s.llm_api_key.get_secret_value() == secret
    assert secret not in repr(s) and secret not in str(s)
    assert secret not in str(s.public_dict())

    from rcea.app.cli import app
    from rcea.study.settings import get_settings

    get_settings.cache_clear()
    out = CliRunner().invoke(app, ["config", "--json"])
    assert out.exit_code == 0, out.output
    assert secret not in out.output
    assert '"llm_api_key": "<set>"' in out.output


def test_generated_api_token_is_private(tmp_path: Path) -> None:
    s = Settings(data_dir=tmp_path / "d")
    token = s.ensure_api_token().get_secret_value()
    path = tmp_path / "d" / "api-token"
    assert path.read_text().strip() == token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # The same token is reused on the next start.
    assert Settings(data_dir=tmp_path / "d").ensure_api_token().get_secret_value() == token


def test_actor_name_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    import getpass

    from rcea.study.settings import actor_name

    monkeypatch.delenv("RCEA_ACTOR", raising=False)
    assert actor_name() == getpass.getuser()
    monkeypatch.setenv("RCEA_ACTOR", "reviewer-7")
    assert actor_name() == "reviewer-7" and actor_name("explicit") == "explicit"


def test_codebook_backend_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The view's codebook backend and the CLI options' defaults are settings fields read
    from the same ``RCEA_*`` variables; the threshold's default is the codebook's own."""
    from rcea.pipeline.codebook.logic import DEFAULT_CONFIDENCE_THRESHOLD
    from rcea.study.codebook.approval import backend_from_settings

    plain = Settings()
    assert plain.codebook_threshold == DEFAULT_CONFIDENCE_THRESHOLD
    assert (plain.codebook_backend, plain.codebook_seed, plain.llm_concurrency) == ("openai", 0, 8)
    with pytest.raises(ValueError, match="RCEA_LLM_BASE_URL"):
        backend_from_settings(plain)  # openai without an endpoint says what to set
    monkeypatch.setenv("RCEA_CODEBOOK_BACKEND", "oracle")
    monkeypatch.setenv("RCEA_CODEBOOK_ORACLE", "tests.support.fake_llm:strategy_of")
    monkeypatch.setenv("RCEA_CODEBOOK_SEED", "3")
    monkeypatch.setenv("RCEA_CODEBOOK_THRESHOLD", "0.5")
    monkeypatch.setenv("RCEA_LLM_CONCURRENCY", "2")
    s = Settings()
    assert (s.codebook_backend, s.codebook_seed, s.codebook_threshold) == ("oracle", 3, 0.5)
    assert (s.codebook_oracle, s.llm_concurrency) == ("tests.support.fake_llm:strategy_of", 2)
    backend, seed, threshold = backend_from_settings(s)
    assert (type(backend).__name__, seed, threshold) == ("OracleBackend", 3, 0.5)
