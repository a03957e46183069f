"""Sampling completions from a policy and scoring them with the toy oracles."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rcea.pipeline import toy
from rcea.pipeline.chat import completion_end, stop_token_ids


@dataclass
class Sample:
    question_id: str
    text: str
    n_tokens: int
    truncated: bool
    token_entropies: list[float]
    seq_logprob: float
    reward: int
    validity: int | None
    mode: str | None
    answer: str | None
    completion_ids: list[int] = field(default_factory=list)  # sampled ids, EOS included


Scorer = Callable[[Any, str], tuple[int, int | None, str | None, str | None]]
"""``scorer(question, text) -> (reward, validity, mode, answer)``."""


def toy_scorer(question: Any, text: str) -> tuple[int, int | None, str | None, str | None]:
    """The toy oracles: verifier R, process validity V, strategy Z, extracted answer."""
    return (
        toy.verify(question, text),
        toy.process_valid(question, text),
        toy.strategy(question, text),
        toy.extract_answer(text),
    )


def sample_completions(
    model: Any,
    tokenizer: Any,
    questions: list[toy.Question],
    k: int,
    *,
    max_new_tokens: int = 64,
    temperature: float = 1.0,
    seed: int = 0,
    batch_size: int = 256,
    top_p: float = 1.0,
    greedy: bool = False,
    scorer: Scorer = toy_scorer,
    token_scores: bool = True,
) -> list[Sample]:
    """``k`` sampled completions per question (ancestral sampling at ``temperature``, no
    top-k, nucleus ``top_p``; argmax decoding when ``greedy``), with per-token entropies and
    log-probabilities of the (processed) sampling distribution, scored by ``scorer`` (default:
    the toy oracles). ``questions`` need ``question_id`` and ``prompt``, and may carry the
    ``prompt_ids`` to condition on (else ``prompt`` is tokenised). A completion ends at its
    first stop id (:func:`rcea.pipeline.chat.stop_token_ids`: the tokenizer's EOS and the model's
    ``generation_config`` EOS ids), included. With
    ``token_scores=False`` the [batch × tokens × vocab] scores are not kept (probing computes
    them teacher-forced, chunked): ``token_entropies`` is empty and ``seq_logprob`` NaN."""
    import torch  # the `train` extra: only sampling from a loaded policy needs it

    model.eval()
    torch.manual_seed(seed)
    prompts = [q for q in questions for _ in range(k)]
    stops = stop_token_ids(tokenizer, getattr(model, "generation_config", None))
    out: list[Sample] = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        enc = _encode(tokenizer, chunk).to(model.device)
        with torch.no_grad():
            decoding: dict[str, Any] = (
                {"do_sample": False}
                if greedy
                else {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": top_p}
            )
            gen = model.generate(
                **enc,
                **decoding,
                max_new_tokens=max_new_tokens,
                output_scores=token_scores,
                return_dict_in_generate=True,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=stops,
            )
        seqs = gen.sequences[:, enc["input_ids"].shape[1] :]
        if token_scores:
            logp = torch.stack([torch.log_softmax(s.float(), -1) for s in gen.scores], dim=1)
            ent = -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1)
            chosen = logp.gather(-1, seqs.unsqueeze(-1)).squeeze(-1)
        for i, q in enumerate(chunk):
            ids = seqs[i].tolist()
            n = completion_end(ids, stops)
            text = tokenizer.decode(ids[:n], skip_special_tokens=True)
            reward, validity, mode, answer = scorer(q, text)
            out.append(
                Sample(
                    question_id=q.question_id,
                    text=text,
                    n_tokens=n,
                    truncated=not (n and ids[n - 1] in stops),
                    token_entropies=[float(x) for x in ent[i, :n]] if token_scores else [],
                    seq_logprob=float(chosen[i, :n].sum()) if token_scores else math.nan,
                    reward=reward,
                    validity=validity,
                    mode=mode,
                    answer=answer,
                    completion_ids=ids[:n],
                )
            )
    return out


def _encode(tokenizer: Any, items: list[Any]) -> Any:
    """Left-padded ``input_ids``/``attention_mask``: the items' own ``prompt_ids`` when they
    carry them (chat-templated prompts, :mod:`rcea.pipeline.chat`), else the tokenised
    ``prompt``."""
    from transformers import BatchEncoding  # the `train` extra, as the tokenizer passed in

    if not all(getattr(q, "prompt_ids", None) is not None for q in items):
        return tokenizer([q.prompt for q in items], return_tensors="pt", padding=True)
    import torch  # the `train` extra, as the tokenizer passed in

    rows = [list(q.prompt_ids) for q in items]
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], dtype=torch.long)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], dtype=torch.long)
    return BatchEncoding({"input_ids": ids, "attention_mask": mask})


@dataclass
class EvalSummary:
    n_questions: int
    k: int
    accuracy: float
    boxed_rate: float
    valid_given_success: float | None
    success_invalid_share: float
    mean_token_entropy: float
    mean_length: float
    truncated_share: float
    modes: dict[str, int] = field(default_factory=dict)
    questions_with_two_correct_modes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def summarise(samples: list[Sample], k: int) -> EvalSummary:
    """Macro accuracy over questions and pooled diagnostics of a sample set."""
    by_q: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        by_q[s.question_id].append(s)
    acc = sum(sum(s.reward for s in v) / len(v) for v in by_q.values()) / len(by_q)
    succ = [s for s in samples if s.reward == 1]
    modes = Counter(s.mode for s in succ if s.validity == 1)
    two_modes = sum(
        len({s.mode for s in v if s.reward == 1 and s.validity == 1} - {toy.UNKNOWN}) >= 2
        for v in by_q.values()
    )
    toks = [h for s in samples for h in s.token_entropies]
    return EvalSummary(
        n_questions=len(by_q),
        k=k,
        accuracy=acc,
        boxed_rate=sum(s.answer is not None for s in samples) / len(samples),
        valid_given_success=(sum(s.validity for s in succ) / len(succ)) if succ else None,  # type: ignore[misc]  # a stored row's id is set: SQLModel types every primary key Optional
        success_invalid_share=sum(1 for s in succ if s.validity == 0) / len(samples),
        mean_token_entropy=(sum(toks) / len(toks)) if toks else math.nan,
        mean_length=sum(s.n_tokens for s in samples) / len(samples),
        truncated_share=sum(s.truncated for s in samples) / len(samples),
        modes=dict(sorted(modes.items())),  # type: ignore[arg-type]  # the mode labels counted here are str; the Optional is the label function's declared type
        questions_with_two_correct_modes=two_modes,
    )
