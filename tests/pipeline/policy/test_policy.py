"""The tiny base policy: warm-start mixture, tokenizer, parameter budget, and what the session
fixture's (shorter) warm start produced."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from rcea.pipeline import toy

pytest.importorskip("transformers")


def test_warm_start_mixture_has_modes_variants_failures_and_slips() -> None:
    from rcea.pipeline.policy import Mixture, sample_example

    rng = random.Random(0)
    qs = toy.generate_questions("train", 200, seed=0)
    mix = Mixture()
    stats: Counter[str] = Counter()
    texts_by_mode: dict[tuple[str, str], set[str]] = {}
    n = 4000
    for i in range(n):
        q = qs[i % len(qs)]
        text = sample_example(rng, q, mix)
        r, v, mode = toy.verify(q, text), toy.process_valid(q, text), toy.strategy(q, text)
        stats[f"R{r}V{v}"] += 1
        stats[mode] += 1
        texts_by_mode.setdefault((q.question_id, mode), set()).add(text)
    # every text keeps an identifiable strategy; the first strategy of a kind ~60%
    assert stats[toy.UNKNOWN] == 0
    first = sum(stats[s] for s in ("add_first", "direct")) / n
    assert 0.55 < first < 0.65
    # failures at ~ error_rate x (1 - slip share), R=1/V=0 slips at ~ error_rate x slip share
    slip_share = mix.slip / (mix.arith + mix.slip + mix.operand + mix.boxed)
    assert stats["R1V0"] / n == pytest.approx(mix.error_rate * slip_share, abs=0.03)
    assert stats["R0V0"] / n == pytest.approx(mix.error_rate * (1 - slip_share), abs=0.04)
    # realisation variety inside a (question, mode)
    assert max(len(v) for v in texts_by_mode.values()) >= 4


def test_tokenizer_is_character_level_and_the_model_small() -> None:
    from rcea.pipeline.policy import build_char_tokenizer, build_model, n_parameters

    tok = build_char_tokenizer()
    text = toy.render_trajectory(toy.Question("sum_times", 3, 4, 5), "distribute", toy.VARIANTS[7])
    ids = tok(text)["input_ids"]
    assert len(ids) == len(text) and tok.decode(ids) == text
    assert tok.eos_token == "<eos>" and tok.pad_token == "<pad>" and len(tok) == 99
    assert 300_000 <= n_parameters(build_model(tok)) <= 2_000_000
    padded = build_char_tokenizer(pad_vocab_to=151_936)
    assert len(padded) == 151_936 and padded(text)["input_ids"] == ids


def test_session_base_has_modes_failures_and_boxed_answers(tiny_base: Path) -> None:
    meta = json.loads((tiny_base / "rcea_base.json").read_text())
    ev = meta["evaluation"]
    assert ev["boxed_rate"] > 0.9
    # the shortened warm start of the fixture: some successes, mostly failures
    assert 0.05 < ev["accuracy"] < 0.7
    assert meta["mixture"]["error_rate"] == 0.3
