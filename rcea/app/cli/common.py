"""Helpers shared by the command modules: settings, store access, JSON output, errors, and
the one translation of an unreachable external service into a one-line error."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn
from urllib.parse import urlsplit

import httpx
import typer
from sqlalchemy.exc import OperationalError
from sqlmodel import Session
from tqdm import tqdm

from rcea.annotation.accounts import AccountError
from rcea.annotation.people import people_from_settings
from rcea.annotation.tasks import BlindingViolation
from rcea.app.cli import exit_codes
from rcea.pipeline.safety import mask_url, mask_urls_in
from rcea.study.labelling.bindings import LabellingError
from rcea.study.settings import Settings, get_settings
from rcea.study.store import open_store, session_scope
from rcea.study.targets import Target, TargetError

FULL_SYNC_OPTION = typer.Option(
    False, "--full", help="read every project whole (default: tasks changed since the last sync)"
)


def settings() -> Settings:
    return get_settings()


def engine():
    return open_store(settings())


def print_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, sort_keys=False, default=str))


def fail(message: str, *, code: int = 1, as_json: bool = False, **extra: Any) -> NoReturn:
    if as_json:
        print_json({"ok": False, "error": message, **extra})
    else:
        typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


#: What a domain function raises for bad input, a refused request or a missing record
#: (StoreError, FreezeError, CodebookError ... are ValueErrors): a command reports it as
#: one line and exit ``ERROR``. An unreachable service is not among them: it reaches
#: :func:`rcea.app.cli.main`, which names the service (exit ``SERVICE_UNREACHABLE``).
DOMAIN_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    FileNotFoundError,
    BlindingViolation,
    AccountError,
    LabellingError,
)


@contextmanager
def domain_errors(
    as_json: bool = False, *extra: type[BaseException], code: int = exit_codes.ERROR
) -> Iterator[None]:
    """The one wrapper of a command's call into the domain: a domain error (or one of
    ``extra``) becomes :func:`fail` — ``error: MESSAGE`` on stderr, or ``{"ok": false,
    "error": ...}`` under ``--json`` — with ``code`` (docs/trust-model.md "Exit codes")."""
    try:
        yield
    except typer.Exit:
        raise  # a command's own exit (click's Exit is a RuntimeError)
    except TargetError as exc:  # which study: the one line, then the candidates
        fail(exc.headline if as_json else str(exc), code=code, as_json=as_json, **exc.details())
    except DOMAIN_ERRORS + extra as exc:
        fail(str(exc), code=code, as_json=as_json)


@contextmanager
def store_session(as_json: bool = False, *extra: type[BaseException]) -> Iterator[Session]:
    """A session on the store the settings name (``RCEA_DATABASE_URL``/``RCEA_DATA_DIR``),
    committed when the block ends, its domain errors reported as :func:`domain_errors`
    does; nothing is committed when one is raised."""
    with domain_errors(as_json, *extra), session_scope(engine()) as session:
        yield session


def emit(out: Any, as_json: bool, text: Callable[[], str | None]) -> None:
    """Print a command's result the one way: ``out`` as JSON under ``--json``, else the
    text ``text()`` returns (called only then: it may read what JSON does not need). A
    ``text`` that prints its own lines (a table, a warning on stderr) returns ``None``."""
    if as_json:
        print_json(out)
        return
    line = text()
    if line is not None:
        typer.echo(line)


def say(line: str, as_json: bool, *, err: bool = False) -> None:
    """A line for the reader of the text output only (progress, a hint before the result):
    under ``--json`` stdout is the one JSON document :func:`emit` prints."""
    if not as_json:
        typer.echo(line, err=err)


def with_target(out: dict[str, Any], target: Target, as_json: bool) -> dict[str, Any]:
    """The study and record a command acted on, with its result: under ``--json`` as
    keys of ``out`` (returned), else printed first as one line."""
    if not as_json:
        typer.echo(target.line())
    return {**target.as_dict(), **out}


def is_tty() -> bool:
    return sys.stderr.isatty()


PROGRESS_ENV = "RCEA_PROGRESS"  # "1": draw progress bars on stderr even with --json


def progress_forced() -> bool:
    """Whether ``$RCEA_PROGRESS=1`` asks for tqdm bars on stderr even under ``--json``
    (stdout stays pure JSON): ``rcea demo`` sets it for its subprocesses and relays the
    latest bar of the one running under the step's line."""

    return os.environ.get(PROGRESS_ENV) == "1"


# How to start each external service, named in the one-line error when it is unreachable.
START_LABEL_STUDIO = "rcea labelstudio start"
START_POSTGRES = "docker compose up -d postgres (or start the server RCEA_DATABASE_URL names)"
START_LLM = "start the OpenAI-compatible server RCEA_LLM_BASE_URL names (e.g. `vllm serve MODEL`)"


def _origin(url: str) -> tuple[str, int | None]:

    try:
        parts = urlsplit(url)
        default = {"http": 80, "https": 443}.get(parts.scheme)
        return (parts.hostname or "").lower(), parts.port or default
    except ValueError:
        return "", None


def _exception_chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in out and len(out) < 20:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def service_error(exc: BaseException, cfg: Settings | None = None) -> str | None:
    """One line naming the unreachable service, its URL (credentials masked) and the command
    that starts it, when ``exc`` (or an exception it was raised from) is a connection failure
    to Label Studio, PostgreSQL or the LLM endpoint; else ``None``."""
    cfg = cfg or settings()
    for err in _exception_chain(exc):
        line = _one_service_error(err, cfg)
        if line is not None:
            return line
    return None


def _one_service_error(err: BaseException, cfg: Settings) -> str | None:

    cause = getattr(err, "orig", None) or err  # the driver's own message, not SQLAlchemy's
    text = str(cause).strip()
    reason = mask_urls_in(text.splitlines()[0]) if text else type(err).__name__
    if isinstance(err, httpx.TransportError):
        try:
            url = str(err.request.url)
        except RuntimeError:  # no request attached
            url = ""
        origin = _origin(url)
        person = _person_at(cfg, origin)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        if person is not None:
            how = (
                f"start it with `{START_LABEL_STUDIO} {person.email}`"
                if person.managed
                else "start that server (rcea does not run it; `rcea labelstudio status` checks it)"
            )
            return (
                f"Label Studio of {person.email} at {mask_url(person.url)} is unreachable "
                f"({reason}); {how}"
            )
        if cfg.labelstudio_url and origin == _origin(cfg.labelstudio_url):
            return labelstudio_down(cfg, reason)
        if cfg.llm_base_url and origin == _origin(cfg.llm_base_url):
            return _llm_line(cfg, reason)
        return f"the server at {mask_url(url) or '?'} is unreachable ({reason})"
    if isinstance(err, OperationalError) and err.statement is None:
        url = cfg.resolved_database_url
        if url.startswith("postgresql"):
            return (
                f"PostgreSQL at {mask_url(url)} is unreachable ({reason}); start it with "
                f"`{START_POSTGRES}`"
            )
        return f"the store at {mask_url(url)} cannot be opened ({reason})"
    try:
        import openai  # the optional `llm` extra: asked only to name a failed service
    except ImportError:  # the `llm` extra is optional
        return None
    if isinstance(err, openai.APIConnectionError):
        return _llm_line(cfg, reason)
    return None


def warn_if_llm_unreachable(usage: dict[str, Any], cfg: Settings | None = None) -> None:
    """After an LLM stage (whose failed calls are recorded, never raised): one line naming
    the endpoint when no call got through and the failures were connection errors."""
    if usage.get("connection_errors") and not usage.get("completed") and usage.get("failures"):
        line = _llm_line(cfg or settings(), "no request reached it")
        typer.echo(f"error: {line}", err=True)


def _person_at(cfg: Settings, origin: str):
    """The registered person whose Label Studio server is at ``origin``, if any."""
    try:
        return next((p for p in people_from_settings(cfg).all() if _origin(p.url) == origin), None)
    except Exception:  # noqa: BLE001 - an unreadable registry must not hide the error
        return None


def labelstudio_down(cfg: Settings, reason: str) -> str:
    return (
        f"Label Studio at {mask_url(cfg.labelstudio_url)} is unreachable ({reason}); "
        f"start it with `{START_LABEL_STUDIO}` or set RCEA_LABELSTUDIO_URL"
    )


def _llm_line(cfg: Settings, reason: str) -> str:
    url = mask_url(cfg.llm_base_url or "?")
    return f"the LLM endpoint at {url} is unreachable ({reason}); {START_LLM}"


class LazyBar:
    """A tqdm bar opened on its first update, so nothing is drawn when a command fails
    before any work is done (an unreachable server then gives exactly one line)."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.bar: Any = None

    def update(self, n: int = 1) -> None:
        if self.bar is None:
            self.bar = tqdm(**self.kwargs)
        self.bar.update(n)

    def __enter__(self) -> LazyBar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()
