"""``rcea import trainlog`` on logs written by the peers' own loggers: a tiny CPU run of
TRL's trainer (its TensorBoard callback and ``trainer_state.json``), transformers'
``TensorBoardCallback`` with validation logs (what TRL reports through), and verl's own
``Tracking`` logger; the values read back are those TensorBoard's own reader finds
(docs/stats.md, docs/estimators.md item 18)."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)

from rcea.app.cli import app  # noqa: E402
from rcea.pipeline.event_curves import event_dirs  # noqa: E402
from rcea.pipeline.importers.trainlog import TrainLogError, read_trainlog  # noqa: E402
from tests.support.verl_env import import_verl  # noqa: E402

runner = CliRunner()


def _scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def _same(got: list[tuple[int, float | None]], ref: list[tuple[int, float]]) -> None:
    assert [s for s, _ in got] == [s for s, _ in ref]
    for (_, v), (_, r) in zip(got, ref, strict=True):
        assert (v is None and math.isnan(r)) or v == pytest.approx(r, rel=1e-7)


def test_verl_tracking_tensorboard_logs(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    tracking = import_verl("verl.utils.tracking")
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    tr = tracking.Tracking(project_name="p", experiment_name="e", default_backend=["tensorboard"])
    for step in range(1, 13):
        data = {"actor/entropy": 1.2 / step + 0.1, "critic/score/mean": 0.3}
        if step % 4 == 0:  # validation every 4 steps, two data sources, n = 4 samples
            data |= {
                "val-core/openai/gsm8k/acc/mean@4": 0.1 * step / 4,
                "val-aux/openai/gsm8k/acc/mean@2": 0.9,
                "val-core/math500/reward/mean@4": 0.05 * step / 4,
            }
        tr.log(data, step=step)
    tr.logger["tensorboard"].finish()
    log = read_trainlog(tmp_path / "tb")
    ref = _scalars(tmp_path / "tb")
    assert log.flavour == "verl"
    assert log.mapping["global"] == "actor/entropy"
    assert log.mapping["accuracy"] == [
        "val-core/math500/reward/mean@4",
        "val-core/openai/gsm8k/acc/mean@4",
    ]
    _same(log.entropy["global"], ref["actor/entropy"])
    _same(log.accuracy["openai/gsm8k"], ref["val-core/openai/gsm8k/acc/mean@4"])
    out = tmp_path / "trace.csv"
    res = runner.invoke(
        app,
        ["import", "trainlog", str(tmp_path / "tb"), "--model", "7B", "--run", "grpo",
         "--out", str(out), "--n-params", "7e9", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    body = json.loads(res.stdout)
    assert body["mapping"]["accuracy_kind"] == "validation"
    rows = list(csv.DictReader(out.open()))
    acc = {int(r["step"]): float(r["accuracy"]) for r in rows if r["accuracy"]}
    # R is the mean over the two sources at the steps both have
    assert acc[8] == pytest.approx((0.2 + 0.1) / 2, rel=1e-6)
    law = runner.invoke(app, ["stats", "entropy-law", str(out), "--json"])
    assert law.exit_code == 0, law.output
    assert json.loads(law.stdout)["runs"][0]["n"] == 3


def test_transformers_tensorboard_callback_with_validation(tmp_path: Path) -> None:
    from transformers import TrainerControl, TrainerState, TrainingArguments
    from transformers.integrations import TensorBoardCallback

    args = TrainingArguments(output_dir=str(tmp_path), report_to="tensorboard")
    cb = TensorBoardCallback()
    state = TrainerState()
    cb.on_train_begin(args, state, TrainerControl())  # OUTPUT_DIR/runs/<stamp>, as in training
    for step in range(1, 9):
        state.global_step = step
        logs = {"entropy": 1.0 / step, "reward": 0.2 + 0.01 * step, "loss": 1.5}
        logs["rcea/token_entropy_success"] = math.nan if step == 2 else 0.8 / step
        cb.on_log(args, state, TrainerControl(), logs=logs)
        if step % 2 == 0:
            cb.on_log(args, state, TrainerControl(), logs={"eval_reward": 0.05 * step})
    cb.tb_writer.close()
    log = read_trainlog(tmp_path)
    assert log.flavour == "trl"
    assert log.mapping["global"] == "train/entropy"
    assert log.mapping["accuracy"] == ["eval/reward"]
    assert log.mapping["accuracy_kind"] == "validation"
    assert log.mapping["success"] == "train/rcea/token_entropy_success"
    (folder,) = event_dirs(tmp_path)
    _same(log.accuracy["eval_reward"], _scalars(folder)["eval/reward"])
    assert dict(log.entropy["success"])[2] is None  # NaN stays undefined
    # an explicit mapping wins and is recorded as given; a wrong key is named
    given = read_trainlog(tmp_path, accuracy_keys=["train/reward"])
    assert given.mapping["accuracy_kind"] == "given" and "accuracy" in given.mapping["given"]
    with pytest.raises(TrainLogError, match="'train/nope' is not in the log"):
        read_trainlog(tmp_path, entropy_key="train/nope")
    with pytest.raises(TrainLogError, match=r"not in \[0, 1\]"):
        read_trainlog(tmp_path, accuracy_keys=["train/loss"])


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
def test_tiny_trl_run_event_files_and_trainer_state(
    tmp_path: Path,
    engine,
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    pytest.importorskip("trl")
    from rcea.pipeline.training.config import parse_config
    from rcea.pipeline.training.run import run_training
    from tests.support.small_base import build_small_base

    base = build_small_base(tmp_path / "base")
    out = tmp_path / "run"
    cfg = parse_config(
        {
            "model": {"path": str(base)},
            "objective": {"name": "grpo"},
            "training": {
                "output_dir": str(out), "max_steps": 4, "learning_rate": 5e-4,
                "per_device_train_batch_size": 8, "num_generations": 4,
                "max_completion_length": 16, "save_steps": 4, "seed": 3,
                "torch_threads": 1, "progress_bar": False,
            },
        }
    )  # fmt: skip
    run_training(cfg, progress=False)
    (folder,) = event_dirs(out)
    ref = _scalars(folder)
    log = read_trainlog(out)
    assert log.flavour == "trl" and log.mapping["global"] == "train/entropy"
    assert log.mapping["accuracy"] == ["train/reward"]  # no eval: the training reward, said so
    assert log.mapping["accuracy_kind"] == "training reward"
    _same(log.entropy["global"], ref["train/entropy"])
    _same(log.accuracy["train_reward"], ref["train/reward"])
    assert log.mapping["success"] == "train/rcea/token_entropy_success"

    state_file = out / "checkpoint-4" / "trainer_state.json"
    st = read_trainlog(state_file)
    history = json.loads(state_file.read_text())["log_history"]
    assert st.flavour == "trl-state" and st.mapping["global"] == "entropy"
    assert [v for _, v in st.entropy["global"]] == pytest.approx(
        [h["entropy"] for h in history if "entropy" in h]
    )

    os.environ.pop("RCEA_PROGRESS", None)
    monkeypatch.setenv("RCEA_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    res = runner.invoke(
        app, ["import", "trainlog", str(out), "--model", "tiny", "--study", "tl", "--json"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["recorded"] == 2
    law = runner.invoke(app, ["stats", "entropy-law", "--study", "tl", "--json"])
    assert law.exit_code == 0, law.output
    run = json.loads(law.stdout)["runs"][0]
    assert run["run"] == "run" and run["n"] == 4 and run["entropy_keys"]["global"] == "entropy"


def test_unmapped_log_and_bad_options_fail_in_one_line(tmp_path: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
    writer.add_scalar("something/else", 0.5, 1)
    writer.close()
    res = runner.invoke(
        app, ["import", "trainlog", str(tmp_path / "tb"), "--model", "m", "--out",
              str(tmp_path / "t.csv"), "--json"],
    )  # fmt: skip
    body = json.loads(res.stdout)
    assert res.exit_code == 1 and body["ok"] is False
    assert "no entropy key found" in body["error"] and "--entropy-key" in body["error"]
    assert not (tmp_path / "t.csv").exists()  # nothing half-written
    res = runner.invoke(app, ["import", "trainlog", str(tmp_path / "tb"), "--model", "m"])
    assert res.exit_code == 1 and "give --study" in res.output
    res = runner.invoke(
        app, ["import", "trainlog", str(tmp_path / "nope"), "--model", "m", "--out", "x.csv"]
    )
    assert res.exit_code == 1 and "no such file or directory" in res.output


def test_two_training_seeds_are_two_traces_in_a_study(tmp_path: Path, engine, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``--train-seed`` (docs/estimators.md item 17): two seeds of one run and model are
    recorded side by side (neither replaces the other) and fitted per seed, each with the
    law its own points give (numpy's least squares here)."""
    import numpy as np
    from torch.utils.tensorboard import SummaryWriter

    truth = {1: (0.1, 0.9), 2: (0.2, 1.0)}  # seed → (a, b) of R = −a·exp(H) + b
    for seed, (a, b) in truth.items():
        writer = SummaryWriter(log_dir=str(tmp_path / f"tb{seed}"))
        for step in range(1, 9):
            h = 1.0 / step
            writer.add_scalar("actor/entropy", h, step)
            writer.add_scalar("val-core/toy/acc/mean@1", -a * math.exp(h) + b, step)
        writer.close()
    monkeypatch.setenv("RCEA_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    for seed in truth:
        res = runner.invoke(
            app, ["import", "trainlog", str(tmp_path / f"tb{seed}"), "--run", "grpo",
                  "--model", "m", "--study", "seeds", "--train-seed", str(seed), "--json"],
        )  # fmt: skip
        assert res.exit_code == 0, res.output
    law = runner.invoke(app, ["stats", "entropy-law", "--study", "seeds", "--json"])
    assert law.exit_code == 0, law.output
    runs = {r["run"]: r for r in json.loads(law.stdout)["runs"]}
    assert sorted(runs) == ["grpo [train seed 1]", "grpo [train seed 2]"]
    for seed, (a, b) in truth.items():
        h = 1.0 / np.arange(1, 9)
        slope, intercept = np.polyfit(np.exp(h), -a * np.exp(h) + b, 1)
        fit = runs[f"grpo [train seed {seed}]"]
        assert (fit["a"], fit["b"]) == pytest.approx((-slope, intercept), rel=1e-4)
    bad = runner.invoke(
        app, ["import", "trainlog", str(tmp_path / "tb1"), "--model", "m", "--study", "seeds",
              "--train-seed", "-1"],
    )  # fmt: skip
    assert bad.exit_code == 1 and "--train-seed must be an integer >= 0" in bad.output
