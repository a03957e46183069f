"""Dumps written by verl's OWN writers, for the importer's tests.

``dump_generations`` calls ``RayPPOTrainer._dump_generations`` (what ``_validate`` calls
with ``validation_data_dir``) and ``log_rollout_data`` calls
``RayPPOTrainer._log_rollout_data`` (what ``fit`` calls with ``rollout_data_dir``: it
decodes a real ``DataProto`` with the tokenizer and sums ``token_level_scores``), both as
unbound functions on a stand-in trainer that carries only the attributes they read
(``global_steps``, ``tokenizer``, the dump executor). Scores come from verl's own
scorers (``verl.utils.reward_score.gsm8k`` / ``math_dapo``) where a test says so; nothing
here re-implements verl's file format.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

from tests.support.verl_env import import_verl


def trainer_class() -> Any:
    return import_verl("verl.trainer.ppo.ray_trainer").RayPPOTrainer


def gsm8k_score(solution: str, ground_truth: str, **kw: Any) -> float:
    """verl's gsm8k scorer (``format_score=0.1`` gives a formatted wrong answer 0.1)."""
    return import_verl("verl.utils.reward_score.gsm8k").compute_score(solution, ground_truth, **kw)


def dapo_score(solution: str, ground_truth: str) -> dict[str, Any]:
    """verl's DAPO math scorer: ``{"score": ±1.0, "acc": bool, "pred": str}``."""
    return import_verl("verl.utils.reward_score.math_dapo").compute_score(solution, ground_truth)


def _stand_in(step: int, tokenizer: Any = None) -> Any:
    cls = trainer_class()
    me = types.SimpleNamespace(global_steps=step, tokenizer=tokenizer)
    me._write_generations = cls._write_generations  # a staticmethod on the class
    me._dump_generations = types.MethodType(cls._dump_generations, me)
    cls._init_dump_executor(me)
    return me


def dump_generations(
    directory: Path,
    step: int,
    inputs: list[str],
    outputs: list[str],
    gts: list[Any],
    scores: list[float],
    extras: dict[str, list[Any]] | None = None,
) -> Path:
    """``{directory}/{step}.jsonl`` as ``RayPPOTrainer._dump_generations`` writes it."""
    cls = trainer_class()
    me = _stand_in(step)
    cls._dump_generations(me, inputs, outputs, gts, scores, extras or {}, str(directory))
    cls._shutdown_dump_executor(me)
    return directory / f"{step}.jsonl"


def log_rollout_data(
    directory: Path,
    step: int,
    tokenizer: Any,
    prompts: list[str],
    responses: list[str],
    scores: list[float],
    gts: list[Any],
    extras: dict[str, list[Any]] | None = None,
) -> Path:
    """``{directory}/{step}.jsonl`` as ``RayPPOTrainer._log_rollout_data`` writes it from a
    batch: ``prompts`` (chat-templated text) left-padded, ``responses`` right-padded with
    the tokenizer's pad token, the score on each response's last token."""
    import numpy as np
    import torch

    DataProto = import_verl("verl").DataProto
    pad = tokenizer.pad_token_id
    p_ids = [tokenizer.encode(p, add_special_tokens=False) for p in prompts]
    r_ids = [tokenizer.encode(r, add_special_tokens=False) for r in responses]
    lp, lr = max(map(len, p_ids)), max(map(len, r_ids))
    prompt_t = torch.tensor([[pad] * (lp - len(x)) + x for x in p_ids])
    resp_t = torch.tensor([x + [pad] * (lr - len(x)) for x in r_ids])
    tls = torch.zeros(len(responses), lr)
    for i, (x, s) in enumerate(zip(r_ids, scores, strict=True)):
        tls[i, len(x) - 1] = s
    batch = DataProto.from_dict(
        tensors={"prompts": prompt_t, "responses": resp_t, "token_level_scores": tls},
        non_tensors={
            "reward_model": np.array([{"ground_truth": g} for g in gts], dtype=object),
        },
    )
    cls = trainer_class()
    me = _stand_in(step, tokenizer)
    cls._log_rollout_data(me, batch, extras or {}, {}, str(directory))
    cls._shutdown_dump_executor(me)
    return directory / f"{step}.jsonl"


#: One turn of an agent-loop transcript for :func:`agent_loop_response`: (role, content),
#: role ``assistant``, ``tool`` (a tool's response) or ``user`` (an interaction's reply).
AgentTurn = tuple[str, str]


def agent_loop_response(turns: list[AgentTurn]) -> str:
    """The completion text of a ChatML agent-loop transcript as the rollout's response
    tokens hold it: the first assistant turn (its header is the prompt's generation
    prompt), then each later turn under its own header, every turn closed by
    ``<|im_end|>``; a tool's response is a ``user`` turn wrapping it in
    ``<tool_response>`` (Qwen2.5's template). Fed to :func:`log_rollout_data`, verl's own
    ``_log_rollout_data`` tokenises and decodes it."""
    assert turns and turns[0][0] == "assistant", "the response starts in an assistant turn"
    parts = [turns[0][1] + "<|im_end|>"]
    for role, content in turns[1:]:
        if role == "tool":
            role, content = "user", f"<tool_response>\n{content}\n</tool_response>"
        parts.append(f"\n<|im_start|>{role}\n{content}<|im_end|>")
    return "".join(parts)
