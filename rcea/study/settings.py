"""One settings class for the whole application (env prefix ``RCEA_``, ``.env`` support).

Secrets are ``SecretStr``: their ``repr``/``str`` show ``**********`` so they never end up
in logs, tracebacks or ``rcea config`` output.
"""

from __future__ import annotations

import getpass
import ipaddress
import os
import secrets
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from rcea.pipeline.safety import mask_url, private_dir

WILDCARD_HOSTS = ("0.0.0.0", "::", "", "*")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
SECRET_FIELDS = (
    "labelstudio_token",
    "labelstudio_password",
    "llm_api_key",
    "api_token",
    "webhook_secret",
)


class Settings(BaseSettings):
    """Runtime configuration. Every field is read from ``RCEA_<FIELD>`` or ``.env``."""

    model_config = SettingsConfigDict(
        env_prefix="RCEA_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    data_dir: Path = Field(Path("rcea-data"), description="store, artifacts and logs")
    database_url: str | None = Field(
        None, description="SQLAlchemy URL; default: SQLite file <data_dir>/rcea.db", repr=False
    )
    labelstudio_url: str = Field("http://127.0.0.1:8089", description="Label Studio base URL")
    labelstudio_token: SecretStr | None = Field(None, description="Label Studio legacy API token")
    labelstudio_user: str = Field("admin@rcea.local", description="preset Label Studio admin")
    labelstudio_password: SecretStr | None = Field(None, description="preset admin password")
    labelstudio_bin: Path | None = Field(
        None, description="label-studio executable; default .venv-labelstudio/bin/label-studio"
    )
    llm_base_url: str | None = Field(None, description="OpenAI-compatible endpoint base URL")
    llm_api_key: SecretStr | None = Field(None, description="API key for the LLM endpoint")
    llm_model: str | None = Field(None, description="model name at the LLM endpoint")
    api_token: SecretStr | None = Field(None, description="bearer token of the rcea service")
    webhook_secret: SecretStr | None = Field(
        None, description="shared secret Label Studio sends to /webhooks/label-studio"
    )
    webhook_url: str | None = Field(
        None, description="where Label Studio posts webhooks (default: this API's address)"
    )
    api_host: str = Field("127.0.0.1", description="bind address of `rcea serve`")
    api_port: int = Field(8000, description="port of `rcea serve`")
    api_workers: int = Field(1, ge=1, description="worker processes of `rcea serve`")
    db_pool_size: int = Field(
        5, ge=1, description="PostgreSQL: connections kept open per process (SQLAlchemy pool)"
    )
    db_max_overflow: int = Field(
        10, ge=0, description="PostgreSQL: extra connections a process may open under load"
    )
    sync_interval_s: float = Field(
        60.0,
        ge=0,
        description="`rcea serve`: seconds between background incremental syncs of every "
        "bound Label Studio project, recovering notifications Label Studio dropped; one "
        "process of the deployment syncs (0: off)",
    )
    llm_concurrency: int = Field(
        8, ge=1, description="requests in flight to the LLM endpoint (codebook stages, judge runs)"
    )
    # The codebook backend of callers without options of their own (the view's approve)
    # and the default of `rcea codebook`'s options (docs/codebook.md).
    codebook_backend: str = Field("openai", description="codebook backend: openai | oracle")
    codebook_oracle: str | None = Field(
        None,
        description="MODULE:FUNCTION, the domain's strategy_fn(question_id, text) "
        "(codebook backend oracle)",
    )
    codebook_seed: int = Field(0, description="codebook shuffles and batching (recorded)")
    codebook_threshold: float = Field(
        # rcea.pipeline.codebook.logic.DEFAULT_CONFIDENCE_THRESHOLD (importing it here would load
        # the LLM backends into every command; tests/study/test_settings.py pins the two)
        0.7,
        description="codebook: a confidence below this sends a label to reconciliation",
    )
    view_port: int = Field(8501, description="port of the Streamlit view")
    public_host: str | None = Field(
        None,
        description="the front door's public name (or address) people type in their browser; "
        "set: `rcea labelstudio start` opens the HTTPS front door (docs/team.md)",
    )
    public_port: int = Field(
        8443,
        ge=1024,
        le=65533,
        description="front door: the view's public HTTPS port; the API takes the next, "
        "each person one after that",
    )
    public_bind: str = Field(
        "0.0.0.0", description="front door: the address nginx listens on (default: all)"
    )
    tls_cert: Path | None = Field(
        None,
        description="front door: PEM certificate for the public name (default: one from a "
        "local CA rcea makes in <data_dir>/frontdoor)",
    )
    tls_key: Path | None = Field(None, description="front door: the certificate's PEM key")
    door_view_url: str | None = Field(
        None, description="front door: the view behind it (default http://127.0.0.1:<view_port>)"
    )
    door_api_url: str | None = Field(
        None, description="front door: the API behind it (default http://127.0.0.1:<api_port>)"
    )
    view_auth: str = Field(
        "password",
        description="view login: password (<data_dir>/researchers), oidc (st.login with "
        ".streamlit/secrets.toml [auth]) or none (refused unless the view is on loopback)",
    )

    @field_validator("tls_cert", "tls_key", "door_view_url", "door_api_url", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        # compose passes ``${RCEA_TLS_CERT:-}``: an empty value means "not set", not "."
        return None if value == "" else value

    @field_validator("database_url")
    @classmethod
    def _normalise_database_url(cls, value: str | None) -> str | None:
        if value and value.startswith("postgresql://"):
            # Use psycopg 3 (the only PostgreSQL driver we install).
            return "postgresql+psycopg://" + value[len("postgresql://") :]
        if value and value.startswith("postgres://"):
            return "postgresql+psycopg://" + value[len("postgres://") :]
        return value

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'rcea.db').resolve()}"

    @property
    def artifacts_dir(self) -> Path:
        return self.data_dir / "artifacts"

    def ensure_data_dir(self) -> Path:
        """The data directory and its artifacts folder, owner-only (0700)."""
        private_dir(self.data_dir)
        private_dir(self.artifacts_dir)
        return self.data_dir

    def ensure_api_token(self) -> SecretStr:
        """Return the service token; refuse to run open, so make one on first use.

        The generated token is written to ``<data_dir>/api-token`` (mode 0600) and never
        printed: clients read it from that file.
        """
        self.api_token = self._ensure_secret(self.api_token, "api-token")
        return self.api_token

    def ensure_webhook_secret(self) -> SecretStr:
        """The Label Studio webhook secret (generated into ``<data_dir>/webhook-secret``)."""
        self.webhook_secret = self._ensure_secret(self.webhook_secret, "webhook-secret")
        return self.webhook_secret

    @property
    def resolved_webhook_url(self) -> str:
        """``webhook_url``, else this API's own address; a wildcard bind address
        (``0.0.0.0``, ``::``) is no address to post to, so loopback stands in for it (in
        compose, ``RCEA_WEBHOOK_URL`` names the API service instead)."""
        if self.webhook_url:
            return self.webhook_url
        host = self.api_host
        if host in WILDCARD_HOSTS:
            host = "127.0.0.1"
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.api_port}/webhooks/label-studio"

    def _ensure_secret(self, value: SecretStr | None, filename: str) -> SecretStr:
        if value is not None and value.get_secret_value():
            return value
        path = self.data_dir / filename
        if path.exists():
            return SecretStr(path.read_text().strip())
        self.ensure_data_dir()
        token = secrets.token_urlsafe(32)
        path.touch(mode=0o600)
        path.write_text(token + "\n")
        return SecretStr(token)

    def public_dict(self) -> dict[str, Any]:
        """Settings as a dict safe to print: secrets shown only as set/unset."""
        out: dict[str, Any] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if name in SECRET_FIELDS:
                out[name] = "<set>" if value is not None else "<unset>"
            elif name.endswith("_url") and value:
                out[name] = mask_url(value)
            else:
                out[name] = str(value) if isinstance(value, Path) else value
        out["resolved_database_url"] = mask_url(self.resolved_database_url)
        out["resolved_webhook_url"] = mask_url(self.resolved_webhook_url)
        return out


def is_loopback(host: str) -> bool:
    """Whether a bind address only accepts connections from this machine."""

    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


def actor_name(actor: str | None = None) -> str:
    """Who an action is recorded as in the event log: ``actor`` when given, else
    ``$RCEA_ACTOR``, else the login name (the CLI's ``--actor`` and the view's sidebar)."""

    return actor or os.environ.get("RCEA_ACTOR") or getpass.getuser()
