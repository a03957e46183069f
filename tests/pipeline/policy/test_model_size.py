"""The entropy law's N (docs/estimators.md item 18): non-embedding parameters read from a
saved model's safetensors headers, against the loaded model's own count, and recorded by
``rcea probe curves`` as the training curve's ``n_params``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")


@pytest.mark.parametrize(
    ("shape", "tied"),
    [({}, True), ({"hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 4}, False)],
)
def test_non_embedding_parameters_of_a_saved_model(
    tmp_path: Path, shape: dict[str, int], tied: bool
) -> None:
    from rcea.pipeline.policy import build_char_tokenizer, build_model
    from rcea.pipeline.policy.model import non_embedding_parameters

    tok = build_char_tokenizer()
    model = build_model(tok, **shape, tie_word_embeddings=tied)
    model.save_pretrained(tmp_path)
    # every parameter of the module tree, less the token embedding and the output head
    # (counted once when tied), as torch itself counts them
    total = sum(p.numel() for p in model.parameters())
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    want = total - embed.numel() - (0 if head is embed else head.numel())
    assert non_embedding_parameters(tmp_path) == want
    if not shape:  # the demo's tiny-s: 314,880 parameters less its 99 × 96 embedding
        assert want == 314_880 - 99 * 96
    assert non_embedding_parameters(tmp_path / "nothing-here") is None


def test_probe_curves_record_the_base_models_size(tmp_path: Path) -> None:
    from rcea.pipeline.policy import build_char_tokenizer, build_model
    from rcea.pipeline.policy.model import non_embedding_parameters
    from rcea.pipeline.probe.curves import training_curve

    base = tmp_path / "base"
    build_model(build_char_tokenizer()).save_pretrained(base)
    run = tmp_path / "run"
    run.mkdir()
    (run / "curves.jsonl").write_text('{"step": 1, "progress": 1.0, "entropy": 0.4}\n')
    meta = {"config": {"objective": "grpo", "model": {"path": str(base)}}}
    (run / "run.json").write_text(json.dumps(meta))
    assert training_curve(run, model="tiny-s").payload["n_params"] == non_embedding_parameters(base)
    meta["config"]["model"]["path"] = str(tmp_path / "gone")  # a base moved away: no size
    (run / "run.json").write_text(json.dumps(meta))
    assert "n_params" not in training_curve(run, model="tiny-s").payload
