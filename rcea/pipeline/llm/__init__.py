"""Shared machinery for OpenAI-compatible LLM stages (codebook, validity judge).

* :class:`LLMClient` — validated JSON replies with retries, backoff, ``Retry-After``,
  bounded concurrency, on-disk cache and usage/cost counters;
* :func:`run_jobs` — bounded-concurrency execution with results delivered in order of
  completion to the calling thread;
* :class:`ResponseCache` / :func:`request_fingerprint` — the content-hash cache.
"""

from rcea.pipeline.llm.cache import ResponseCache, canonical_json, request_fingerprint
from rcea.pipeline.llm.client import (
    EndpointError,
    LLMClient,
    LLMConfig,
    LLMResult,
    Messages,
    ReplyFormatError,
    parse_json_reply,
    retry_after_seconds,
)
from rcea.pipeline.llm.runner import run_jobs
from rcea.pipeline.llm.usage import UsageCounter, UsageSnapshot

__all__ = [
    "EndpointError",
    "LLMClient",
    "LLMConfig",
    "LLMResult",
    "Messages",
    "ReplyFormatError",
    "ResponseCache",
    "UsageCounter",
    "UsageSnapshot",
    "canonical_json",
    "parse_json_reply",
    "request_fingerprint",
    "retry_after_seconds",
    "run_jobs",
]
