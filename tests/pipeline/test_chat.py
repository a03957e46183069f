"""rcea.pipeline.chat on the tiny Qwen's BPE tokenizer (no model): prompt ids, refusals,
stop ids."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")

from rcea.pipeline.chat import (  # noqa: E402
    RAW,
    PromptFormat,
    completion_end,
    encode_prompt,
    stop_token_ids,
    training_prompt,
)
from tests.support.tiny_qwen import DEFAULT_SYSTEM, ENDOFTEXT, IM_END, build_tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def tok():  # type: ignore[no-untyped-def]
    return build_tokenizer()


def test_chat_and_raw_prompt_ids(tok) -> None:  # type: ignore[no-untyped-def]
    ids = encode_prompt(tok, "What is 3 + 4?")
    assert tok.decode(ids) == (
        f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n"
        "<|im_start|>user\nWhat is 3 + 4?<|im_end|>\n<|im_start|>assistant\n"
    )
    with_system = encode_prompt(tok, "What is 3 + 4?", PromptFormat(system="Be brief."))
    assert tok.decode(with_system).startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
    assert encode_prompt(tok, "What is 3 + 4?", RAW) == tok("What is 3 + 4?")["input_ids"]
    assert training_prompt(tok, "Q?", PromptFormat(system="S")) == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Q?"},
    ]
    assert training_prompt(tok, "Q?", RAW) == "Q?"


def test_system_prompt_needs_a_template(tok) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="switched off"):
        encode_prompt(tok, "Q?", PromptFormat("none", "S"))
    base = build_tokenizer()
    base.chat_template = None
    assert encode_prompt(base, "Q?") == base("Q?")["input_ids"]
    with pytest.raises(ValueError, match="this tokenizer has none"):
        training_prompt(base, "Q?", PromptFormat(system="S"))
    with pytest.raises(ValueError, match="chat_template: one of auto, none"):
        PromptFormat("always")


def test_stop_ids_and_completion_end(tok) -> None:  # type: ignore[no-untyped-def]
    eos, pad = tok.convert_tokens_to_ids(IM_END), tok.convert_tokens_to_ids(ENDOFTEXT)
    assert stop_token_ids(tok) == [eos]
    assert stop_token_ids(tok, SimpleNamespace(eos_token_id=[pad, eos])) == [eos, pad]
    assert stop_token_ids(tok, SimpleNamespace(eos_token_id=eos)) == [eos]
    assert completion_end([5, 6, eos, pad, pad], [eos]) == 3
    assert completion_end([5, pad, 7], [eos, pad]) == 2
    assert completion_end([5, 6, 7], [eos]) == 3
