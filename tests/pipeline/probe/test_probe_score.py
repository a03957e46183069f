"""``rcea probe score``: a study's existing trajectories scored under a tiny Qwen2-shaped
checkpoint (``tests/support/tiny_qwen.py``) on CPU — the stored per-token entropies, mean token
entropy and ``seq_logprob`` equal a direct teacher-forced computation with Transformers
(prompt = the stored question through the checkpoint's chat template); an interrupted run
resumes with the unscored trajectories only; the report then has token-level numbers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from rcea.app.cli import app
from tests.support.helpers import write_jsonl

QUESTIONS = {"q1": "What is 2+3?", "q2": "Compute 7*6."}
TEXTS = ["2+3 = 5. The answer is 5.", "So 7*6 = 42", "I think 41", "Let me see: 5"]


def records() -> list[dict[str, Any]]:
    out = []
    for q, question in QUESTIONS.items():
        for s, text in enumerate(TEXTS):
            out.append(
                {
                    "trajectory_id": f"r:m:s0:{q}:{s}",
                    "question_id": q,
                    "question": question,
                    "text": text,
                    "reward": int(s % 2 == 0),
                    "run": "r",
                    "model": "m",
                    "step": 0,
                    "seed": s,
                }
            )
    return out


def direct(ckpt: Path, question: str, text: str) -> tuple[np.ndarray, float]:
    """Per-token entropies and Σ log π(chosen) straight from the model's logits."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForCausalLM.from_pretrained(ckpt).eval()
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
    )
    p = tok(prompt, add_special_tokens=False)["input_ids"]
    c = tok(text, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([p + c])).logits[0, len(p) - 1 : len(p) - 1 + len(c)]
    logp = torch.log_softmax(logits.double(), -1)
    ent = -(logp.exp() * logp).sum(-1).numpy()
    chosen = logp[torch.arange(len(c)), torch.tensor(c)].sum().item()
    return ent, chosen


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.support.tiny_qwen import build_tiny_qwen

    return build_tiny_qwen(tmp_path_factory.mktemp("tiny") / "ckpt").path


def test_probe_score_writes_back_teacher_forced_numbers(
    ckpt: Path, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rcea.pipeline.chat import PromptFormat
    from rcea.pipeline.probe.score import Scorer
    from rcea.study.records.scoring import score_trajectories
    from rcea.study.settings import get_settings
    from rcea.study.store import Event, Trajectory, make_engine

    monkeypatch.setenv("RCEA_DATABASE_URL", store_url)
    monkeypatch.setenv("RCEA_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    runner = CliRunner()
    path = write_jsonl(tmp_path / "s.jsonl", records())
    assert runner.invoke(app, ["ingest", str(path), "--study", "s"]).exit_code == 0

    # An interrupted run: the first batch (3 trajectories) is committed, then it stops.
    class Interrupted(Scorer):
        calls = 0

        def score(self, items):  # type: ignore[no-untyped-def]
            Interrupted.calls += 1
            if Interrupted.calls > 1:
                raise KeyboardInterrupt
            return super().score(items)

    cfg = get_settings()
    eng = make_engine(store_url)
    with pytest.raises(KeyboardInterrupt):
        score_trajectories(
            eng,
            Interrupted(str(ckpt), prompt_format=PromptFormat()),
            study="s",
            run="r",
            model="m",
            step=0,
            artifacts_dir=cfg.artifacts_dir,
            data_dir=cfg.data_dir,
            batch=3,
        )
    args = ["probe", "score", "--study", "s", "--run", "r", "--model", "m", "--step", "0"]
    args += ["--checkpoint", str(ckpt), "--batch", "3", "--chunk-size", "5", "--json"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["n_selected"], out["n_scored"], out["n_already"], out["version"]) == (8, 5, 3, 1)
    again = runner.invoke(app, args[:-1])
    assert again.exit_code == 0 and "nothing to score: all 8 trajectories" in again.output

    with eng.connect() as conn:
        rows = conn.execute(
            sa.select(
                Trajectory.trajectory_id,
                Trajectory.question_id,
                Trajectory.text,
                Trajectory.mean_token_entropy,
                Trajectory.n_tokens,
                Trajectory.seq_logprob,
            ).order_by(Trajectory.id)
        ).all()
        (ev,) = conn.execute(sa.select(Event.payload).where(Event.kind == "probe.score")).all()
    eng.dispose()
    payload = ev[0] if isinstance(ev[0], dict) else json.loads(ev[0])
    assert payload["version"] == 1 and payload["n_scored"] == 5
    assert payload["chat_template_used"] is True
    exp = tmp_path / "out.jsonl"
    assert runner.invoke(app, ["export", "s", "--out", str(exp)]).exit_code == 0
    exported = {r["trajectory_id"]: r for r in map(json.loads, exp.read_text().splitlines())}
    for r in rows:
        ent, chosen = direct(ckpt, QUESTIONS[r.question_id], r.text)
        assert r.n_tokens == ent.size
        assert r.mean_token_entropy == pytest.approx(ent.mean(), abs=1e-4)
        assert r.seq_logprob == pytest.approx(chosen, abs=1e-3)
        assert exported[r.trajectory_id]["token_entropies"] == pytest.approx(ent, abs=1e-4)

    rep = runner.invoke(app, ["report", "build", "--study", "s", "--k-min", "1", "--json"])
    assert rep.exit_code == 0, rep.output
    (c,) = json.loads(rep.stdout)["checkpoints"]
    assert c["entropy"] is not None and c["entropy_error"] is None
    assert c["entropy"]["mean_token_entropy"] == pytest.approx(
        np.mean(
            [np.mean([r.mean_token_entropy for r in rows if r.question_id == q]) for q in QUESTIONS]
        )
    )


def test_probe_score_refuses_an_empty_selection(
    ckpt: Path, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rcea.study.settings import get_settings

    monkeypatch.setenv("RCEA_DATABASE_URL", store_url)
    monkeypatch.setenv("RCEA_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    runner = CliRunner()
    path = write_jsonl(tmp_path / "s.jsonl", records())
    assert runner.invoke(app, ["ingest", str(path), "--study", "s"]).exit_code == 0
    res = runner.invoke(
        app,
        ["probe", "score", "--study", "s", "--run", "r", "--model", "m", "--step", "9"]
        + ["--checkpoint", str(ckpt)],
    )
    assert res.exit_code != 0
    assert "no trajectories of run r, model m, step 9" in res.output
