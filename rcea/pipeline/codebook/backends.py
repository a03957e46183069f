"""Who answers the codebook questions: an OpenAI-compatible LLM, or a domain oracle.

Both backends take the same blinded inputs and return the same validated reply models
wrapped in :class:`~rcea.pipeline.llm.LLMResult`, so every stage runs unchanged on either. The
oracle stands in for the LLM where a domain defines a deterministic strategy function
(the embedded toy domain): it is the demo path without network and the ground truth the
tests measure the pipeline against.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from rcea.pipeline.codebook import prompts
from rcea.pipeline.codebook.model import NEW, NONE, BlindItem, Candidate, Mode, normalise_name
from rcea.pipeline.codebook.schemas import (
    AssignReply,
    InducedMode,
    InduceReply,
    ItemAssignment,
    MergedMode,
    MergeReply,
)
from rcea.pipeline.llm import LLMClient, LLMResult, Messages, UsageSnapshot, canonical_json

T = TypeVar("T", bound=BaseModel)

StrategyFn = Callable[[str, str], "str | None"]
"""``strategy_fn(question_id, text) -> mode name`` (None: no identifiable strategy)."""


PromptGuard = Callable[[str, "list[dict[str, str]]"], None]
"""``guard(question_id, messages)``: sees every rendered prompt before it is sent."""


class CodebookBackend(Protocol):
    name: str

    def set_guard(self, guard: PromptGuard | None) -> None: ...

    def describe(self) -> dict[str, Any]: ...

    def usage(self) -> UsageSnapshot: ...

    def induce(
        self, question_id: str, items: Sequence[BlindItem], question: str | None = None
    ) -> LLMResult[InduceReply]: ...

    def merge(
        self,
        question_id: str,
        candidates: Sequence[tuple[str, Candidate]],
        question: str | None = None,
    ) -> LLMResult[MergeReply]: ...

    def assign(
        self,
        question_id: str,
        modes: Sequence[Mode],
        items: Sequence[BlindItem],
        question: str | None = None,
    ) -> LLMResult[AssignReply]: ...

    def arbitrate(
        self,
        question_id: str,
        modes: Sequence[Mode],
        items: Sequence[BlindItem],
        question: str | None = None,
    ) -> LLMResult[AssignReply]: ...


class OpenAIBackend:
    """Renders the versioned prompts and asks the endpoint through :class:`LLMClient`.

    ``question_id`` is accepted for interface symmetry and never rendered."""

    name = "openai"

    def __init__(self, client: LLMClient, *, guard: PromptGuard | None = None) -> None:
        self.client = client
        self.guard = guard

    def set_guard(self, guard: PromptGuard | None) -> None:
        self.guard = guard

    def _ask(self, question_id: str, messages: Messages, schema: type[T]) -> LLMResult[T]:
        if self.guard is not None:
            self.guard(question_id, messages)
        return self.client.complete_json(messages, schema)

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            **self.client.config.public_dict(),
            "prompts": prompts.prompt_set_id(),
        }

    def usage(self) -> UsageSnapshot:
        return self.client.usage.snapshot()

    def induce(
        self, question_id: str, items: Sequence[BlindItem], question: str | None = None
    ) -> LLMResult[InduceReply]:
        return self._ask(question_id, prompts.render_induce(items, question), InduceReply)

    def merge(
        self,
        question_id: str,
        candidates: Sequence[tuple[str, Candidate]],
        question: str | None = None,
    ) -> LLMResult[MergeReply]:
        return self._ask(question_id, prompts.render_merge(candidates, question), MergeReply)

    def assign(
        self,
        question_id: str,
        modes: Sequence[Mode],
        items: Sequence[BlindItem],
        question: str | None = None,
    ) -> LLMResult[AssignReply]:
        return self._ask(question_id, prompts.render_assign(modes, items, question), AssignReply)

    def arbitrate(
        self,
        question_id: str,
        modes: Sequence[Mode],
        items: Sequence[BlindItem],
        question: str | None = None,
    ) -> LLMResult[AssignReply]:
        return self._ask(question_id, prompts.render_arbitrate(modes, items, question), AssignReply)


def match_mode(strategy: str, modes: Sequence[Mode]) -> Mode | None:
    """The mode whose name is the strategy (ignoring case/punctuation), else the first
    whose name or criterion mentions it."""
    key = normalise_name(strategy)
    for m in modes:
        if normalise_name(m.name) == key:
            return m
    for m in modes:
        if key and (key in normalise_name(m.name) or key in normalise_name(m.criterion)):
            return m
    return None


class OracleBackend:
    """Deterministic stand-in for the LLM built on a domain's ``strategy_fn``.

    Induction groups a batch by strategy; merging joins candidates of the same name;
    assignment maps the strategy to the mode carrying its name (``NEW`` if none does,
    ``NONE`` when the oracle sees no strategy), always with confidence 1.
    """

    name = "oracle"

    def __init__(
        self,
        strategy_fn: StrategyFn,
        *,
        describe_fn: Callable[[str], str] | None = None,
        label: str = "",
    ) -> None:
        self.strategy_fn = strategy_fn
        self.describe_fn = describe_fn or (lambda s: f"solutions the domain oracle labels {s!r}")
        self.label = label or getattr(strategy_fn, "__qualname__", "strategy_fn")
        self._calls = 0
        self._lock = threading.Lock()

    def set_guard(self, guard: PromptGuard | None) -> None:
        """No prompts are rendered: the oracle reads the texts directly."""

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "strategy_fn": self.label}

    def usage(self) -> UsageSnapshot:
        return UsageSnapshot(completed=self._calls)

    def _result(self, value: Any, *parts: Any) -> LLMResult[Any]:
        with self._lock:
            self._calls += 1
        key = hashlib.sha256(canonical_json([str(p) for p in parts]).encode()).hexdigest()
        return LLMResult(value, key, attempts=1)

    def induce(
        self, question_id: str, items: Sequence[BlindItem], question: str | None = None
    ) -> LLMResult[InduceReply]:
        groups: dict[str, list[str]] = {}
        for item in items:
            strategy = self.strategy_fn(question_id, item.text)
            if strategy:
                groups.setdefault(strategy, []).append(item.handle)
        reply = InduceReply(
            modes=[
                InducedMode(name=s, criterion=self.describe_fn(s), examples=h)
                for s, h in sorted(groups.items())
            ]
        )
        return self._result(reply, "induce", question_id, [i.text for i in items])

    def merge(
        self,
        question_id: str,
        candidates: Sequence[tuple[str, Candidate]],
        question: str | None = None,
    ) -> LLMResult[MergeReply]:
        groups: dict[str, list[str]] = {}
        names: dict[str, str] = {}
        for cid, cand in candidates:
            key = normalise_name(cand.name)
            groups.setdefault(key, []).append(cid)
            names.setdefault(key, cand.name)
        reply = MergeReply(
            modes=[
                MergedMode(name=names[k], criterion=self.describe_fn(names[k]), merged_from=ids)
                for k, ids in groups.items()
            ]
        )
        return self._result(reply, "merge", question_id, sorted(groups))

    def _assign(
        self, task: str, question_id: str, modes: Sequence[Mode], items: Sequence[BlindItem]
    ) -> LLMResult[AssignReply]:
        out = []
        for item in items:
            strategy = self.strategy_fn(question_id, item.text)
            if not strategy:
                out.append(ItemAssignment(item=item.handle, mode=NONE, confidence=1.0))
                continue
            mode = match_mode(strategy, modes)
            if mode is None:
                out.append(
                    ItemAssignment(
                        item=item.handle,
                        mode=NEW,
                        confidence=1.0,
                        new_name=strategy,
                        new_criterion=self.describe_fn(strategy),
                    )
                )
            else:
                out.append(ItemAssignment(item=item.handle, mode=mode.id, confidence=1.0))
        reply = AssignReply(assignments=out)
        return self._result(
            reply, task, question_id, [m.id for m in modes], [i.text for i in items]
        )

    def assign(
        self,
        question_id: str,
        modes: Sequence[Mode],
        items: Sequence[BlindItem],
        question: str | None = None,
    ) -> LLMResult[AssignReply]:
        return self._assign("assign", question_id, modes, items)

    def arbitrate(
        self,
        question_id: str,
        modes: Sequence[Mode],
        items: Sequence[BlindItem],
        question: str | None = None,
    ) -> LLMResult[AssignReply]:
        return self._assign("arbitrate", question_id, modes, items)
