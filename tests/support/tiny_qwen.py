"""A real-shaped local model for tests: a tiny random Qwen2 with a byte-level BPE tokenizer.

:func:`build_tiny_qwen` writes, offline and in about a second, a Hugging Face directory that
loads like a Qwen2.5-Instruct checkpoint (``AutoTokenizer``/``AutoModelForCausalLM``):

* tokenizer: byte-level BPE trained here with the ``tokenizers`` library on a small math
  corpus, with Qwen2's normaliser (NFC) and pre-tokeniser (its split regex + ByteLevel), so
  the ``Qwen2Tokenizer`` that ``AutoTokenizer`` builds for a ``qwen2`` config tokenises
  exactly as the tokenizer trained here; special tokens ``<|endoftext|>``, ``<|im_start|>``,
  ``<|im_end|>``; **eos = ``<|im_end|>`` ≠ pad = ``<|endoftext|>``** (as in Qwen2.5-Instruct);
  a ChatML chat template that adds a default system prompt when none is given;
* model: ``Qwen2ForCausalLM`` with tiny sizes and tied embeddings; ``generation_config``
  stops on ``[<|im_end|>, <|endoftext|>]`` (Qwen2.5-Instruct's list);
* ``eos_logit``: one embedding dimension is made constant and the end-of-turn token's entry
  in it raised (:func:`build_tiny_qwen`), so that (with tied embeddings) the random model
  ends a useful share of its completions with ``<|im_end|>`` instead of always running to
  the token limit.

Used by the real-model tests (probe, entropy, training) and reusable for other fixtures,
e.g. generating a verl-like rollout dump from a real tokenizer and chat template.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)
DEFAULT_SYSTEM = "You are a helpful assistant."

# ChatML as Qwen2.5 uses it (without the tool-calling branches).
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\n" + DEFAULT_SYSTEM + "<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] != 'system' or not loop.first %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

CORPUS = [
    "What is 3 + 4? Please reason step by step, and put your final answer within \\boxed{}.",
    "First add the numbers: 3 + 4 = 7. The answer is \\boxed{7}.",
    "Compute \\frac{1}{2} + \\frac{1}{3}. The sum is \\frac{5}{6}, so \\boxed{\\frac{5}{6}}.",
    "Let x = 2. Then x^2 + 1 = 5 and the final answer is \\boxed{5}.",
    "The area of a circle of radius 2 is 4\\pi square units.",
    "Solve 2x - 6 = 0 for x: x = 3.",
    "We multiply 12 by 11 to get 132; therefore the answer is 132.",
    "The probability is 0.25, that is 25\\%.",
    "You are a helpful assistant. Think carefully before answering.",
    "system user assistant",
]


@dataclass(frozen=True)
class TinyQwen:
    """Where the model was written and its special ids."""

    path: Path
    eos_id: int
    pad_id: int
    im_start_id: int
    vocab_size: int


def qwen2_pre_tokenizer() -> Any:
    """Qwen2's pre-tokeniser (``transformers``' ``Qwen2Tokenizer``): split regex + ByteLevel."""
    from tokenizers import Regex, pre_tokenizers
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def build_tokenizer(vocab_size: int = 400, corpus: list[str] | None = None) -> Any:
    """A ``PreTrainedTokenizerFast``: byte-level BPE trained on ``corpus``, ChatML template,
    eos ``<|im_end|>``, pad ``<|endoftext|>``."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = qwen2_pre_tokenizer()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator((corpus or CORPUS) * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        unk_token=None,
        bos_token=None,
        additional_special_tokens=[IM_START],
        clean_up_tokenization_spaces=False,
        model_max_length=512,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_qwen(
    out_dir: str | Path,
    *,
    seed: int = 0,
    vocab_size: int = 400,
    hidden_size: int = 64,
    layers: int = 2,
    eos_logit: float = 3.0,
    boost_token: str = IM_END,
    with_chat_template: bool = True,
) -> TinyQwen:
    """Build and ``save_pretrained`` the tokenizer and a random tiny Qwen2 in ``out_dir``.

    ``eos_logit`` raises ``boost_token`` (default the EOS ``<|im_end|>``; ``<|endoftext|>``
    makes completions end on the generation config's other stop id, which is also the pad
    id). ``with_chat_template=False`` saves the tokenizer without a template (a base
    model)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(vocab_size)
    if not with_chat_template:
        tok.chat_template = None
    eos, pad = tok.convert_tokens_to_ids(IM_END), tok.convert_tokens_to_ids(ENDOFTEXT)
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        initializer_range=0.2,
        eos_token_id=eos,
        pad_token_id=pad,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        # A constant first dimension: with tied embeddings every logit gets the same shift
        # from it except the end-of-turn token's, which is raised by ``eos_logit``.
        emb[:, 0] = 1.0
        emb[tok.convert_tokens_to_ids(boost_token), 0] = 1.0 + eos_logit
    gc = model.generation_config
    gc.eos_token_id = [eos, pad]
    gc.pad_token_id = pad
    gc.bos_token_id = None
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return TinyQwen(out, eos, pad, tok.convert_tokens_to_ids(IM_START), len(tok))
