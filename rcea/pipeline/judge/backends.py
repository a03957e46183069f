"""Who judges a verifier success: an OpenAI-compatible model or a domain oracle.

The frozen judge is a :class:`JudgeSpec` — backend, model (for the oracle backend: the
``MODULE:FUNCTION`` of the domain's validity function), prompt template and decoding
settings (temperature 0, a recorded seed, optional ``max_tokens``). Its
``content_hash()`` is the SHA-256 of the canonical JSON of ``to_dict()``; any change of
model, template text or decoding makes another judge.

Each judgement is a :class:`JudgeOutcome`:

* ``verdict`` ``valid`` / ``invalid`` — a reply that parsed as ``{"verdict": …,
  "rationale": …}``;
* ``verdict`` ``unparseable`` — the model answered, but (after the client's re-ask) not
  with that JSON: counted against coverage, never as valid;
* ``verdict`` ``None`` — no answer at all (transport failures after every retry): not a
  verdict; the caller leaves the trajectory pending so a rerun asks again.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from rcea.pipeline.judge.prompts import DEFAULT_TEMPLATE, JudgeTemplate
from rcea.pipeline.llm import LLMClient, Messages, parse_json_reply

__all__ = [
    "INVALID",
    "UNPARSEABLE",
    "VALID",
    "JudgeOutcome",
    "JudgeReply",
    "JudgeSpec",
    "OpenAIJudge",
    "OracleJudge",
    "ValidityFn",
    "parse_judge_reply",
]

VALID, INVALID, UNPARSEABLE = "valid", "invalid", "unparseable"
BACKENDS = ("openai", "oracle")
RATIONALE_MAX = 500

ValidityFn = Callable[[str, str], "int | bool | None"]
"""``validity_fn(question_id, text)``: 1/True process-valid, 0/False fatal error,
None undecidable (recorded as ``unparseable``)."""


class JudgeReply(BaseModel):
    """The JSON a judge model must answer with."""

    model_config = ConfigDict(extra="ignore")

    verdict: Literal["valid", "invalid"]
    rationale: str = ""
    error_location: str = ""

    @field_validator("verdict", mode="before")
    @classmethod
    def _normalise(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("rationale", "error_location", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return "" if value is None else value


def parse_judge_reply(text: str | None) -> JudgeReply:
    """Validate a reply text (a Markdown code fence around the JSON is tolerated);
    raises ``ValueError`` when it is not the judge JSON."""
    return parse_json_reply(text, JudgeReply)


@dataclass(frozen=True)
class JudgeSpec:
    backend: str
    model: str
    template: JudgeTemplate = DEFAULT_TEMPLATE
    temperature: float = 0.0
    seed: int = 0
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown judge backend {self.backend!r} (choose from {BACKENDS})")
        if not isinstance(self.model, str) or not self.model.strip():
            raise ValueError("a judge needs a model (--model, or --oracle for the oracle backend)")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "model": self.model,
            "template": self.template.to_dict(),
            "template_id": self.template.id,
            "template_hash": self.template.content_hash(),
            "decoding": {
                "temperature": float(self.temperature),
                "seed": int(self.seed),
                "max_tokens": self.max_tokens,
            },
        }

    def content_hash(self) -> str:
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JudgeSpec:
        t = data["template"]
        dec = data.get("decoding", {})
        return cls(
            backend=data["backend"],
            model=data["model"],
            template=JudgeTemplate(
                name=t["name"], version=t["version"], system=t["system"], user=t["user"]
            ),
            temperature=dec.get("temperature", 0.0),
            seed=dec.get("seed", 0),
            max_tokens=dec.get("max_tokens"),
        )


@dataclass
class JudgeOutcome:
    verdict: str | None
    rationale: str = ""
    error_location: str = ""
    request_hash: str | None = None
    error: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)


class OpenAIJudge:
    """Renders the frozen template and asks through the shared :class:`LLMClient`
    (retries, backoff, cache, bounded concurrency). ``guard(question_id, messages)`` sees
    every rendered prompt first and may raise to stop the run (blinding scan)."""

    name = "openai"

    def __init__(
        self,
        client: LLMClient,
        template: JudgeTemplate,
        *,
        guard: Callable[[str, Messages], None] | None = None,
    ) -> None:
        self.client = client
        self.template = template
        self.guard = guard

    def usage(self) -> dict[str, Any]:
        return self.client.usage.snapshot().to_dict()

    def judge(self, question_id: str, problem: str, solution: str) -> JudgeOutcome:
        messages = self.template.render(problem=problem, solution=solution)
        if self.guard is not None:
            self.guard(question_id, messages)
        result = self.client.complete_json(messages, JudgeReply)
        if result.ok:
            reply = result.value
            assert reply is not None
            return JudgeOutcome(
                reply.verdict,
                reply.rationale[:RATIONALE_MAX],
                reply.error_location[:RATIONALE_MAX],
                request_hash=result.key,
                usage=result.usage_dict(),
            )
        answered = result.raw is not None or (result.error or "").startswith("invalid reply")
        return JudgeOutcome(
            UNPARSEABLE if answered else None,
            request_hash=result.key,
            error=result.error,
            usage=result.usage_dict(),
        )


class OracleJudge:
    """A domain's deterministic validity function standing in for the model (the toy
    domain's ``rcea.pipeline.toy:validity_by_id``): the demo path and the tests' ground truth."""

    name = "oracle"

    def __init__(self, validity_fn: ValidityFn, *, label: str = "") -> None:
        self.validity_fn = validity_fn
        self.label = label or getattr(validity_fn, "__qualname__", "validity_fn")
        self._calls = 0
        self._lock = threading.Lock()

    def usage(self) -> dict[str, Any]:
        return {"completed": self._calls}

    def judge(self, question_id: str, problem: str, solution: str) -> JudgeOutcome:
        with self._lock:
            self._calls += 1
        value = self.validity_fn(question_id, solution)
        key = hashlib.sha256(f"{self.label}\x00{question_id}\x00{solution}".encode()).hexdigest()
        if value is None:
            return JudgeOutcome(UNPARSEABLE, request_hash=key, error="oracle: undecidable")
        ok = bool(value)
        return JudgeOutcome(
            VALID if ok else INVALID,
            f"domain oracle ({self.label}): " + ("process-valid" if ok else "fatal error"),
            request_hash=key,
        )
