"""A character-level tokenizer built in-process (no hub access), saved with the model.

Every printable ASCII character and the newline is one token; ``<pad>``, ``<eos>`` and
``<unk>`` are special. It is a byte-level BPE *without merges* in Transformers' Qwen2
tokenizer class, so each character stays one token. Using the Qwen2 class matters: for a
``qwen2`` model config, ``AutoTokenizer.from_pretrained`` (and vLLM, which calls it) always
instantiates ``Qwen2Tokenizer`` and re-applies its normaliser and byte-level
pre-tokeniser; building the tokenizer with the same pipeline makes the in-process and the
reloaded tokenizer identical.
"""

from __future__ import annotations

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
SPECIALS: tuple[str, ...] = (PAD, EOS, UNK)
CHARS: tuple[str, ...] = ("\n", *(chr(i) for i in range(32, 127)))


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable-unicode map (what ByteLevel pre-tokenises to)."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), 256)]
    cs = list(bs)
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


def _byte_symbol(ch: str) -> str:
    """Byte-level symbol of an ASCII character (space -> 'Ġ', newline -> 'Ċ')."""
    return _bytes_to_unicode()[ord(ch)]


def build_char_tokenizer(pad_vocab_to: int | None = None):
    """The tokenizer; ``pad_vocab_to`` appends filler tokens (``<extra_N>``) up to that size
    (used to give the GPU check a Qwen2.5-sized vocabulary)."""
    # the `train` extra: only building a model needs it
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for ch in CHARS:
        vocab[_byte_symbol(ch)] = len(vocab)
    if pad_vocab_to is not None:
        if pad_vocab_to < len(vocab):
            raise ValueError(f"pad_vocab_to={pad_vocab_to} is below the base vocab {len(vocab)}")
        for i in range(len(vocab), pad_vocab_to):
            vocab[f"<extra_{i}>"] = i
    return Qwen2Tokenizer(
        vocab=vocab,
        merges=[],
        unk_token=UNK,
        eos_token=EOS,
        pad_token=PAD,
        clean_up_tokenization_spaces=False,
        padding_side="left",
        model_max_length=512,
    )
