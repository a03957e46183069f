"""Options every command group shares, declared once. Each reads an ``RCEA_*`` variable
when it is not given on the command line (the variable is named in ``--help``)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import typer

from rcea.study.codebook.backend import BackendOptions
from rcea.study.settings import Settings, get_settings


def from_settings(name: str) -> Callable[[], Any]:
    """An option's default read from the settings field ``name`` when the command runs
    (``RCEA_<NAME>`` or ``.env``), so the CLI and the view read one definition."""
    return lambda: getattr(get_settings(), name)


def setting_help(text: str, name: str) -> str:
    """``text`` plus where the default comes from: the setting and its own default."""
    default = Settings.model_fields[name].default
    otherwise = "" if default is None else f", else {default}"
    return f"{text} (default: RCEA_{name.upper()}{otherwise})"


STUDY_OPTION = typer.Option(..., "--study", envvar="RCEA_STUDY", help="study name")
STUDY_SCOPE_OPTION = typer.Option(
    None,
    "--study",
    envvar="RCEA_STUDY",
    help="the study whose record this acts on (needed when the data dir holds more than "
    "one study's; default: the only one)",
)
ACTOR_OPTION = typer.Option(
    None,
    "--actor",
    envvar="RCEA_ACTOR",
    help="who does this (default: the login name); recorded in the event log",
)
JSON_OPTION = typer.Option(False, "--json", envvar="RCEA_JSON", help="print machine-readable JSON")

# -- pushing to Label Studio
WEBHOOK_OPTION = typer.Option(True, help="register the live-sync webhook")
RECEIVER_CHECK_OPTION = typer.Option(
    True,
    help="before registering the webhook, check that this data dir's `rcea serve` answers "
    "at RCEA_API_HOST:RCEA_API_PORT (off only when you start it there afterwards, as "
    "`rcea demo` does)",
)

# -- the OpenAI-compatible endpoint (codebook stages, judge runs)
CONCURRENCY_OPTION = typer.Option(
    from_settings("llm_concurrency"),
    "--concurrency",
    min=1,
    help=setting_help("requests in flight", "llm_concurrency"),
)
TIMEOUT_OPTION = typer.Option(
    60.0, "--timeout", envvar="RCEA_LLM_TIMEOUT", help="seconds per request"
)
RETRIES_OPTION = typer.Option(
    5, "--max-retries", envvar="RCEA_LLM_MAX_RETRIES", help="retries on 429/5xx/timeouts"
)
PRICE_IN_OPTION = typer.Option(
    0.0, "--price-input", envvar="RCEA_LLM_PRICE_INPUT", help="USD per 1M prompt tokens"
)
PRICE_OUT_OPTION = typer.Option(
    0.0, "--price-output", envvar="RCEA_LLM_PRICE_OUTPUT", help="USD per 1M completion tokens"
)
BASE_URL_OPTION = typer.Option(
    None, "--base-url", help="OpenAI-compatible endpoint (default: RCEA_LLM_BASE_URL)"
)
MODEL_OPTION = typer.Option(None, "--model", help="model name (default: RCEA_LLM_MODEL)")
API_KEY_ENV_OPTION = typer.Option(
    None,
    "--api-key-env",
    help="name of the environment variable holding the API key (default: RCEA_LLM_API_KEY)",
)

# -- the codebook backend (the view's approve reads the same settings)
CODEBOOK_BACKEND_OPTION = typer.Option(
    from_settings("codebook_backend"),
    "--backend",
    help=setting_help("openai | oracle", "codebook_backend"),
)
CODEBOOK_ORACLE_OPTION = typer.Option(
    from_settings("codebook_oracle"),
    "--oracle",
    help=setting_help(
        "MODULE:FUNCTION, the domain's strategy_fn(question_id, text) (--backend oracle)",
        "codebook_oracle",
    ),
)
CODEBOOK_SEED_OPTION = typer.Option(
    from_settings("codebook_seed"),
    "--seed",
    help=setting_help("shuffles and batching (recorded)", "codebook_seed"),
)
CODEBOOK_THRESHOLD_OPTION = typer.Option(
    from_settings("codebook_threshold"),
    "--threshold",
    help=setting_help("confidence below → reconcile", "codebook_threshold"),
)
RESPONSE_FORMAT_OPTION = typer.Option(
    "json_object",
    "--response-format",
    envvar="RCEA_LLM_RESPONSE_FORMAT",
    help="json_object | json_schema (structured output) | none (endpoint without it)",
)

#: The LLM endpoint and codebook backend options of every codebook stage that calls the
#: endpoint (induce, merge, assign, reconcile, approve, run): (parameter, the
#: ``BackendOptions`` field it fills, its type, the option).
BACKEND_PARAMETERS: tuple[tuple[str, str, type, Any], ...] = (
    ("seed", "seed", int, CODEBOOK_SEED_OPTION),
    ("backend", "kind", str, CODEBOOK_BACKEND_OPTION),
    ("oracle", "oracle", str, CODEBOOK_ORACLE_OPTION),
    ("concurrency", "concurrency", int, CONCURRENCY_OPTION),
    ("timeout", "timeout_s", float, TIMEOUT_OPTION),
    ("max_retries", "max_retries", int, RETRIES_OPTION),
    ("price_in", "price_input_per_mtok", float, PRICE_IN_OPTION),
    ("price_out", "price_output_per_mtok", float, PRICE_OUT_OPTION),
    ("base_url", "base_url", str, BASE_URL_OPTION),
    ("model", "model", str, MODEL_OPTION),
    ("api_key_env", "api_key_env", str, API_KEY_ENV_OPTION),
    ("response_format", "json_mode", str, RESPONSE_FORMAT_OPTION),
)


def grouped_options(
    parameters: tuple[tuple[str, str, type, Any], ...],
    group: Callable[..., Any],
    into: str,
    before: tuple[str, ...] = ("actor", "as_json"),
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator that gives a command the options of ``parameters`` ((parameter, the
    field of ``group`` it fills, its type, the option)), declared once: Typer sees them in
    the command's signature (before the first of ``before``; the command line is
    unchanged), the command receives them as one keyword ``into`` built by ``group``."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(command, eval_str=True)
        own = [p.replace(kind=p.KEYWORD_ONLY) for p in sig.parameters.values() if p.name != into]
        at = next((i for i, p in enumerate(own) if p.name in before), len(own))
        added = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind)
            for name, _, kind, option in parameters
        ]
        params = own[:at] + added + own[at:]  # where --help has always listed them

        @functools.wraps(command)
        def with_group(**kwargs: Any) -> Any:
            fields = {field: kwargs.pop(name) for name, field, _, _ in parameters}
            return command(**kwargs, **{into: group(**fields)})

        with_group.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]  # Typer reads a callable's __signature__; mypy does not know the attribute
        with_group.__annotations__ = {p.name: p.annotation for p in params}
        return with_group

    return decorate


#: Give a codebook stage the options of ``BACKEND_PARAMETERS`` (before ``--actor`` and
#: ``--json``), received as one ``llm: BackendOptions``.
backend_options = grouped_options(BACKEND_PARAMETERS, BackendOptions, "llm")
