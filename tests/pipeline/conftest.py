"""A tiny base policy built once per test session: the default recipe with a shorter warm start
(1,000 instead of 1,500 steps; about 25% probe accuracy), good enough for GRPO to be in the
entropy-collapse regime that the KL-Cov check needs."""

from __future__ import annotations

from pathlib import Path

import pytest

QUICK_SFT_STEPS = 1000  # ~25% probe accuracy: enough for the entropy-collapse regime


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("trl")
    import torch

    from pipeline.policy import build_base

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("base") / "tiny"
    build_base(out, seed=0, sft_steps=QUICK_SFT_STEPS, eval_questions=8, eval_k=4, progress=False)
    return out
