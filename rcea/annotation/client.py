"""Talking to a Label Studio server: the 2.x SDK client and a health probe.

Every HTTP client here ignores proxy variables (``trust_env=False``): the server we manage
listens on loopback only, and a developer's ``HTTP_PROXY`` must not route it elsewhere.
"""

from __future__ import annotations

import os
import ssl
import time
from typing import TYPE_CHECKING

import httpx
from pydantic import SecretStr

if TYPE_CHECKING:
    from label_studio_sdk import LabelStudio


HEALTH_PATH = "/health/"  # LS 1.23 routes ``health/``; APPEND_SLASH is off


class LabelStudioUnavailable(RuntimeError):
    """The server did not answer its health check in time."""


def _secret(value: str | SecretStr) -> str:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def _verify() -> ssl.SSLContext | bool:
    """Certificates of HTTPS servers are checked against certifi's authorities, or the
    file named by ``SSL_CERT_FILE`` (e.g. a lab's own CA, or the local CA of rcea's front
    door, docs/team.md). Read here because the clients ignore the environment otherwise."""
    cafile = os.environ.get("SSL_CERT_FILE")
    return ssl.create_default_context(cafile=cafile) if cafile else True


def http_client(url: str, *, timeout: float = 60.0, follow_redirects: bool = True) -> httpx.Client:
    """A plain httpx client bound to ``url`` that never goes through a proxy."""
    return httpx.Client(
        base_url=url.rstrip("/"),
        timeout=timeout,
        follow_redirects=follow_redirects,
        trust_env=False,  # no proxy variables; SSL_CERT_FILE is honoured by _verify
        verify=_verify(),
    )


def make_client(url: str, token: str | SecretStr, *, timeout: float = 60.0) -> LabelStudio:
    """The SDK client, authenticated with a legacy API token (``Authorization: Token …``).

    The SDK picks ``Token`` for any key that is not a JWT, which is what our preset
    ``LABEL_STUDIO_USER_TOKEN`` is. We pass our own httpx client so proxies are ignored; the
    SDK then does not enforce its default timeout, so the client carries one.
    """
    # the SDK's client class loads cryptography and faker (about 1 s): only talking to a
    # server pays for them, not every `rcea` command that imports this module
    from label_studio_sdk import LabelStudio

    return LabelStudio(
        base_url=url.rstrip("/"),
        api_key=_secret(token),
        httpx_client=http_client(url, timeout=timeout),
    )


def is_healthy(url: str, *, timeout: float = 2.0) -> bool:
    """True when ``GET /health/`` answers 200 (any error counts as not healthy)."""
    try:
        with http_client(url, timeout=timeout, follow_redirects=False) as client:
            return client.get(HEALTH_PATH).status_code == 200
    except httpx.HTTPError:
        return False


def wait_healthy(url: str, *, timeout: float = 60.0, interval: float = 0.5) -> None:
    """Block until the server at ``url`` is healthy; raise ``LabelStudioUnavailable`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if is_healthy(url):
            return
        if time.monotonic() >= deadline:
            raise LabelStudioUnavailable(
                f"Label Studio at {url} did not answer {HEALTH_PATH} within {timeout:.0f}s"
            )
        time.sleep(interval)
