"""The tiny base policy: a Qwen2-architecture causal LM of ~0.31 M parameters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

TINY_DEFAULTS: dict[str, Any] = {
    "hidden_size": 96,
    "intermediate_size": 256,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
}

# Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads / 2 KV heads, vocab 151,936).
QWEN25_05B_SHAPE: dict[str, Any] = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "vocab_size": 151936,
}


def model_config(tokenizer: Any, **overrides: Any):
    """A ``Qwen2Config`` for ``tokenizer`` (vocab, pad and eos ids taken from it)."""
    from transformers import Qwen2Config  # the `train` extra: only building a model needs it

    kwargs = {**TINY_DEFAULTS, "vocab_size": len(tokenizer), **overrides}
    return Qwen2Config(
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        **kwargs,
    )


def build_model(tokenizer: Any, seed: int = 0, **overrides: Any):
    """A randomly initialised model (deterministic for a seed)."""
    # the `train` extra: only building a model needs them
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(model_config(tokenizer, **overrides))
    gc = model.generation_config
    gc.eos_token_id = tokenizer.eos_token_id
    gc.pad_token_id = tokenizer.pad_token_id
    gc.bos_token_id = None
    return model


def n_parameters(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


#: Weight names of the token embeddings and the unembedding (the output head): the
#: scaling laws' N counts neither (Kaplan et al. 2020's non-embedding parameters).
EMBEDDING_NAMES: tuple[str, ...] = (
    "embed_tokens",
    "embed_in",
    "embed_out",
    "wte",
    "wpe",
    "word_embeddings",
    "lm_head",
)


def non_embedding_parameters(model_dir: Any) -> int | None:
    """The non-embedding parameters of the saved model in ``model_dir`` (the entropy law's
    N_params, docs/estimators.md item 18), read from its safetensors headers — shapes only,
    no weights are loaded: every tensor counted except those whose name contains one of
    :data:`EMBEDDING_NAMES` (a tied output head is not saved, so it is not counted twice).
    None when the directory holds no ``*.safetensors`` file (or safetensors, a dependency
    of transformers — the ``train`` extra — is not installed)."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    try:
        # optional (the train extra): a missing package means "size unknown", not an error
        from safetensors import safe_open
    except ImportError:
        return None
    if not files:
        return None
    total = 0
    for path in files:
        with safe_open(str(path), framework="numpy") as f:
            for name in f.keys():  # noqa: SIM118 — safe_open is no mapping: keys() is its API
                if any(part in name for part in EMBEDDING_NAMES):
                    continue
                n = 1
                for dim in f.get_slice(name).get_shape():
                    n *= int(dim)
                total += n
    return total
