"""End to end on the warm-started tiny base: a short `rcea train run` (base + 2 checkpoints),
then every `rcea probe` stage through the CLI; `rcea ingest` accepts the records and the
`rcea stats` commands summarise what the probe wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("trl")

from rcea.app.cli import app  # noqa: E402

runner = CliRunner()
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")


def _ok(args: list[str]) -> dict:
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.mark.slow
def test_tiny_run_probed_end_to_end(tiny_base: Path, tmp_path: Path) -> None:
    train = tmp_path / "train.toml"
    train.write_text(
        f"""
[model]
path = "{tiny_base}"
[objective]
name = "grpo"
[training]
output_dir = "{tmp_path / "run"}"
max_steps = 4
learning_rate = 5e-4
per_device_train_batch_size = 8
num_generations = 4
max_completion_length = 40
save_steps = 2
torch_threads = 1
"""
    )
    _ok(["train", "run", "--config", str(train)])
    cfg = tmp_path / "probe.toml"
    cfg.write_text(
        f"""
[probe]
k = 8
max_new_tokens = 48
torch_threads = 1
[questions]
n = 6
[checkpoints]
run_dirs = ["{tmp_path / "run"}"]
milestones = [0, 0.5, 1.0]
base_run = "base"
[covariance]
questions = 4
trajectories = 2
positions = 16
[bench]
max_new_tokens = 48
[[bench.sets]]
name = "toy-eval"
split = "eval"
n = 6
[bench.passk]
n = 4
k = [1, 2, 4]
"""
    )
    out = tmp_path / "probe"
    common = ["--config", str(cfg), "--out", str(out)]
    sample = _ok(["probe", "sample", *common, "--study", "e2e"])
    assert [(c["run"], c["step"]) for c in sample["checkpoints"]] == [
        ("base", 0),
        ("grpo", 2),
        ("grpo", 4),
    ]
    assert sample["units_run"] == 18
    entropy = _ok(["probe", "entropy", *common])
    assert entropy["units_run"] == 18
    cov = _ok(["probe", "covariance", *common, "--study", "e2e"])
    assert [t["transition"] for t in cov["info"]["transitions"]] == [
        "grpo/tiny/0->2",
        "grpo/tiny/2->4",
    ]
    bench = _ok(["probe", "bench", *common, "--study", "e2e"])
    assert {g["step"] for g in bench["info"]["greedy"]} == {0, 2, 4}
    (trace,) = bench["info"]["traces"]
    assert [p["step"] for p in trace["points"]] == [0, 2, 4]
    assert trace["run"] == "grpo" and trace["points"][-1]["progress"] == 1.0
    assert {p["label"] for p in bench["info"]["passk"]} == {
        "base--tiny--step0",
        "grpo--tiny--step4",
    }
    _ok(["probe", "curves", "--study", "e2e", str(tmp_path / "run")])

    ingest = runner.invoke(app, ["ingest", str(out / "records.jsonl"), "--study", "e2e"])
    assert ingest.exit_code == 0 and "ingested 144 trajectories, 6 questions" in ingest.output
    stats = _ok(
        [
            "stats",
            "entropy",
            str(out / "records.jsonl"),
            "--step",
            "4",
            "--run",
            "grpo",
            "--k-min",
            "2",
            "--n-boot",
            "200",
        ]
    )
    assert stats["n_questions"] == 6 and stats["mean_token_entropy"] > 0
    assert stats["max_abs_residual"] < 1e-9
    fit = _ok(["stats", "covfit", str(out / "TRANSITIONS.csv")])
    assert fit["pooled"]["n"] == 2
    passk = _ok(["stats", "passk", str(out / "RESULTS.csv"), "--k", "1,4"])
    assert passk["n_questions"] == 6

    from rcea.study.store import open_store, session_scope
    from rcea.study.store.measurements import list_measurements
    from rcea.study.store.repository import require_study

    with session_scope(open_store()) as s:
        study = require_study(s, name="e2e")
        kinds = sorted({m.kind for m in list_measurements(s, study_id=study.id)})
    assert kinds == [
        "accuracy_trace",
        "covariance_transition",
        "greedy_accuracy",
        "passk",
        "tail",
        "tail_trajectories",
        "training_curve",
    ]
    # everything is done: a second pass repeats nothing
    assert _ok(["probe", "sample", *common])["units_run"] == 0
    assert _ok(["probe", "covariance", *common])["units_run"] == 0
    assert _ok(["probe", "bench", *common])["units_run"] == 0
