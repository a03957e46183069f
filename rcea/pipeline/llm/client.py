"""A JSON-reply client for any OpenAI-compatible chat endpoint.

What every LLM stage of the pipeline needs, in one place: temperature 0 and a seed,
structured JSON replies validated with Pydantic, bounded concurrency, retries with
exponential backoff on 429 (honouring ``Retry-After``), 5xx, timeouts and connection
errors, a bounded number of re-asks after an invalid reply, an on-disk cache keyed by the
request's content hash (valid replies, and invalid ones after the re-asks, so a resumed
run repeats no finished call), and token/cost counters. A call that still fails is *returned*
as a failed :class:`LLMResult` (never raised, never guessed): the caller decides where the
item goes (the codebook sends it to reconciliation).
"""

from __future__ import annotations

import email.utils
import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from rcea.pipeline.llm.cache import ResponseCache, request_fingerprint
from rcea.pipeline.llm.usage import UsageCounter
from rcea.pipeline.safety import mask_url, mask_urls_in

T = TypeVar("T", bound=BaseModel)

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class LLMConfig:
    base_url: str = field(repr=False)  # may carry credentials: see public_dict
    model: str
    api_key: str = field(default="unused", repr=False)
    timeout_s: float = 60.0
    concurrency: int = 8
    """most HTTP requests in flight at once through this client"""
    max_retries: int = 5
    """retries after a 429, 5xx, timeout or connection error"""
    max_invalid_retries: int = 1
    """re-asks after a reply that is not valid JSON for the schema"""
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    max_retry_after_s: float = 120.0
    temperature: float = 0.0
    seed: int | None = 0
    json_mode: Literal["json_object", "json_schema", "none"] = "json_object"
    max_tokens: int | None = None
    price_input_per_mtok: float = 0.0
    price_output_per_mtok: float = 0.0

    def public_dict(self) -> dict[str, Any]:
        """The settings worth recording with results (no key, no credentials in the URL)."""
        return {
            "base_url": mask_url(self.base_url),
            "model": self.model,
            "temperature": self.temperature,
            "seed": self.seed,
            "json_mode": self.json_mode,
            "max_tokens": self.max_tokens,
        }


@dataclass
class LLMResult(Generic[T]):
    value: T | None
    key: str
    """content hash of the request (cache key)"""
    error: str | None = None
    cached: bool = False
    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    raw: str | None = None

    @property
    def ok(self) -> bool:
        return self.value is not None

    def usage_dict(self) -> dict[str, Any]:
        return {
            "cached": self.cached,
            "attempts": self.attempts,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


class EndpointError(RuntimeError):
    """A request that failed for good (:meth:`LLMClient.post_json`): retries spent on
    429/5xx/timeouts, or a failure that is not retried (4xx, a body that is not JSON)."""

    def __init__(self, message: str, *, attempts: int, retryable: bool) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.retryable = retryable


class ReplyFormatError(ValueError):
    """The reply text holds no JSON object."""


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def parse_json_reply(text: str | None, schema: type[T]) -> T:
    """Validate a reply against ``schema``; tolerates a Markdown code fence around it."""
    if not text:
        raise ReplyFormatError("empty reply")
    m = _FENCE.match(text)
    body = m.group(1) if m else text.strip()
    if not body.startswith("{"):
        start, end = body.find("{"), body.rfind("}")
        if start < 0 or end <= start:
            raise ReplyFormatError(f"no JSON object in reply: {text[:80]!r}")
        body = body[start : end + 1]
    return schema.model_validate_json(body)


def retry_after_seconds(headers: Any) -> float | None:
    """``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date), if present."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        if parsed is None:
            return None
        return max(0.0, parsed.timestamp() - time.time())


@dataclass
class LLMClient:
    """Thread-safe; share one per stage. ``guard`` sees every prompt before it is sent or
    looked up (e.g. a blinding scan) and may raise to stop the run."""

    config: LLMConfig
    cache: ResponseCache | None = None
    guard: Callable[[Messages], None] | None = None
    sleep: Callable[[float], None] = time.sleep
    openai_client: Any = None
    usage: UsageCounter = field(init=False)
    _slots: threading.BoundedSemaphore = field(init=False, repr=False)
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.usage = UsageCounter(
            self.config.price_input_per_mtok, self.config.price_output_per_mtok
        )
        self._slots = threading.BoundedSemaphore(max(1, self.config.concurrency))
        self._rng = random.Random(0)
        if self.openai_client is None:
            import openai  # the `llm` extra

            self.openai_client = openai.OpenAI(
                base_url=self.config.base_url,
                api_key=self.config.api_key or "unused",
                timeout=self.config.timeout_s,
                max_retries=0,  # retries are ours: counted, and Retry-After honoured
            )

    # ------------------------------------------------------------------ request shape

    def response_format(self, schema: type[BaseModel]) -> dict[str, Any] | None:
        mode = self.config.json_mode
        if mode == "json_object":
            return {"type": "json_object"}
        if mode == "json_schema":
            return {
                "type": "json_schema",
                "json_schema": {"name": schema.__name__, "schema": schema.model_json_schema()},
            }
        return None

    def request_key(self, messages: Messages, schema: type[BaseModel]) -> str:
        return request_fingerprint(
            model=self.config.model,
            messages=messages,
            temperature=self.config.temperature,
            seed=self.config.seed,
            response_format=self.response_format(schema),
            max_tokens=self.config.max_tokens,
        )

    def is_cached(self, messages: Messages, schema: type[BaseModel]) -> bool:
        if self.cache is None:
            return False
        return self.cache.get(self.request_key(messages, schema)) is not None

    # ------------------------------------------------------------------ the call

    def complete_json(
        self,
        messages: Messages,
        schema: type[T],
        *,
        validate: Callable[[T], None] | None = None,
    ) -> LLMResult[T]:
        """One validated JSON reply (from the cache when this exact request was answered
        before), or a failed result saying why after every retry was spent."""
        if self.guard is not None:
            self.guard(messages)
        cfg = self.config
        key = self.request_key(messages, schema)
        if self.cache is not None:
            entry = self.cache.get(key)
            if entry is not None:
                try:
                    value = parse_json_reply(entry.get("content"), schema)
                    if validate is not None:
                        validate(value)
                except ValueError as exc:
                    if entry.get("failed"):
                        # The endpoint answered this exact request with an invalid reply
                        # (after re-asks) before: that call is finished, not repeated.
                        self.usage.add(cache_hits=1)
                        return LLMResult(
                            None,
                            key,
                            error=f"invalid reply (cached): {exc}"[:500],
                            cached=True,
                            raw=entry.get("content"),
                        )
                    # otherwise the schema changed since: ask again
                else:
                    self.usage.add(cache_hits=1)
                    return LLMResult(value, key, cached=True, raw=entry.get("content"))
        kwargs: dict[str, Any] = {
            "model": cfg.model,
            "messages": messages,
            "temperature": cfg.temperature,
        }
        if cfg.seed is not None:
            kwargs["seed"] = cfg.seed
        fmt = self.response_format(schema)
        if fmt is not None:
            kwargs["response_format"] = fmt
        if cfg.max_tokens is not None:
            kwargs["max_tokens"] = cfg.max_tokens

        transport_failures = invalid = attempts = 0
        prompt_tokens = completion_tokens = 0
        last_error = ""
        while True:
            attempts += 1
            try:
                with self._slots:
                    self.usage.add(requests=1)
                    # The SDK's raw-request path (documented for custom requests): same
                    # auth, base URL, timeout and typed errors as chat.completions.create,
                    # without its per-call param transform, which costs milliseconds of
                    # CPU per batch prompt; the reply is validated by our schema anyway.
                    response = self.openai_client.post(
                        "/chat/completions", cast_to=object, body=kwargs
                    )
            except Exception as exc:  # noqa: BLE001 - classified below
                kind, delay, retryable = self._classify(exc, transport_failures)
                last_error = mask_urls_in(f"{kind}: {exc}")[:500]
                if not retryable or transport_failures >= cfg.max_retries:
                    self.usage.add(failures=1)
                    return LLMResult(
                        None,
                        key,
                        error=last_error,
                        attempts=attempts,
                        prompt_tokens=prompt_tokens,
                        completion_tokens=completion_tokens,
                    )
                transport_failures += 1
                self.usage.add(retries=1)
                self.sleep(delay)
                continue
            content, p_tok, c_tok = _unpack(response)
            prompt_tokens += p_tok
            completion_tokens += c_tok
            self.usage.add_tokens(p_tok, c_tok)
            try:
                value = parse_json_reply(content, schema)
                if validate is not None:
                    validate(value)
            except (ValueError, ValidationError) as exc:
                self.usage.add(invalid_replies=1)
                last_error = f"invalid reply: {exc}"[:500]
                if invalid >= cfg.max_invalid_retries:
                    self.usage.add(failures=1)
                    self._store(key, messages, content, p_tok, c_tok, failed=True)
                    return LLMResult(
                        None,
                        key,
                        error=last_error,
                        attempts=attempts,
                        raw=content,
                        prompt_tokens=prompt_tokens,
                        completion_tokens=completion_tokens,
                    )
                invalid += 1
                self.usage.add(retries=1)
                continue
            self._store(key, messages, content, p_tok, c_tok)
            self.usage.add(completed=1)
            return LLMResult(
                value,
                key,
                attempts=attempts,
                raw=content,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
            )

    def post_json(self, path: str, body: dict[str, Any]) -> tuple[Any, int]:
        """POST ``body`` to ``path`` (e.g. ``"/completions"``) with the transport retries of
        :meth:`complete_json` (429 honouring ``Retry-After``, 5xx, timeouts, connection
        errors; same backoff and counters); returns (the parsed reply, attempts). No cache
        and no reply validation here: the caller owns both. Raises :class:`EndpointError`
        when the retries are spent or the failure is not retryable (4xx, a body that is not
        JSON)."""
        transport_failures = attempts = 0
        while True:
            attempts += 1
            try:
                with self._slots:
                    self.usage.add(requests=1)
                    response = self.openai_client.post(path, cast_to=object, body=body)
            except Exception as exc:  # noqa: BLE001 - classified below
                kind, delay, retryable = self._classify(exc, transport_failures)
                error = mask_urls_in(f"{kind}: {exc}")[:500]
                if not retryable or transport_failures >= self.config.max_retries:
                    self.usage.add(failures=1)
                    raise EndpointError(error, attempts=attempts, retryable=retryable) from exc
                transport_failures += 1
                self.usage.add(retries=1)
                self.sleep(delay)
                continue
            if not isinstance(response, dict) and hasattr(response, "model_dump"):
                response = response.model_dump()
            _, p_tok, c_tok = _unpack(response) if isinstance(response, dict) else (None, 0, 0)
            self.usage.add_tokens(p_tok, c_tok)
            self.usage.add(completed=1)
            return response, attempts

    def _store(
        self,
        key: str,
        messages: Messages,
        content: str | None,
        prompt_tokens: int,
        completion_tokens: int,
        *,
        failed: bool = False,
    ) -> None:
        """Cache a reply. Invalid replies are cached too (``failed``): the model was asked
        and answered; transport failures (429/5xx/timeouts) are not, so a rerun retries
        them."""
        if self.cache is None:
            return
        self.cache.put(
            key,
            {
                "key": key,
                "model": self.config.model,
                "messages": messages,
                "content": content,
                "failed": failed,
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "time": time.time(),
            },
        )

    def _classify(self, exc: Exception, n_failures: int) -> tuple[str, float, bool]:
        """(kind, seconds to wait, retryable) for an exception from the endpoint."""
        import openai  # the `llm` extra, as in __post_init__

        backoff = min(self.config.backoff_max_s, self.config.backoff_base_s * 2**n_failures)
        backoff *= 0.5 + self._rng.random() / 2  # jitter: concurrent retries spread out
        if isinstance(exc, openai.RateLimitError):
            self.usage.add(rate_limited=1)
            after = retry_after_seconds(getattr(exc.response, "headers", None))
            if after is not None:
                return "rate limited (429)", min(after, self.config.max_retry_after_s), True
            return "rate limited (429)", backoff, True
        if isinstance(exc, openai.APITimeoutError):
            self.usage.add(timeouts=1)
            return "timeout", backoff, True
        if isinstance(exc, openai.APIConnectionError):
            self.usage.add(connection_errors=1)
            return "connection error", backoff, True
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            if status >= 500 or status in (408, 409):
                self.usage.add(server_errors=1)
                after = retry_after_seconds(getattr(exc.response, "headers", None))
                wait = min(after, self.config.max_retry_after_s) if after else backoff
                return f"HTTP {status}", wait, True
            return f"HTTP {status}", 0.0, False
        return type(exc).__name__, 0.0, False


def _unpack(response: Any) -> tuple[str | None, int, int]:
    """Content and token counts of a chat-completion body (a dict, or an SDK object)."""
    if not isinstance(response, dict):
        response = response.model_dump() if hasattr(response, "model_dump") else {}
    try:
        content = response["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        content = None
    usage = response.get("usage") or {}
    p = int(usage.get("prompt_tokens") or 0) if isinstance(usage, dict) else 0
    c = int(usage.get("completion_tokens") or 0) if isinstance(usage, dict) else 0
    return (content if isinstance(content, str) else None), p, c
