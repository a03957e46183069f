"""A local OpenAI-compatible chat server for the codebook tests and benchmark, plus the
tiny synthetic domain it answers from.

The domain: each question is ``(a + b) * c`` with fixed numbers; a solution uses one of
three strategies (``direct``, ``distribute``, ``factor``) in one of three wordings, so
wording never decides the mode. :func:`strategy_of` is the domain's deterministic
strategy function (the ground truth, and what the ``oracle`` backend is given).

The server parses the codebook prompts (``Task:`` line, ``<solution id=...>`` blocks,
``<codebook>``/``<candidates>`` JSON) and answers from a scripted policy derived from
the oracle, with optional latency and injected faults: 429 with Retry-After, 500, a hang
past the client timeout, malformed JSON, an unknown mode id, flipped labels and low
confidence. Every request is logged under the server's own content hash of its body
(:func:`body_key`), computed here and never by the production ``request_fingerprint``, so
a fingerprint bug in the client cannot hide a repeated call. :func:`expected_fingerprint`
re-implements the client's documented cache key from a logged body, for tests that
compare what the client stored with what it sent.

``POST /v1/completions`` (the probe's server backend) answers ``n`` choices whose token
ids, stop and per-token log-probs are drawn from a generator seeded with the request's
own :func:`body_key` (:func:`fake_completion_choices`): the same request always gets the
same reply, and nothing of the production code computes it. Faults come from ``script``
or ``completion_fault(body, attempt)``: 429, 500, a hang, a body that is not JSON, choices
without log-probs, too few choices, tokens not in ``token_id:N`` form.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

STRATEGIES = ("direct", "distribute", "factor")
DESCRIPTIONS = {
    "direct": "add the two terms first, then multiply the sum by the factor once",
    "distribute": "multiply each term by the factor separately, then add the products",
    "factor": "recognise the common factor, group it, and multiply the grouped sum once",
}


# --------------------------------------------------------------------------- domain


def render_solution(strategy: str, a: int, b: int, c: int, variant: int) -> str:
    s, r, ac, bc = a + b, (a + b) * c, a * c, b * c
    forms = {
        "direct": [
            f"{a}+{b} = {s}\n{s}*{c} = {r}",
            f"First add the two terms: {a} plus {b} gives {s}. Multiply by {c}: {r}.",
            f"Sum: {s} (that is {a}+{b}). Product with {c}: {s}·{c} = {r}.",
        ],
        "distribute": [
            f"{a}*{c} = {ac}\n{b}*{c} = {bc}\n{ac}+{bc} = {r}",
            f"Distribute {c} over the sum: {a}×{c} = {ac} and {b}×{c} = {bc}, total {r}.",
            f"Expand: {c}·{a} + {c}·{b} = {ac} + {bc} = {r}.",
        ],
        "factor": [
            f"({a}+{b}) is a common factor\n{s}*{c} = {r}",
            f"Factor out the common ({a}+{b}) and multiply once: {s} times {c} = {r}.",
            f"Group first, factoring: ({a}+{b})·{c} = {r}.",
        ],
    }
    return forms[strategy][variant % 3] + f"\n\\boxed{{{r}}}"


def strategy_of(question_id: str | None, text: str) -> str | None:
    """The domain's strategy function (``question_id`` is not needed here)."""
    t = text.lower()
    if "factor" in t:
        return "factor"
    products = len(re.findall(r"\d\s*[*×·]\s*\d", t)) + t.count(" times ")
    if "distribut" in t or "expand" in t or products >= 2:
        return "distribute"
    if "+" in t or " plus " in t or "sum" in t or " add " in t:
        return "direct"
    return None


RUNS = ("grpo_main", "clipcov_ablation")
MODEL = "tiny-char-lm-v3"


def domain_records(
    *,
    questions: dict[str, list[str | None]],
    step: int = 0,
    n_failed: int = 2,
    start_k: int = 0,
    unique: bool = False,
) -> list[dict[str, Any]]:
    """Records for ``questions`` (question id → one strategy per accepted trajectory;
    None renders a solution with no identifiable method), plus ``n_failed`` failures per
    question. Provenance is deliberately long and distinctive (for the blinding scans).
    ``unique`` adds a checking line that makes every text (hence every prompt) distinct."""
    recs = []
    for qi, (q, strategies) in enumerate(sorted(questions.items())):
        a, b, c = 2 + qi, 3 + 2 * qi, 4 + qi
        for k, strategy in enumerate(strategies, start=start_k):
            run = RUNS[k % 2]
            text = (
                render_solution(strategy, a, b, c, variant=k)
                if strategy
                else f"The answer is \\boxed{{{(a + b) * c}}}."
            )
            if unique:
                text += f"\nCheck: {k + 2} x 1 = {k + 2}, fine."
            recs.append(
                {
                    "trajectory_id": f"{run}-s{step}-{q}-k{k:02d}",
                    "question_id": q,
                    "text": text,
                    "reward": 1,
                    "run": run,
                    "model": MODEL,
                    "step": step,
                    "seed": 4242 + k,
                    "validity": 1,
                    "mode": strategy,
                }
            )
        for j in range(n_failed):
            k = start_k + len(strategies) + j
            recs.append(
                {
                    "trajectory_id": f"{RUNS[0]}-s{step}-{q}-k{k:02d}",
                    "question_id": q,
                    "text": f"{a}+{b} = {a + b + 1}\n\\boxed{{{(a + b + 1) * c}}}",
                    "reward": 0,
                    "run": RUNS[0],
                    "model": MODEL,
                    "step": step,
                    "seed": 4242 + k,
                }
            )
    return recs


# --------------------------------------------------------------------------- server


@dataclass
class Faults:
    """Fractions of requests (chosen by content hash, so a rerun sees the same faults)."""

    rate_limit: float = 0.0
    retry_after_s: float = 0.2
    server_error: float = 0.0
    hang: float = 0.0
    hang_s: float = 3.0
    malformed: float = 0.0
    """every attempt of the request gets non-JSON text"""
    wrong_mode: float = 0.0
    """the reply names an unknown mode id for its first item"""
    flip: float = 0.0
    """per item: a different (wrong) existing mode"""
    low_confidence: float = 0.0
    """per item: confidence 0.4"""
    tasks: tuple[str, ...] = ("codebook.assign",)


@dataclass
class Call:
    key: str
    task: str
    status: int
    time: float
    attempt: int
    n_items: int


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def body_key(body: dict[str, Any]) -> str:
    """The server's key for a request: SHA-256 of its whole JSON body, keys sorted. Two
    requests share it iff they are the same request (a resent call)."""
    return hashlib.sha256(_canonical(body)).hexdigest()


def expected_fingerprint(body: dict[str, Any]) -> str:
    """The cache key the client must have used for ``body``, by the rule documented in
    ``rcea/pipeline/llm/cache.py`` (SHA-256 of the canonical JSON of model, messages' role and
    content, temperature, seed, response_format and max_tokens), written out again here
    so that a bug in the production function shows up as a mismatch."""
    payload = {
        "model": body["model"],
        "messages": [{"role": m["role"], "content": m["content"]} for m in body["messages"]],
        "temperature": body.get("temperature"),
        "seed": body.get("seed"),
        "response_format": body.get("response_format"),
        "max_tokens": body.get("max_tokens"),
    }
    return hashlib.sha256(_canonical(payload)).hexdigest()


def _unit(*parts: Any) -> float:
    h = hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()
    return int(h[:12], 16) / 16**12


_ITEM = re.compile(r'<solution id="(T\d+)">\n(.*?)\n</solution>', re.DOTALL)


def _block(text: str, tag: str) -> Any:
    m = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", text, re.DOTALL)
    return json.loads(m.group(1)) if m else []


def _key_word(name: str) -> str | None:
    n = name.lower()
    for s in STRATEGIES:
        if s in n:
            return s
    return None


def policy(task: str, messages: list[dict[str, str]], key: str, faults: Faults) -> dict[str, Any]:
    """The scripted answer to one prompt (a JSON-able dict)."""
    user = messages[-1]["content"]
    items = _ITEM.findall(user)
    faulty = task in faults.tasks
    if task == "codebook.induce":
        groups: dict[str, list[str]] = {}
        for handle, text in items:
            s = strategy_of(None, text)
            if s:
                groups.setdefault(s, []).append(handle)
        variant = int(key[:4], 16) % 3
        names = {s: [s, f"{s.title()} approach", f"{s} method"][variant] for s in groups}
        return {
            "modes": [
                {"name": names[s], "criterion": DESCRIPTIONS[s], "examples": h}
                for s, h in sorted(groups.items())
            ]
        }
    if task == "codebook.merge":
        cands = _block(user, "candidates")
        merged: dict[str, list[str]] = {}
        for c in cands:
            merged.setdefault(_key_word(c["name"]) or c["name"], []).append(c["id"])
        return {
            "modes": [
                {"name": s, "criterion": DESCRIPTIONS.get(s, s), "merged_from": ids}
                for s, ids in merged.items()
            ]
        }
    if task in ("codebook.assign", "codebook.arbitrate"):
        modes = _block(user, "codebook")
        out = []
        for handle, text in items:
            s = strategy_of(None, text)
            if s is None:
                out.append({"item": handle, "mode": "NONE", "confidence": 0.9})
                continue
            match = next((m for m in modes if _key_word(m["name"]) == s), None)
            if match is None:
                out.append(
                    {
                        "item": handle,
                        "mode": "NEW",
                        "confidence": 0.9,
                        "new_name": s,
                        "new_criterion": DESCRIPTIONS[s],
                    }
                )
                continue
            entry = {"item": handle, "mode": match["id"], "confidence": 0.95}
            if faulty and _unit("flip", key, handle) < faults.flip and len(modes) > 1:
                others = [m["id"] for m in modes if m["id"] != match["id"]]
                entry.update(mode=others[0], confidence=0.8)
            elif faulty and _unit("low", key, handle) < faults.low_confidence:
                entry["confidence"] = 0.4
            if task == "codebook.arbitrate":
                entry["rationale"] = f"the decisive method is {s}"
            out.append(entry)
        if faulty and out and _unit("wrong", key) < faults.wrong_mode:
            out[0] = {**out[0], "mode": "m99"}
        return {"assignments": out}
    return {"ok": True, "n_messages": len(messages)}


COMPLETION_VOCAB = tuple(range(4, 40))
"""Token ids the fake completions draw from (printable characters of the tiny char
tokenizer, :func:`rcea.pipeline.policy.build_char_tokenizer`)."""


def fake_completion_choices(
    body: dict[str, Any], vocab: tuple[int, ...] = COMPLETION_VOCAB
) -> list[dict[str, Any]]:
    """The ``n`` choices the fake server returns for ``body``: choice i draws, from
    ``Random(sha256(body_key | i))``, a length in [1, max_tokens + 3]; up to max_tokens
    it is ``length - 1`` ids from ``vocab`` then the first stop id (finish "stop"), beyond
    it ``max_tokens`` ids (finish "length"); every token gets a log-prob in [-5, -0.001]."""
    key = body_key(body)
    n = int(body.get("n") or 1)
    max_tokens = int(body["max_tokens"])
    stops = list(body.get("stop_token_ids") or [])
    as_ids = bool(body.get("return_tokens_as_token_ids"))
    out = []
    for i in range(n):
        rng = random.Random(int(hashlib.sha256(f"{key}|{i}".encode()).hexdigest()[:16], 16))
        length = rng.randint(1, max_tokens + 3)
        if length > max_tokens or not stops:
            ids, finish = [rng.choice(vocab) for _ in range(max_tokens)], "length"
        else:
            ids, finish = [rng.choice(vocab) for _ in range(length - 1)] + [stops[0]], "stop"
        lps = [-rng.uniform(0.001, 5.0) for _ in ids]
        tokens = [f"token_id:{t}" if as_ids else f"<{t}>" for t in ids]
        logprobs = None
        if body.get("logprobs") is not None:
            logprobs = {
                "tokens": tokens,
                "token_logprobs": lps,
                "top_logprobs": [{t: lp} for t, lp in zip(tokens, lps, strict=True)],
                "text_offset": list(range(len(ids))),
            }
        out.append(
            {
                "index": i,
                "text": "".join(chr(0x41 + t % 26) for t in ids),
                "logprobs": logprobs,
                "finish_reason": finish,
                "stop_reason": None,
            }
        )
    return out


class FakeLLM:
    """``with FakeLLM(latency_s=0.05, faults=Faults(...)) as llm: llm.base_url ...``"""

    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        faults: Faults | None = None,
        port: int | None = None,
    ) -> None:
        from tests.support.helpers import free_port

        self.latency_s = latency_s
        self.faults = faults or Faults()
        self.port = port or free_port()
        self.calls: list[Call] = []
        self.script: deque[tuple[str, float]] = deque()
        """forced outcomes for the next requests: ("429", retry_after), ("500", 0),
        ("400", 0), ("hang", seconds), ("malformed", 0)"""
        self.requests: list[dict[str, Any]] = []
        self.bodies: dict[str, dict[str, Any]] = {}
        """request body by :func:`body_key`"""
        self.completion_fault: Any = None
        """optional ``completion_fault(body, attempt) -> kind | None`` for /v1/completions:
        "429", "500", "400", "hang", "malformed" (not JSON), "no_logprobs", "few_choices",
        "text_tokens" (tokens not as token_id:N)"""
        self.responder: Any = None
        """optional ``responder(task, messages) -> reply text``: answers every request it
        returns a string for (the validity-judge tests script their replies with it)"""
        self._attempts: dict[str, int] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def served(self, task: str | None = None) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.status == 200 and (task is None or c.task == task)]

    def app(self):  # type: ignore[no-untyped-def]
        api = FastAPI()

        @api.get("/health")
        async def health() -> dict[str, bool]:
            return {"ok": True}

        @api.get("/_calls")
        async def calls() -> list[dict[str, Any]]:
            with self._lock:
                return [c.__dict__ for c in self.calls]

        async def counted(handler, request: Request):  # type: ignore[no-untyped-def]
            """Run ``handler`` while counting requests in flight (and their maximum)."""
            with self._lock:
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                return await handler(request)
            finally:
                with self._lock:
                    self.in_flight -= 1

        @api.post("/v1/chat/completions")
        async def chat(request: Request):  # type: ignore[no-untyped-def]
            return await counted(answer, request)

        @api.post("/v1/completions")
        async def completions(request: Request):  # type: ignore[no-untyped-def]
            return await counted(complete, request)

        async def complete(request: Request):  # type: ignore[no-untyped-def]
            from fastapi.responses import Response

            body = await request.json()
            key = body_key(body)
            n = int(body.get("n") or 1)
            with self._lock:
                attempt = self._attempts[key] = self._attempts.get(key, 0) + 1
                forced = self.script.popleft() if self.script else None
                self.requests.append(body)
                self.bodies[key] = body
            kind = forced[0] if forced else None
            if kind is None and self.completion_fault is not None:
                kind = self.completion_fault(body, attempt)

            def log(status: int) -> None:
                with self._lock:
                    self.calls.append(Call(key, "completions", status, time.time(), attempt, n))

            if kind == "429":
                log(429)
                after = forced[1] if forced else self.faults.retry_after_s
                return JSONResponse(
                    {"error": {"message": "rate limited", "type": "rate_limit_error"}},
                    status_code=429,
                    headers={"Retry-After": str(after)},
                )
            if kind == "400":
                log(400)
                return JSONResponse(
                    {"error": {"message": f"The model `{body['model']}` does not exist."}},
                    status_code=400,
                )
            if kind == "500":
                log(500)
                return JSONResponse({"error": {"message": "boom"}}, status_code=500)
            if kind == "hang":
                await asyncio.sleep(forced[1] if forced else self.faults.hang_s)
                log(599)
                return JSONResponse({"error": {"message": "too late"}}, status_code=500)
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            log(200)
            if kind == "malformed":
                return Response(
                    '{"choices": [{"index": 0, "logprobs": ', media_type="application/json"
                )
            choices = fake_completion_choices(body)
            if kind == "no_logprobs":
                choices = [{**c, "logprobs": None} for c in choices]
            elif kind == "few_choices":
                choices = choices[:-1]
            elif kind == "text_tokens":
                for c in choices:
                    c["logprobs"]["tokens"] = [f"<{t}>" for t in c["logprobs"]["tokens"]]
            n_out = sum(len(c["logprobs"]["tokens"]) for c in choices if c["logprobs"])
            return JSONResponse(
                {
                    "id": f"cmpl-{key[:12]}",
                    "object": "text_completion",
                    "created": int(time.time()),
                    "model": body["model"],
                    "choices": choices,
                    "usage": {
                        "prompt_tokens": len(body["prompt"]),
                        "completion_tokens": n_out,
                        "total_tokens": len(body["prompt"]) + n_out,
                    },
                }
            )

        async def answer(request: Request):  # type: ignore[no-untyped-def]
            body = await request.json()
            messages = body["messages"]
            key = body_key(body)  # the call log's key: this server's own hash
            # Faults and scripted variants are chosen by content, from the documented
            # fingerprint (so fault patterns do not depend on how the body is serialised).
            content_key = expected_fingerprint(body)
            first = messages[0]["content"].splitlines()[0] if messages else ""
            task = first.removeprefix("Task: ").strip() if first.startswith("Task:") else "echo"
            n_items = len(_ITEM.findall(messages[-1]["content"]))
            with self._lock:
                attempt = self._attempts[key] = self._attempts.get(key, 0) + 1
                forced = self.script.popleft() if self.script else None
                self.requests.append(body)
                self.bodies[key] = body

            def log(status: int) -> None:
                with self._lock:
                    self.calls.append(Call(key, task, status, time.time(), attempt, n_items))

            f = self.faults
            faulty = task in f.tasks
            u = _unit("transient", content_key)
            kind = forced[0] if forced else None
            if kind is None and faulty and attempt == 1:
                if u < f.rate_limit:
                    kind = "429"
                elif u < f.rate_limit + f.server_error:
                    kind = "500"
                elif u < f.rate_limit + f.server_error + f.hang:
                    kind = "hang"
            if kind is None and faulty and _unit("malformed", content_key) < f.malformed:
                kind = "malformed"
            if kind == "429":
                log(429)
                after = forced[1] if forced else f.retry_after_s
                return JSONResponse(
                    {"error": {"message": "rate limited", "type": "rate_limit_error"}},
                    status_code=429,
                    headers={"Retry-After": str(after)},
                )
            if kind == "400":
                log(400)
                return JSONResponse({"error": {"message": "bad request"}}, status_code=400)
            if kind == "500":
                log(500)
                return JSONResponse({"error": {"message": "boom"}}, status_code=500)
            if kind == "hang":
                await asyncio.sleep(forced[1] if forced else f.hang_s)
                log(599)
                return JSONResponse({"error": {"message": "too late"}}, status_code=500)
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            scripted = self.responder(task, messages) if self.responder else None
            if kind == "malformed":
                content = "Sure! Here are the assignments: {assignments: [T1 -> m1,"
            elif scripted is not None:
                content = scripted
            else:
                content = json.dumps(policy(task, messages, content_key, f))
            log(200)
            prompt_chars = sum(len(m["content"]) for m in messages)
            return JSONResponse(
                {
                    "id": f"chatcmpl-{key[:12]}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": content},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": prompt_chars // 4,
                        "completion_tokens": len(content) // 4,
                        "total_tokens": prompt_chars // 4 + len(content) // 4,
                    },
                }
            )

        return api

    def start(self) -> FakeLLM:
        import httpx
        import uvicorn

        config = uvicorn.Config(
            self.app(),
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        for _ in range(400):
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1)
                return self
            except httpx.HTTPError:
                time.sleep(0.025)
        raise RuntimeError("fake LLM server did not start")

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    """``python -m tests.support.fake_llm --port P --latency 0.05`` (the benchmark's server)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--latency", type=float, default=0.0)
    args = ap.parse_args()
    server = FakeLLM(latency_s=args.latency, port=args.port)
    import uvicorn

    uvicorn.run(server.app(), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
