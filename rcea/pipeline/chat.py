"""Prompt formatting with the model's own tokenizer: chat template, system prompt, stop ids.

A question's prompt text becomes the token ids a policy is conditioned on in one of two ways:

* **chat** — the tokenizer has a chat template and the mode is ``"auto"``: the ids are
  ``tokenizer.apply_chat_template(messages, add_generation_prompt=True)`` with
  ``messages = [{"role": "system", "content": system}] (when a system prompt is set)
  + [{"role": "user", "content": prompt}]``; without a system prompt the template's own
  default applies (e.g. Qwen2.5's "You are Qwen, created by Alibaba Cloud…");
* **raw** — mode ``"none"`` (``--no-chat-template``, for base models) or a tokenizer without
  a template (the embedded toy's character tokenizer): ``tokenizer(prompt)["input_ids"]``.

TRL's GRPOTrainer renders conversational prompts with the same call, so training and probing
condition on identical ids (tested). Prompt ids are never part of a completion: every
entropy and ℓ is over completion tokens only.

Stop ids: the tokenizer's EOS plus every id in the model's ``generation_config.eos_token_id``
(Qwen2.5-Instruct ends a turn with ``<|im_end|>`` and also stops on ``<|endoftext|>``), as TRL
does. A completion ends at its first stop id (included); the pad id may differ from EOS.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

CHAT_MODES = ("auto", "none")


@dataclass(frozen=True)
class PromptFormat:
    """``chat_template``: ``"auto"`` (the tokenizer's template when it has one) or ``"none"``
    (raw prompt text); ``system``: the system message (None: the template's default)."""

    chat_template: str = "auto"
    system: str | None = None

    def __post_init__(self) -> None:
        if self.chat_template not in CHAT_MODES:
            raise ValueError(
                f"chat_template: one of {', '.join(CHAT_MODES)}, got {self.chat_template!r}"
            )

    def uses_chat(self, tokenizer: Any) -> bool:
        """True iff prompts for ``tokenizer`` go through its chat template."""
        return self.chat_template == "auto" and has_chat_template(tokenizer)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


RAW = PromptFormat("none")


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def messages(prompt: str, system: str | None = None) -> list[dict[str, str]]:
    """The conversation of one prompt: optional system message, then the user turn."""
    out = [{"role": "system", "content": system}] if system is not None else []
    return [*out, {"role": "user", "content": prompt}]


def chat_ids(tokenizer: Any, conversation: list[dict[str, str]]) -> list[int]:
    """``apply_chat_template(conversation, add_generation_prompt=True)`` as a list of ids."""
    enc = tokenizer.apply_chat_template(
        conversation, add_generation_prompt=True, tokenize=True, return_dict=True
    )
    ids = enc["input_ids"]
    return [int(i) for i in (ids.tolist() if hasattr(ids, "tolist") else ids)]


def encode_prompt(tokenizer: Any, prompt: str, fmt: PromptFormat = PromptFormat()) -> list[int]:
    """The ids the policy is conditioned on for ``prompt`` (module docstring)."""
    if fmt.uses_chat(tokenizer):
        return chat_ids(tokenizer, messages(prompt, fmt.system))
    if fmt.system is not None:
        raise ValueError(
            "a system prompt needs a chat template "
            + (
                "(it is switched off: --no-chat-template)"
                if fmt.chat_template == "none"
                else "and this tokenizer has none (drop the system prompt for a base model)"
            )
        )
    return [int(i) for i in tokenizer(prompt)["input_ids"]]


def training_prompt(tokenizer: Any, prompt: str, fmt: PromptFormat) -> Any:
    """The dataset ``prompt`` value for TRL: a conversation (TRL applies the chat template
    with ``add_generation_prompt=True``) or the raw text (TRL tokenises it)."""
    if fmt.uses_chat(tokenizer):
        return messages(prompt, fmt.system)
    encode_prompt(tokenizer, prompt, fmt)  # the same refusal as probing
    return prompt


def stop_token_ids(tokenizer: Any, generation_config: Any = None) -> list[int]:
    """The tokenizer's EOS first, then the generation config's other EOS ids."""
    out: list[int] = []
    if tokenizer.eos_token_id is not None:
        out.append(int(tokenizer.eos_token_id))
    extra = getattr(generation_config, "eos_token_id", None)
    if extra is not None:
        for i in [extra] if isinstance(extra, int) else list(extra):
            if int(i) not in out:
                out.append(int(i))
    if not out:
        raise ValueError("the tokenizer has no EOS token and the model declares none")
    return out


def completion_end(ids: list[int], stops: list[int]) -> int:
    """Length of a completion: up to and including its first stop id, else all of it."""
    stop = set(stops)
    for i, t in enumerate(ids):
        if t in stop:
            return i + 1
    return len(ids)
