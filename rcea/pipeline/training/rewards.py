"""Reward functions for TRL (``reward_funcs``): the toy verifier, any pluggable verifier
(``[verifier] kind``) and DAPO's overlong shaping (TRL's).

TRL calls ``f(prompts=..., completions=..., completion_ids=..., **dataset_columns,
trainer_state=..., log_metric=..., log_extra=...)`` and expects one float per completion.
"""

from __future__ import annotations

from typing import Any

from rcea.pipeline import toy
from rcea.pipeline.judge.verifier import make_verifier


class ToyReward:
    """R from :func:`rcea.pipeline.toy.verify`. Also logs boxed rate, accuracy and validity, and
    keeps the outcomes of the latest call (in generation order) for group-level objectives
    (DAPO removes groups whose *accuracy* has zero variance)."""

    __name__ = "toy_correct"

    def __init__(self) -> None:
        self._pending: list[float] = []

    def __call__(
        self,
        prompts: list[Any],
        completions: list[Any],
        question_id: list[str] | None = None,
        log_metric: Any = None,
        **_: Any,
    ) -> list[float]:
        if question_id is None:
            raise ValueError("the training dataset needs a 'question_id' column")
        texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
        qs = [toy.question_from_id(q) for q in question_id]
        rewards = [toy.verify(q, t) for q, t in zip(qs, texts, strict=True)]
        valid = [toy.process_valid(q, t) for q, t in zip(qs, texts, strict=True)]
        boxed = [toy.extract_answer(t) is not None for t in texts]
        self._pending.extend(float(r) for r in rewards)
        if log_metric is not None:
            n = len(texts)
            log_metric("toy/accuracy", sum(rewards) / n)
            log_metric("toy/boxed_rate", sum(boxed) / n)
            log_metric(
                "toy/success_invalid_rate",
                sum(1 for r, v in zip(rewards, valid, strict=True) if r and not v) / n,
            )
        return [float(r) for r in rewards]

    def pop_outcomes(self) -> list[float]:
        out, self._pending = self._pending, []
        return out


class VerifierReward:
    """R from a pluggable verifier (:func:`rcea.pipeline.judge.verifier.make_verifier`) against
    the dataset's ``answer`` column (the gold). Logs ``verifier/accuracy`` and
    ``verifier/boxed_rate`` (share with an extracted answer) and keeps the outcomes of the
    latest call for group-level objectives, like :class:`ToyReward`."""

    __name__ = "verifier_correct"

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.verify = make_verifier(kind)
        self._pending: list[float] = []

    def __call__(
        self,
        prompts: list[Any],
        completions: list[Any],
        question_id: list[str] | None = None,
        answer: list[str | None] | None = None,
        log_metric: Any = None,
        **_: Any,
    ) -> list[float]:
        if question_id is None:
            raise ValueError("the training dataset needs a 'question_id' column")
        texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
        golds = answer if answer is not None else [None] * len(texts)
        results = [self.verify(t, g, q) for t, g, q in zip(texts, golds, question_id, strict=True)]
        rewards = [float(v.reward) for v in results]
        self._pending.extend(rewards)
        if log_metric is not None and texts:
            n = len(texts)
            log_metric("verifier/accuracy", sum(rewards) / n)
            log_metric("verifier/boxed_rate", sum(v.answer is not None for v in results) / n)
        return rewards

    def pop_outcomes(self) -> list[float]:
        out, self._pending = self._pending, []
        return out


def overlong_shaping(max_len: int, buffer_frac: float = 0.2) -> Any:
    """DAPO's soft overlong punishment, TRL's own (``trl.rewards.get_soft_overlong_punishment``):
    0 up to ``max_len - buffer`` tokens (EOS included), then linear down to -1 at ``max_len``,
    -1 beyond; ``buffer = round(buffer_frac * max_len)``. Its magnitude is the reward weight
    (``overlong_penalty``, see :func:`rcea.pipeline.training.run.build_trainer`)."""
    from trl.rewards import get_soft_overlong_punishment  # TRL: only building a trainer

    if not 0 <= buffer_frac <= 1:
        raise ValueError(f"overlong_buffer_frac must be in [0, 1], got {buffer_frac}")
    return get_soft_overlong_punishment(max_len, int(round(buffer_frac * max_len)))
