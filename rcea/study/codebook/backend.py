"""Building a codebook backend from settings and command-line options."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass

from rcea.pipeline.codebook import CodebookBackend, OpenAIBackend, OracleBackend, StrategyFn
from rcea.pipeline.llm import LLMClient, LLMConfig, ResponseCache
from rcea.study.settings import Settings

BACKENDS = ("openai", "oracle")
JSON_MODES = ("json_object", "json_schema", "none")


@dataclass(frozen=True)
class BackendOptions:
    kind: str = "openai"
    oracle: str | None = None
    """``module:function`` — the domain's ``strategy_fn(question_id, text) -> name``"""
    concurrency: int = 8
    timeout_s: float = 60.0
    max_retries: int = 5
    price_input_per_mtok: float = 0.0
    price_output_per_mtok: float = 0.0
    seed: int = 0
    """sent with every request (part of the request, hence of the cache key)"""
    json_mode: str = "json_object"
    """``response_format``: ``json_object``, ``json_schema`` (structured output from the
    reply's Pydantic schema) or ``none`` (endpoints without it)"""
    base_url: str | None = None
    """overrides ``RCEA_LLM_BASE_URL``"""
    model: str | None = None
    """overrides ``RCEA_LLM_MODEL``"""
    api_key_env: str | None = None
    """name of the environment variable holding the key (overrides ``RCEA_LLM_API_KEY``)"""


def load_strategy_fn(spec: str) -> StrategyFn:
    """``package.module:function`` (or ``package.module.function``)."""
    module_name, _, attr = spec.partition(":") if ":" in spec else spec.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"--oracle {spec!r}: expected MODULE:FUNCTION")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--oracle {spec!r}: {exc}") from exc
    if not callable(fn):
        raise ValueError(f"--oracle {spec!r} is not callable")
    return fn  # type: ignore[no-any-return]  # the oracle is looked up by name (typed Any); checked callable above


def llm_config(settings: Settings, opts: BackendOptions) -> LLMConfig:
    """The endpoint from the options, else from the settings; the key from the variable
    ``opts.api_key_env`` names, else ``RCEA_LLM_API_KEY``."""

    base_url = opts.base_url or settings.llm_base_url
    model = opts.model or settings.llm_model
    if not base_url or not model:
        raise ValueError(
            "the openai backend needs an endpoint and a model: --base-url and --model, or "
            "RCEA_LLM_BASE_URL and RCEA_LLM_MODEL (and usually RCEA_LLM_API_KEY or "
            "--api-key-env VAR); or use --backend oracle --oracle MODULE:FUNCTION"
        )
    if opts.json_mode not in JSON_MODES:
        raise ValueError(
            f"--response-format {opts.json_mode!r}: choose from {', '.join(JSON_MODES)}"
        )
    if opts.api_key_env:
        key = os.environ.get(opts.api_key_env, "")
        if not key:
            raise ValueError(
                f"--api-key-env {opts.api_key_env}: that environment variable is not set"
            )
    else:
        key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else "unused"
    return LLMConfig(
        base_url=base_url,
        model=model,
        api_key=key,
        timeout_s=opts.timeout_s,
        concurrency=opts.concurrency,
        max_retries=opts.max_retries,
        seed=opts.seed,
        json_mode=opts.json_mode,  # type: ignore[arg-type]  # the value is validated against the literal's choices where it is read
        price_input_per_mtok=opts.price_input_per_mtok,
        price_output_per_mtok=opts.price_output_per_mtok,
    )


def make_backend(settings: Settings, opts: BackendOptions) -> CodebookBackend:
    if opts.kind == "openai":
        cache = ResponseCache(settings.data_dir / "llm-cache")
        return OpenAIBackend(LLMClient(llm_config(settings, opts), cache=cache))
    if opts.kind == "oracle":
        if not opts.oracle:
            raise ValueError("--backend oracle needs --oracle MODULE:FUNCTION")
        return OracleBackend(load_strategy_fn(opts.oracle), label=opts.oracle)
    raise ValueError(f"unknown backend {opts.kind!r} (choose from {', '.join(BACKENDS)})")
