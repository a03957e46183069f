"""Teacher-forced scores of EXISTING trajectories (``rcea probe score``): per-token
entropies, chosen-token log-probs and ℓ = Σ log π(y_t | x, y_<t) of a study's own texts
under a local Hugging Face checkpoint, through the chunked kernel
(:func:`rcea.pipeline.probe.entropy_kernel.token_stats`).

The prompt is rebuilt from the stored question text with the checkpoint's chat template
(:func:`rcea.pipeline.chat.encode_prompt`, an optional system message), or used raw when the
template is switched off; the completion is the stored text tokenised without special
tokens (the end-of-turn token the dump stripped is not scored). Pure producer: no store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rcea.pipeline.chat import PromptFormat, encode_prompt
from rcea.pipeline.probe.common import load_policy
from rcea.pipeline.probe.entropy_kernel import TokenStats, token_stats


@dataclass(frozen=True)
class ScoreItem:
    trajectory_id: str
    question: str
    text: str


class Scorer:
    """One loaded checkpoint (CUDA when present) scoring (question, text) items."""

    def __init__(
        self,
        path: str,
        *,
        prompt_format: PromptFormat | None = None,
        chunk_size: int = 128,
        batch_size: int = 8,
    ) -> None:
        self.path = path
        self.model, self.tokenizer = load_policy(path)
        self.fmt = prompt_format or PromptFormat()
        self.chunk_size = chunk_size
        self.batch_size = batch_size

    def encode(self, item: ScoreItem) -> tuple[list[int], list[int]]:
        prompt = encode_prompt(self.tokenizer, item.question, self.fmt)
        completion = [
            int(i) for i in self.tokenizer(item.text, add_special_tokens=False)["input_ids"]
        ]
        if not completion:
            raise ValueError(f"{item.trajectory_id}: the text has no tokens")
        return prompt, completion

    def score(self, items: Sequence[ScoreItem]) -> list[TokenStats]:
        pairs = [self.encode(it) for it in items]
        return token_stats(
            self.model,
            [p for p, _ in pairs],
            [c for _, c in pairs],
            chunk_size=self.chunk_size,
            batch_size=self.batch_size,
            pad_id=self.tokenizer.pad_token_id or 0,
        )

    def describe(self) -> dict[str, Any]:
        return {
            "checkpoint": str(self.path),
            "prompt_format": self.fmt.to_dict(),
            "chat_template_used": self.fmt.uses_chat(self.tokenizer),
            "chunk_size": self.chunk_size,
        }
