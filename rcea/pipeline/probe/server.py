"""``[probe] backend = "server"``: probe sampling through an OpenAI-compatible server
(``vllm serve`` on a cluster) with the completions endpoint and sampled-token log-probs.

One request per checkpoint × question unit::

    POST {base_url}/completions
    {"model": <served name>, "prompt": <prompt ids>, "n": K, "temperature": τ, "top_p": p,
     "top_k": -1, "min_p": 0, "repetition_penalty": 1, "frequency_penalty": 0,
     "presence_penalty": 0, "max_tokens": max_new_tokens, "seed": <unit seed>,
     "stop_token_ids": <stop ids>, "logprobs": 1, "return_tokens_as_token_ids": true}

* the prompt is the *token ids* :func:`rcea.pipeline.chat.encode_prompt` gives (chat template
  applied locally, with the checkpoint's tokenizer), so the server conditions on exactly
  the ``prompt_ids`` written to ``samples/`` — no second tokenisation on the server;
* every sampling knob is sent explicitly, so defaults a server takes from the model's
  ``generation_config.json`` (vLLM ``--generation-config auto``) cannot change the draw;
* ``seed`` = ``derive_seed(checkpoint_seed, question_id)`` (vLLM seeds child ``i`` of an
  ``n`` request with ``seed + i``);
* completion ids are read from ``logprobs.tokens`` (``"token_id:N"``, vLLM's
  ``return_tokens_as_token_ids``) and the sampled-token log-probs from
  ``logprobs.token_logprobs``; the text is decoded locally from the ids, as the vLLM
  backend does. The stop id that ended a completion is part of its ids and of its
  log-probs (ℓ includes EOS).

A reply that is not JSON, has not K choices, lacks log-probs, has tokens that are not
``token_id:N``, log-probs that are not finite and ≤ 0, or says ``finish_reason: "stop"``
without ending in a stop id raises :class:`ServerSampleError` naming the checkpoint, the
served model and the question; nothing of that unit is written. 429, 5xx, timeouts and
connection errors are retried with backoff (:meth:`rcea.pipeline.llm.LLMClient.post_json`).

Every valid reply is cached by the worker thread that received it
(``DIR/server-cache/``, key = SHA-256 of the canonical request body), before the unit is
written, so a killed or failed run resumes without repeating a finished call; units are
written and marked done in question order.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rcea.pipeline.chat import PromptFormat, completion_end, encode_prompt, stop_token_ids
from rcea.pipeline.llm import EndpointError, LLMClient, LLMConfig, run_jobs
from rcea.pipeline.llm.cache import ResponseCache, canonical_json
from rcea.pipeline.probe.common import _tokenizer_dir
from rcea.pipeline.probe.config import Checkpoint, ConfigError, ProbeConfig, served_model
from rcea.pipeline.safety import mask_url

CACHE_DIR = "server-cache"


class ServerSampleError(RuntimeError):
    """A server reply the probe cannot use, or a request that failed for good."""


@dataclass
class ServerCompletion:
    """One sampled completion: ids (stop id included when it ended), the server's
    log-prob of every one of those ids, the locally decoded text, truncation."""

    completion_ids: list[int]
    logprobs: list[float]
    text: str
    truncated: bool


def request_key(body: dict[str, Any]) -> str:
    """The cache key of a completions request: SHA-256 of its canonical JSON body."""
    return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()


def _token_id(token: Any) -> int:
    if isinstance(token, str) and token.startswith("token_id:"):
        try:
            return int(token[len("token_id:") :])
        except ValueError:
            pass
    raise ValueError(
        f"token {token!r} is not 'token_id:N' (the server must honour "
        "return_tokens_as_token_ids, as vLLM does)"
    )


def parse_choices(
    reply: Any, n: int, stops: list[int]
) -> list[tuple[list[int], list[float], bool]]:
    """(completion ids, their log-probs, truncated) of every choice, in index order; raises
    ``ValueError`` saying what is wrong with the reply."""
    if not isinstance(reply, dict):
        raise ValueError(f"reply is not a JSON object: {str(reply)[:120]!r}")
    choices = reply.get("choices")
    if not isinstance(choices, list) or len(choices) != n:
        got = len(choices) if isinstance(choices, list) else repr(choices)[:60]
        raise ValueError(f"expected {n} choices, got {got}")
    try:
        ordered = sorted(choices, key=lambda c: int(c["index"]))
    except (KeyError, TypeError, ValueError):
        raise ValueError("a choice has no integer 'index'") from None
    if [int(c["index"]) for c in ordered] != list(range(n)):
        raise ValueError(f"choice indices are not 0..{n - 1}")
    stop = set(stops)
    out = []
    for c in ordered:
        where = f"choice {c['index']}"
        lp = c.get("logprobs")
        if not isinstance(lp, dict):
            raise ValueError(f"{where}: no logprobs (the server must return them)")
        tokens, values = lp.get("tokens"), lp.get("token_logprobs")
        if not isinstance(tokens, list) or not isinstance(values, list):
            raise ValueError(f"{where}: logprobs without tokens/token_logprobs lists")
        if len(tokens) != len(values):
            raise ValueError(f"{where}: {len(tokens)} tokens but {len(values)} token_logprobs")
        ids = [_token_id(t) for t in tokens]
        logprobs = []
        for i, v in enumerate(values):
            if (
                not isinstance(v, int | float)
                or isinstance(v, bool)
                or not math.isfinite(v)
                or v > 0
            ):
                raise ValueError(f"{where}: token_logprobs[{i}] = {v!r} (need a finite value <= 0)")
            logprobs.append(float(v))
        end = completion_end(ids, stops)
        ids, logprobs = ids[:end], logprobs[:end]
        ended = bool(ids) and ids[-1] in stop
        if c.get("finish_reason") == "stop" and not ended:
            raise ValueError(
                f"{where}: finish_reason 'stop' but the completion does not end in a stop id "
                f"{sorted(stop)} (a stop string or a server that drops the stop token: ℓ "
                "would miss it)"
            )
        out.append((ids, logprobs, not ended))
    return out


class ServerSampler:
    """Samples one checkpoint's units through its served model (module docstring)."""

    def __init__(
        self,
        cfg: ProbeConfig,
        ck: Checkpoint,
        out: Path,
        *,
        prompt_format: PromptFormat,
        openai_client: Any = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.cfg, self.ck = cfg, ck
        self.base_url, self.model = served_model(cfg, ck)
        sv = cfg.server
        key = "unused"
        if sv.api_key_env:
            key = os.environ.get(sv.api_key_env, "")
            if not key:
                raise ConfigError(
                    f"{cfg.source}: [server] api_key_env: the environment variable "
                    f"{sv.api_key_env} is not set"
                )
        # the `train` extra: only sampling from a server (a probe run) builds the tokenizer
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(_tokenizer_dir(Path(ck.path)))
        self.prompt_format = prompt_format
        self.stops = self._stop_ids()
        config = LLMConfig(
            base_url=self.base_url,
            model=self.model,
            api_key=key,
            timeout_s=sv.timeout_s,
            concurrency=sv.concurrency,
            max_retries=sv.max_retries,
            backoff_base_s=sv.backoff_base_s,
        )
        kwargs: dict[str, Any] = {"openai_client": openai_client}
        if sleep is not None:
            kwargs["sleep"] = sleep
        try:
            self.client = LLMClient(config, **kwargs)
        except ImportError:
            raise RuntimeError(
                "backend 'server' needs the openai package (the llm extra: pip install -e '.[llm]')"
            ) from None
        self.cache = ResponseCache(out / CACHE_DIR)
        self.calls = 0
        self.cache_hits = 0

    def _stop_ids(self) -> list[int]:
        from transformers import GenerationConfig  # the `train` extra, as the tokenizer

        try:
            gen_config = GenerationConfig.from_pretrained(self.ck.path)
        except OSError:  # no generation_config.json: the tokenizer's EOS only
            gen_config = None
        return stop_token_ids(self.tokenizer, gen_config)

    @property
    def uses_chat(self) -> bool:
        return self.prompt_format.uses_chat(self.tokenizer)

    def prompt_ids(self, prompt: str) -> list[int]:
        try:
            return encode_prompt(self.tokenizer, prompt, self.prompt_format)
        except ValueError as exc:
            raise ConfigError(f"{self.ck.path}: [chat] {exc}") from None

    def body(self, prompt_ids: list[int], seed: int) -> dict[str, Any]:
        p = self.cfg.probe
        return {
            "model": self.model,
            "prompt": list(prompt_ids),
            "n": p.k,
            "temperature": p.temperature,
            "top_p": p.top_p,
            "top_k": -1,
            "min_p": 0.0,
            "repetition_penalty": 1.0,
            "frequency_penalty": 0.0,
            "presence_penalty": 0.0,
            "max_tokens": p.max_new_tokens,
            "seed": seed,
            "stop_token_ids": list(self.stops),
            "logprobs": 1,
            "return_tokens_as_token_ids": True,
        }

    def _where(self, question_id: str) -> str:
        return (
            f"checkpoint {self.ck.label} (served model {self.model!r} at "
            f"{mask_url(self.base_url)}), question {question_id}"
        )

    def complete(
        self, question_id: str, prompt_ids: list[int], seed: int
    ) -> list[ServerCompletion]:
        """The unit's K completions: from the cache when this exact request was answered
        before, else from the server (then cached)."""
        body = self.body(prompt_ids, seed)
        key = request_key(body)
        entry = self.cache.get(key)
        if entry is not None:
            self.cache_hits += 1
            reply = entry["reply"]
        else:
            try:
                reply, _ = self.client.post_json("/completions", body)
            except EndpointError as exc:
                raise ServerSampleError(f"{self._where(question_id)}: {exc}") from None
            self.calls += 1
        try:
            parsed = parse_choices(reply, self.cfg.probe.k, self.stops)
        except ValueError as exc:
            raise ServerSampleError(f"{self._where(question_id)}: unusable reply: {exc}") from None
        if entry is None:
            self.cache.put(
                key,
                {
                    "checkpoint": self.ck.label,
                    "question_id": question_id,
                    "model": self.model,
                    "reply": reply,
                },
            )
        return [
            ServerCompletion(
                ids,
                lps,
                self.tokenizer.decode(ids, skip_special_tokens=True),  # type: ignore[arg-type]  # the OpenAI-compatible reply's text is a str for a single prompt
                truncated,
            )
            for ids, lps, truncated in parsed
        ]

    def run(
        self,
        units: list[tuple[Any, list[int], int]],
        write: Callable[[Any, list[ServerCompletion]], None],
    ) -> None:
        """Complete every (question, prompt ids, seed) unit with at most ``concurrency``
        requests in flight; ``write(question, completions)`` is called in the calling
        thread, in the units' order. A unit that fails raises its
        :class:`ServerSampleError` once every unit before it is written (so a failure
        leaves exactly the units before the first failed one written; replies received
        for later units are in the cache)."""

        Job = tuple[int, tuple[Any, list[int], int]]
        done: dict[int, tuple[Any, list[ServerCompletion] | ServerSampleError]] = {}
        next_index = 0

        def work(job: Job) -> list[ServerCompletion] | ServerSampleError:
            _, (q, prompt_ids, seed) = job
            try:
                return self.complete(q.question_id, prompt_ids, seed)
            except ServerSampleError as exc:
                return exc

        def deliver(job: Job, res: list[ServerCompletion] | ServerSampleError) -> None:
            nonlocal next_index
            done[job[0]] = (job[1][0], res)
            while next_index in done:
                q, comps = done.pop(next_index)
                if isinstance(comps, ServerSampleError):
                    raise comps
                write(q, comps)
                next_index += 1

        run_jobs(
            list(enumerate(units)),
            work,
            concurrency=self.cfg.server.concurrency,
            on_result=deliver,
        )

    def close(self) -> None:
        self.cache.close()
