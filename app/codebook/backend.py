"""Building a codebook backend from settings and command-line options."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from app.settings import Settings
from pipeline.codebook import CodebookBackend, OpenAIBackend, OracleBackend, StrategyFn
from pipeline.llm import LLMClient, LLMConfig, ResponseCache

BACKENDS = ("openai", "oracle")


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
    json_mode: str = "json_object"


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
    return fn  # type: ignore[no-any-return]


def llm_config(settings: Settings, opts: BackendOptions) -> LLMConfig:
    if not settings.llm_base_url or not settings.llm_model:
        raise ValueError(
            "the openai backend needs RCEA_LLM_BASE_URL and RCEA_LLM_MODEL (and usually "
            "RCEA_LLM_API_KEY); or use --backend oracle --oracle MODULE:FUNCTION"
        )
    key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else "unused"
    return LLMConfig(
        base_url=settings.llm_base_url,
        model=settings.llm_model,
        api_key=key,
        timeout_s=opts.timeout_s,
        concurrency=opts.concurrency,
        max_retries=opts.max_retries,
        seed=opts.seed,
        json_mode=opts.json_mode,  # type: ignore[arg-type]
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
